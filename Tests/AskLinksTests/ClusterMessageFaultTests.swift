import AskRelayTesting
import AskTestKit
import Foundation
import Testing

/// Message faults on the links of a real cluster: a broker, a limits worker and in-process centers.
@Suite("message faults in a cluster", .serialized, .timeLimit(.minutes(2)))
struct ClusterMessageFaultTests {
    @Test(
        "a guardian's answer dropped once on its link is sent again by the center, taken by the broker, and reaches the child once",
        .askRelayCluster(links: true)
    )
    func droppedAnswerIsRetried() async throws {
        let cluster = try #require(AskRelayCluster.current)
        try await withCenters(cluster) { app, guardians in
            let link = try cluster.link(for: guardians)
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let fault = LinkMessageFault(.drop, .toBroker, command: .send, kind: "answer", count: 1)
            link.apply(fault)

            let question = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(question)
            try await app.child("c1-1").send(question.id)
            let delivered = try #require(await questions.first { $0.id == question.id })
            // Returns once the broker acknowledged the answer: the retry, since the first SEND never reached it.
            try await delivered.answer(PermissionChoice.approve.id)
            let counters = link.counters[fault]
            #expect(counters.dropped == 1 && counters.matched >= 2, "\(link.counters)")
            #expect(try #require(await responses.first { $0.question.id == question.id }).choice == .approve)
            let entry = try await cluster.waitForLedger(question.id) { $0.state == .answered }
            #expect(entry.answeredBy == "g1-1")

            // Positive evidence that no second response is on its way: the marker's response came after it.
            let marker = try await markerFlow(app: app, guardians: guardians, responses: responses)
            let answered = responses.all.map(\.question.id)
            #expect(answered.filter { $0 == question.id }.count == 1, "\(answered)")
            #expect(answered.contains(marker))
            // The marker's answer matched too and passed: the count was used up.
            #expect(link.counters[fault].dropped == 1 && link.counters[fault].matched >= 3)
            link.heal(.message(fault))
            #expect(link.faults.isEmpty)
        }
    }

    @Test(
        "a DELIVER of a response duplicated on the child's link reaches the app once; the counters show the copy was sent",
        .askRelayCluster(links: true)
    )
    func duplicatedResponseReachesTheAppOnce() async throws {
        let cluster = try #require(AskRelayCluster.current)
        try await withCenters(cluster) { app, guardians in
            let link = try cluster.link(for: app)
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let fault = LinkMessageFault(.duplicate, .fromBroker, command: .deliver, kind: "response", count: 1)
            link.apply(fault)
            let before = await connectionCounters(app)

            let question = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(question)
            try await app.child("c1-1").send(question.id)
            _ = try #require(await questions.first { $0.id == question.id })
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.decline.id, as: "g1-2")
            #expect(try #require(await responses.first { $0.question.id == question.id }).choice == .decline)
            #expect(await link.wait { $0[fault].duplicated == 1 && $0.heldFromBroker == 0 })
            #expect(link.counters.duplicatedFromBroker > 0, "\(link.counters)")

            // The copy came right behind the original on the same connection, so before the marker's response.
            let marker = try await markerFlow(app: app, guardians: guardians, responses: responses)
            let answered = responses.all.map(\.question.id)
            #expect(answered.filter { $0 == question.id }.count == 1, "\(answered)")
            #expect(answered.contains(marker))
            // The center's connection saw the copy and dropped it as already seen.
            let after = await connectionCounters(app)
            #expect(after.duplicates == before.duplicates + 1, "before \(before.duplicates), after \(after.duplicates)")
        }
    }

    @Test(
        "with CURVE a message fault is refused: the supervisor can know before, the link says so once, and it does nothing",
        .askRelayCluster(curve: true, links: true)
    )
    func curveRefusesMessageFaults() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let fault = LinkFault.message(LinkMessageFault(.drop, .toBroker, command: .send, kind: "answer"))
        // What a supervisor checks before it starts anything.
        #expect(fault.refusal(curve: cluster.curve != nil)?.hasPrefix("message fault refused: CURVE") == true)
        try await withCenters(cluster) { app, guardians in
            let link = try cluster.link(for: guardians)
            // The link saw the CURVE greeting of the open connection.
            #expect(link.refusal(of: fault) != nil)
            #expect(link.counters.unreadable == 1)
            link.apply(fault)
            #expect(link.counters.messages.refused == 1, "\(link.counters)")

            // The answer is not dropped: the fault cannot see it.
            let responses = Collected(app.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let question = PermissionQuestion(handle: handle())
            try await app.child("c1-1").ask(question)
            try await app.child("c1-1").send(question.id)
            let delivered = try #require(await questions.first { $0.id == question.id })
            try await delivered.answer(PermissionChoice.approve.id)
            #expect(try #require(await responses.first { $0.question.id == question.id }).choice == .approve)
            #expect(link.counters.messages.matched == 0 && link.counters.messages.dropped == 0)
            #expect(
                cluster.logs.first { $0.name == "clients" }?.text.contains(
                    "link guardiancenter-1: message fault refused: CURVE"
                ) == true
            )
        }
    }
}

/// The counters of `app`'s connection, read on its thread.
func connectionCounters(_ app: AskCenter) async -> WorkerCounters {
    await withCheckedContinuation { continuation in
        app.readConnectionCounters { continuation.resume(returning: $0) }
    }
}
