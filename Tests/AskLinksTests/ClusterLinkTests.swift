import AskRelayTesting
import AskTestKit
import Foundation
import Testing

/// Links between real AskRelay processes and their broker, through the cluster harness.
@Suite("links in a cluster", .serialized, .timeLimit(.minutes(2)))
struct ClusterLinkTests {
    @Test(
        "through links without a fault the whole flow works: ask, send, answer, response",
        .askRelayCluster(links: true)
    )
    func fullFlowThroughLinks() async throws {
        let cluster = try #require(AskRelayCluster.current)
        try await withCenters(cluster) { app, guardians in
            #expect(cluster.linkNames == ["limits", "askcenter-1", "guardiancenter-1"])
            #expect(try cluster.link(for: app).name == "askcenter-1")
            #expect(try cluster.link(for: guardians).name == "guardiancenter-1")
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let question = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(question)
            try await app.child("c1-1").send(question.id)
            let delivered = try #require(await questions.first { $0.id == question.id })
            try await delivered.answer(PermissionChoice.approve.id)
            let response = try #require(await responses.first { $0.question.id == question.id })
            #expect(response.choice == .approve)
            #expect(try await cluster.waitForLedger(question.id) { $0.state == .answered }.answeredBy != nil)
            // Every byte went through a link, and each link carried one connection.
            for name in cluster.linkNames {
                let counters = try cluster.link(name).counters
                #expect(counters.bytesToBroker > 0 && counters.bytesFromBroker > 0, "\(name): \(counters)")
                #expect(counters.accepted == 1 && counters.resets == 0, "\(name): \(counters)")
            }
        }
        #expect(throws: ClusterError.self) { try cluster.link("nothing") }
    }

    @Test("a worker process the cluster starts gets a link too: an askrelay-parent answers through it")
    func parentProcessThroughItsLink() async throws {
        var options = AskRelayCluster.Options(transport: .ipc)
        options.links = true
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        _ = try await cluster.startParent(["--guardian", "g1-1@f1", "--policy", "deny", "--think", "fixed:0s"])
        let link = try cluster.link("parent-1")
        #expect(link.ipcEndpoint == "ipc://\(cluster.folder)/link-parent-1.ipc")
        let app = try cluster.makeAskCenter()
        let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
        let question = PermissionQuestion(handle: handle())
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        #expect(try #require(await responses.first { $0.question.id == question.id }).choice == .decline)
        #expect(link.counters.bytesToBroker > 0 && link.counters.accepted == 1, "\(link.counters)")
        await app.stop()
    }

    @Test(
        "partition fromBroker on a guardian center's link: disconnected, then after heal registered again, and a question sent meanwhile is answered once",
        .askRelayCluster(links: true)
    )
    func oneWayPartitionFromBroker() async throws {
        let cluster = try #require(AskRelayCluster.current)
        try await withCenters(cluster) { app, guardians in
            let link = try cluster.link(for: guardians)
            let events = Collected(guardians.events())
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let registrations = guardians.registrationCount
            let before = link.counters

            link.partition(.fromBroker)
            // The center still talks (its heartbeats reach the broker) but hears nothing: after its liveness
            // window it gives the session up and starts over on a fresh socket, which is a new connection here.
            #expect(await link.wait { $0.accepted > before.accepted })
            #expect(!guardians.isConnected)
            #expect(link.counters.bytesToBroker > before.bytesToBroker, "the broker heard nothing: \(link.counters)")
            #expect(link.counters.heldFromBroker > 0, "\(link.counters)")

            let question = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(question)
            try await app.child("c1-1").send(question.id)
            _ = try await cluster.waitForLedger(question.id) { $0.state == .sent }
            #expect(guardians.registrationCount == registrations)

            link.heal()
            #expect(await guardians.waitForRegistration(after: registrations, timeout: .seconds(30)))
            let delivered = await events.first {
                if case .question(let q) = $0 { q.id == question.id && q.guardian.id == "g1-1" } else { false }
            }
            guard case .question(let asked) = delivered else {
                Issue.record("the question sent during the partition never reached g1-1: \(events.all)")
                return
            }
            try await asked.answer(PermissionChoice.approve.id)
            #expect(try #require(await responses.first { $0.question.id == question.id }).choice == .approve)
            let entry = try await cluster.waitForLedger(question.id) { $0.state == .answered }
            #expect(entry.answeredBy == "g1-1")

            // Positive evidence that nothing came twice: a marker question after it, through the same queues.
            let marker = try await markerFlow(app: app, guardians: guardians, responses: responses)
            _ = await events.first { if case .question(let q) = $0 { q.id == marker } else { false } }
            let asks = events.all.compactMap {
                if case .question(let q) = $0, q.id == question.id { q.guardian.id } else { nil }
            }
            #expect(asks.sorted() == ["g1-1", "g1-2"], "\(asks)")
            let answered = responses.all.map(\.question.id)
            #expect(answered.filter { $0 == question.id }.count == 1, "\(answered)")
            #expect(answered.contains(marker))
        }
    }

    @Test(
        "delay 100 ms on the limits link moves ask→presented by at least 100 ms against the same ask without it",
        .askRelayCluster(links: true)
    )
    func delayOnTheLimitsLink() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        #expect(await app.waitUntilRegistered())
        let limits = try cluster.link("limits")
        func askTime() async throws -> Duration {
            let question = PermissionQuestion(handle: handle())
            let start = ContinuousClock.now
            try await app.child("c1-1").ask(question)
            return ContinuousClock.now - start
        }
        _ = try await askTime()  // the first ask warms the path
        var plain: [Duration] = []
        for _ in 0..<3 { plain.append(try await askTime()) }
        limits.delay(.milliseconds(100))
        let delayed = try await askTime()
        limits.heal()
        let fastest = try #require(plain.min())
        print("links: ask→presented without a delay \(plain), with 100 ms on the limits link \(delayed)")
        // Only the lower bound: the delay is added to the ask's path (broker → limits → broker), at least once.
        #expect(delayed >= fastest + .milliseconds(100), "without: \(plain), with the delay: \(delayed)")
        #expect(
            cluster.logs.first { $0.name == "clients" }?.text.contains(
                "link limits: delay 100ms both starts until healed"
            ) == true
        )
        await app.stop()
    }

    @Test(
        "reset on a center's link: the center reconnects and nothing acknowledged is lost",
        .askRelayCluster(links: true)
    )
    func resetACentersLink() async throws {
        let cluster = try #require(AskRelayCluster.current)
        try await withCenters(cluster) { app, guardians in
            let appLink = try cluster.link(for: app)
            let guardianLink = try cluster.link(for: guardians)
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)

            // 1. The child's link is reset after its SEND was acknowledged and the guardian has the question; the
            // answer is given while the child reconnects. Its response still comes, once.
            let first = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(first)
            try await app.child("c1-1").send(first.id)
            _ = try #require(await questions.first { $0.id == first.id })
            let appRegistrations = app.registrationCount
            #expect(appLink.reset() == 1)
            try await guardians.answer(questionID: first.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
            #expect(try #require(await responses.first { $0.question.id == first.id }).choice == .approve)
            #expect(await app.waitForRegistration(after: appRegistrations, timeout: .seconds(30)))

            // 2. The guardians' link is reset after a question reached them and before they answered: the answer
            // after the reconnect is taken, and the response comes once.
            let second = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(second)
            try await app.child("c1-1").send(second.id)
            _ = try #require(await questions.first { $0.id == second.id })
            let guardianRegistrations = guardians.registrationCount
            #expect(guardianLink.reset() == 1)
            #expect(await guardians.waitForRegistration(after: guardianRegistrations, timeout: .seconds(30)))
            try await guardians.answer(questionID: second.id, choiceID: PermissionChoice.decline.id, as: "g1-2")
            #expect(try #require(await responses.first { $0.question.id == second.id }).choice == .decline)

            // 3. A SEND acknowledged just before a reset is in the ledger and reaches the guardians.
            let third = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(third)
            try await app.child("c1-1").send(third.id)
            #expect(appLink.reset() == 1)
            #expect(guardianLink.reset() == 1)
            _ = try #require(await questions.first { $0.id == third.id })
            try await guardians.answer(questionID: third.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
            #expect(try #require(await responses.first { $0.question.id == third.id }).choice == .approve)

            for (question, by) in [(first, "g1-1"), (second, "g1-2"), (third, "g1-1")] {
                #expect(try await cluster.waitForLedger(question.id) { $0.state == .answered }.answeredBy == by)
            }
            let marker = try await markerFlow(app: app, guardians: guardians, responses: responses)
            let answered = responses.all.map(\.question.id)
            for question in [first.id, second.id, third.id, marker] {
                #expect(answered.filter { $0 == question }.count == 1, "\(question): \(answered)")
            }
            #expect(appLink.counters.resets == 2 && guardianLink.counters.resets == 2)
        }
    }
}

/// A handle of its own for each question (the limits worker keeps per-handle state).
func handle() -> CommunicationHandle {
    CommunicationHandle(value: "+1555\(UInt32.random(in: 1_000_000...9_999_999))", kind: .phoneNumber)
}

func questions(of guardians: GuardianCenter) -> Collected<GuardianCenter.Question> {
    Collected(guardians.events()) { if case .question(let question) = $0 { question } else { nil } }
}

/// Runs `body` with the cluster's AskCenter and GuardianCenter, both registered, and stops both however it ends.
func withCenters(
    _ cluster: AskRelayCluster,
    _ body: (AskCenter, GuardianCenter) async throws -> Void
) async throws {
    let app = try cluster.makeAskCenter()
    let guardians: GuardianCenter
    do { guardians = try cluster.makeGuardianCenter() } catch {
        await app.stop()
        throw error
    }
    do {
        let appRegistered = await app.waitUntilRegistered()
        let guardiansRegistered = await guardians.waitUntilRegistered()
        try #require(appRegistered && guardiansRegistered)
        try await body(app, guardians)
    } catch {
        await app.stop()
        await guardians.stop()
        throw error
    }
    await app.stop()
    await guardians.stop()
}

/// Positive evidence that nothing more is on its way: a marker question, asked, sent and approved by `g1-1`; its
/// question and response take the same queues as a late copy would, so once its response came, any copy came first.
/// - Returns: the marker's id.
func markerFlow(
    app: AskCenter,
    guardians: GuardianCenter,
    responses: Collected<PermissionResponse<CommunicationTopic>>
) async throws -> UUID {
    let marker = PermissionQuestion(handle: handle())
    let delivered = questions(of: guardians)
    try await app.child("c1-1").ask(marker)
    try await app.child("c1-1").send(marker.id)
    try #require(await delivered.first { $0.id == marker.id } != nil, "the marker question never came")
    try await guardians.answer(questionID: marker.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
    try #require(await responses.first { $0.question.id == marker.id } != nil, "the marker's response never came")
    return marker.id
}
