import AskAgents
import AskClient
import AskLogging
import AskProtocol
import AskRelayCluster
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// Real processes around one broker: an ``AskRelayCluster`` (`askrelay-broker`, `askrelay-limits` with a state
/// file, 200 ms heartbeats) and the parent workers a test adds; the test itself plays the child app through
/// `AskCenter`. Everything is stopped by `stop()`.
// @unchecked: built once, then only read; the cluster stops its processes.
final class ProcessWorld: @unchecked Sendable {
    /// The test's own files: the limits state, the parents' records, the centers' state.
    let directory: TempDirectory
    let cluster: AskRelayCluster
    var endpoint: String { cluster.endpoint }
    var context: ZMQContext { cluster.context.zmq }

    static let state = """
        {"children": {
          "off": {"limitsEnabled": false}, "nosync": {"contactSyncSetUp": false}, "inel": {"eligible": false},
          "known": {"knownHandles": [{"kind": "phoneNumber", "value": "+14155550100"}]}
        }}
        """

    init() throws {
        directory = TempDirectory(prefix: "askrelay-world")
        let path = directory.path + "/limits-state.json"
        try Self.state.write(toFile: path, atomically: true, encoding: .utf8)
        var options = AskRelayCluster.Options()
        options.heartbeat = .milliseconds(200)
        options.limitsArguments = ["--state", path]
        do { cluster = try AskRelayCluster(options) } catch {
            directory.cleanup()
            throw error
        }
    }

    /// Starts a parent worker process hosting `guardians` (`id@family`) with a policy; returns it once ready.
    @discardableResult
    func startParent(
        _ guardians: [String],
        policy: String = "approve",
        think: String = "fixed:10ms",
        extra: [String] = []
    ) throws -> ClusterProcess {
        let index = cluster.processes.filter { $0.name.hasPrefix("parent-") }.count
        var arguments = ["--policy", policy, "--think", think, "--records", directory.path + "/answers-\(index).jsonl"]
        for guardian in guardians { arguments += ["--guardian", guardian] }
        return try cluster.startWorker("askrelay-parent", role: .guardian, arguments + extra)
    }

    func center(_ children: [ChildIdentity], state: String = "center") async throws -> AskCenter {
        var options = AskCenter.Options()
        options.heartbeatInterval = .milliseconds(200)
        let center = try AskCenter(
            broker: endpoint,
            children: children,
            stateDirectory: directory.path + "/" + state,
            logger: .silent(),
            context: ClientContext(context),
            options: options
        )
        #expect(await center.waitUntilRegistered(timeout: .seconds(10)))
        return center
    }

    /// Waits until the broker's statistics satisfy `condition` (the broker publishes every second).
    func waitForStats(timeout: Duration = .seconds(15), _ condition: @escaping @Sendable ([String: Any]) -> Bool)
        async throws -> Bool
    {
        let stats = cluster.statsEndpoint
        let context = self.context
        return try await blocking {
            let socket = try context.socket(.sub)
            try socket.set(.linger, 0)
            try socket.set(.subscribe, Array("stats".utf8))
            try socket.connect(stats)
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                guard try socket.wait(timeoutMilliseconds: 500), let frames = try socket.receiveMultipart(.dontWait),
                    frames.count == 2,
                    let json = try JSONSerialization.jsonObject(with: Data(frames[1])) as? [String: Any]
                else { continue }
                if condition(json) { return true }
            }
            return false
        }
    }

    func stop() {
        cluster.stop()
        directory.cleanup()
    }
}

func phone(_ value: String) -> CommunicationHandle { CommunicationHandle(value: value, kind: .phoneNumber) }

/// Evaluates `probe` until it returns a value or `timeout` passes, checking every 20 ms (for state that only a file
/// shows, such as a worker's records).
func poll<T: Sendable>(timeout: Duration, _ probe: @escaping @Sendable () -> T?) async -> T? {
    let tick = DispatchSemaphore(value: 0)
    return try? await blocking {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = probe() { return value }
            _ = tick.wait(timeout: .now() + .milliseconds(20))
        }
        return probe()
    }
}

/// The first element of a stream, or `nil` after `timeout`.
func first<T: Sendable>(_ stream: AsyncStream<T>, timeout: Duration = .seconds(15)) async -> T? {
    let collector = Collected(stream)
    defer { collector.cancel() }
    return await collector.wait(for: 1, within: timeout).first
}

@Suite("Workers as real processes, the test as the child app", .timeLimit(.minutes(3)), .serialized)
struct WorkerProcessTests {
    @Test("approval: the guardian's approval reaches the child, and the handle becomes known")
    func approval() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["mum@fa"], policy: "approve")
        let center = try await world.center([ChildIdentity(id: "kid", family: "fa")])
        let child = center.child("kid")
        let responses = child.responses(for: CommunicationTopic.self)
        let question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550111"))
        try await child.ask(question)
        try await child.send(question.id)
        let response = try #require(await first(responses))
        #expect(response.question.id == question.id)
        #expect(response.choice.answer == .approval)
        // The limits worker learnt the handle from the approval notice.
        var known = false
        for _ in 0..<50 where !known { known = try await child.limits.isKnownHandle(phone("+14155550111")) }
        #expect(known)
        await center.stop()
    }

    @Test("denial: the child gets the denial and the handle stays unknown")
    func denial() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["dad@fd"], policy: "deny")
        let center = try await world.center([ChildIdentity(id: "kid", family: "fd")])
        let child = center.child("kid")
        let responses = child.responses(for: CommunicationTopic.self)
        let question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550112"))
        try await child.ask(question)
        try await child.send(question.id)
        let response = try #require(await first(responses))
        #expect(response.choice.answer == .denial)
        #expect(try await child.limits.isKnownHandle(phone("+14155550112")) == false)
        await center.stop()
    }

    @Test("each AskError from the limits worker: limits off, contact sync off, not eligible; and an invalid question")
    func askErrors() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        let center = try await world.center([
            ChildIdentity(id: "off", family: "fa"), ChildIdentity(id: "nosync", family: "fa"),
            ChildIdentity(id: "inel", family: "fa"),
        ])
        let expectations: [(String, AskError)] = [
            ("off", .communicationLimitsNotEnabled), ("nosync", .contactSyncNotSetup), ("inel", .notAvailable),
        ]
        for (id, expected) in expectations {
            do {
                try await center.child(id).ask(PermissionQuestion<CommunicationTopic>(handle: phone("+14155550113")))
                Issue.record("\(id): ask succeeded")
            } catch {
                #expect(error == expected, "\(id)")
            }
        }
        do {
            try await center.child("off").ask(PermissionQuestion<CommunicationTopic>(handle: phone("12")))
            Issue.record("an invalid question was presented")
        } catch {
            guard case .invalidQuestion(let reason) = error else {
                Issue.record("expected invalidQuestion, got \(error)"); return
            }
            #expect(reason.code == "not-e164")
        }
        await center.stop()
    }

    @Test("a known handle needs no ask")
    func knownHandle() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        let center = try await world.center([ChildIdentity(id: "known", family: "fa")])
        let limits = center.child("known").limits
        #expect(try await limits.isKnownHandle(phone("+1 415 555 0100")))
        #expect(try await limits.isKnownHandle(phone("+14155550199")) == false)
        await center.stop()
    }

    @Test("cancel: no response ever, while a sent question of the same child is answered")
    func cancel() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["mum@fa"], policy: "approve")
        let center = try await world.center([ChildIdentity(id: "kid", family: "fa")])
        let child = center.child("kid")
        let collector = Collected(child.responses(for: CommunicationTopic.self))
        defer { collector.cancel() }
        let cancelled = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550114"))
        try await child.ask(cancelled)
        try await child.cancel(cancelled.id)
        let sent = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550115"))
        try await child.ask(sent)
        try await child.send(sent.id)
        #expect(await collector.wait(for: 1).count >= 1)
        // The ledger shows the cancelled one closed as cancelled: it can never be answered.
        #expect(try await world.waitForStats { (($0["ledger"] as? [String: Int])?["cancelled"] ?? 0) == 1 })
        #expect(collector.all.map(\.question.id) == [sent.id])
        await center.stop()
    }

    @Test("expiry: an answer after expiry is refused (expired), and the child gets no response")
    func answerAfterExpiry() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        let parent = try world.startParent(["late@fl"], policy: "approve", extra: ["--answer-after-expiry"])
        let center = try await world.center([ChildIdentity(id: "kid", family: "fl")])
        let child = center.child("kid")
        let collector = Collected(child.responses(for: CommunicationTopic.self))
        defer { collector.cancel() }
        var question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550116"))
        question.expirationDate = Date().addingTimeInterval(1)
        try await child.ask(question)
        try await child.send(question.id)
        // The guardian's answer record says how the broker answered.
        let records = world.directory.path + "/answers-0.jsonl"
        #expect(try await world.waitForStats { (($0["refusalsByCode"] as? [String: Int])?["expired"] ?? 0) >= 1 })
        let answered = try #require(
            await poll(timeout: .seconds(10)) {
                JSONLinesWriter.read(GuardianAnswerRecord.self, path: records).values.first { !$0.result.isEmpty }
            }
        )
        #expect(parent.isRunning)
        #expect(answered.result == ErrorCode.expired.rawValue)
        #expect(answered.answeredAt >= question.expirationDate!)
        #expect(collector.all.isEmpty)
        await center.stop()
    }

    @Test("two guardians: the first answer wins, the other is told the question closed")
    func firstGuardianWins() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["quick@f2"], policy: "approve", think: "fixed:10ms")
        let slow = try RawPeer(context: world.context, endpoint: world.endpoint)
        _ = try await blocking { try slow.register(role: .guardian, ["guardian/slow"], family: "f2") }
        let center = try await world.center([ChildIdentity(id: "kid", family: "f2")])
        let child = center.child("kid")
        let responses = child.responses(for: CommunicationTopic.self)
        let question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550117"))
        try await child.ask(question)
        try await child.send(question.id)
        let response = try #require(await first(responses))
        #expect(response.choice.answer == .approval)
        let closed = try await blocking { () -> QuestionClosed in
            let delivery = try slow.expectDelivery(kind: "question")
            try slow.ack([delivery.id!])
            let closed = try slow.expectDelivery(kind: "closed")
            try slow.ack([closed.id!])
            return try closed.decode(QuestionClosed.self)
        }
        #expect(closed.reason == .answered)
        #expect(closed.answeredBy == "quick")
        let late = try await blocking { () -> String in
            let id = try slow.send(
                GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.decline.id),
                from: "guardian/slow",
                to: "broker"
            )
            return try slow.expectNack(id).code
        }
        #expect(late == ErrorCode.alreadyClosed.rawValue)
        await center.stop()
    }

    @Test("significant app update and group questions flow like the others; a group approval teaches every handle")
    func appUpdateAndGroup() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["mum@fa"], policy: "approve")
        let center = try await world.center([ChildIdentity(id: "kid", family: "fa")])
        let child = center.child("kid")
        let updates = child.responses(for: SignificantAppUpdateTopic.self)
        let update = PermissionQuestion<SignificantAppUpdateTopic>(
            significantAppUpdateTopic: SignificantAppUpdateTopic(description: "Version 2 adds voice chat")
        )
        try await child.ask(update)
        try await child.send(update.id)
        #expect(try #require(await first(updates)).question.id == update.id)

        let people = [phone("+14155550120"), CommunicationHandle(value: "pal@example.org", kind: .emailAddress)]
        let topic = CommunicationTopic(
            personInformation: people.map { CommunicationTopic.PersonInformation(handle: $0) },
            actions: [.message, .videoCall, .follow]
        )
        let group = PermissionQuestion<CommunicationTopic>(communicationTopic: topic)
        let groupResponses = child.responses(for: CommunicationTopic.self)
        try await child.ask(group)
        try await child.send(group.id)
        let response = try #require(await first(groupResponses))
        #expect(response.question.topic.personInformation.count == 2)
        #expect(response.question.topic.actions == [.message, .videoCall, .follow])
        var known: Set<CommunicationHandle> = []
        for _ in 0..<50 where known.count < 2 { known = try await child.limits.knownHandles(in: Set(people)) }
        #expect(known.count == 2)
        await center.stop()
    }

    @Test("a child that was down receives the response when it comes back, exactly once")
    func childDownThenBack() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        try world.startParent(["mum@fa"], policy: "approve", think: "fixed:300ms")
        let question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550121"))
        do {
            let center = try await world.center([ChildIdentity(id: "kid", family: "fa")], state: "kid-state")
            try await center.child("kid").ask(question)
            try await center.child("kid").send(question.id)
            await center.stop()
        }
        // Wait until the guardian has answered while the child was away.
        #expect(try await world.waitForStats { (($0["ledger"] as? [String: Int])?["answered"] ?? 0) == 1 })
        let again = try await world.center([ChildIdentity(id: "kid", family: "fa")], state: "kid-state")
        let collector = Collected(again.child("kid").responses(for: CommunicationTopic.self))
        defer { collector.cancel() }
        #expect(await collector.wait(for: 1).count >= 1)
        #expect(collector.all.map(\.question.id) == [question.id])
        await again.stop()
        // A third start surfaces the old response no more: it was recorded as surfaced. Evidence that it would have
        // come by now: a new question, asked after the start and answered 300 ms later, is the first response.
        let third = try await world.center([ChildIdentity(id: "kid", family: "fa")], state: "kid-state")
        let later = Collected(third.child("kid").responses(for: CommunicationTopic.self))
        defer { later.cancel() }
        let witness = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550122"))
        try await third.child("kid").ask(witness)
        try await third.child("kid").send(witness.id)
        #expect(await later.wait(for: 1).count >= 1)
        #expect(later.all.map(\.question.id) == [witness.id])
        await third.stop()
    }

    @Test("a guardian that was offline receives the question when it comes back and answers it")
    func guardianOfflineThenBack() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        // The guardian registers once (so the family roster knows it), then goes away.
        let earlier = try world.startParent(["mum@fo"], policy: "approve")
        earlier.stop(grace: .seconds(10))
        let center = try await world.center([ChildIdentity(id: "kid", family: "fo")])
        let child = center.child("kid")
        let responses = child.responses(for: CommunicationTopic.self)
        let question = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550122"))
        try await child.ask(question)
        try await child.send(question.id)
        try world.startParent(["mum@fo"], policy: "approve")
        let response = try #require(await first(responses))
        #expect(response.question.id == question.id)
        await center.stop()
    }

    @Test("limits switched off mid-run: the next ask is refused communicationLimitsNotEnabled")
    func limitsSwitchedOff() async throws {
        let world = try ProcessWorld()
        defer { world.stop() }
        let center = try await world.center([ChildIdentity(id: "kid", family: "fa")])
        let child = center.child("kid")
        let before = PermissionQuestion<CommunicationTopic>(handle: phone("+14155550123"))
        try await child.ask(before)
        try await child.cancel(before.id)
        let observer = try RawPeer(context: world.context, endpoint: world.endpoint)
        try await blocking {
            try observer.register(role: .observer, ["observer/test"])
            try observer.expectAck(
                try observer.send(
                    LimitsAdminChange(child: "kid", limitsEnabled: false),
                    from: "observer/test",
                    to: "limits"
                )
            )
        }
        // The change travels observer → broker → limits; asks sent after it is applied are refused.
        var refused: AskError?
        for attempt in 0..<100 where refused == nil {
            let question = PermissionQuestion<CommunicationTopic>(
                handle: phone("+1415555\(String(format: "%04d", 200 + attempt))")
            )
            do {
                try await child.ask(question)
            } catch {
                refused = error
                continue
            }
            try await child.cancel(question.id)
        }
        #expect(refused == .communicationLimitsNotEnabled)
        await center.stop()
    }
}
