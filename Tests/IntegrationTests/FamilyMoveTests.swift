import AskAgents
import AskModel
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// Three brokers as real processes, b0 and b1 serving list L2 and b2 ready for list L3 = L2 + b2, each with an
/// admin endpoint; family `moving` is b0's under L2 and b2's under L3, family `staying` is b0's under both.
// @unchecked: built in init, then only read (the processes restart themselves in place).
final class MoveWorld: @unchecked Sendable {
    let directory = TempDirectory()
    let l2: String
    let l3: String
    let admin: String
    var brokers: [RelayProcess] = []
    var limits: [RelayProcess] = []
    let moving: String
    let staying: String
    let context: ZMQContext

    init() throws {
        let path = directory.path
        func entry(_ index: Int) -> String { "b\(index)=ipc://\(path)/b\(index).sock" }
        l2 = [entry(0), entry(1)].joined(separator: ",")
        l3 = [entry(0), entry(1), entry(2)].joined(separator: ",")
        admin = (0..<3).map { "b\($0)=ipc://\(path)/admin-b\($0).sock" }.joined(separator: ",")
        let two = try BrokerList(parsing: l2)
        let three = try BrokerList(parsing: l3)
        let families = (0..<200).map { "f\($0)" }
        moving = families.first { two.shard(family: $0).name == "b0" && three.shard(family: $0).name == "b2" }!
        staying = families.first { two.shard(family: $0).name == "b0" && three.shard(family: $0).name == "b0" }!
        context = try ZMQContext()
        do {
            for index in 0..<3 {
                let broker = try RelayProcess(
                    "askrelay-broker",
                    [
                        "--endpoint", "ipc://\(path)/b\(index).sock", "--data-dir", path + "/data-b\(index)",
                        "--heartbeat", "200ms", "--shard-name", "b\(index)", "--brokers", index == 2 ? l3 : l2,
                        "--admin-endpoint", "ipc://\(path)/admin-b\(index).sock",
                    ],
                    logDirectory: path
                )
                brokers.append(broker)
                _ = try broker.readyEndpoint()
            }
        } catch {
            stop()
            throw error
        }
    }

    func endpoint(_ index: Int) -> String { "ipc://\(directory.path)/b\(index).sock" }

    func stop() {
        for process in limits { process.kill9() }
        for broker in brokers { broker.kill9() }
        directory.cleanup()
    }

    /// The moving family's child's limits state at b0's limits worker (its state file), which must reach b2's.
    static let movingChildLimits = LimitsState(
        contactSyncSetUp: false,
        knownHandles: [CommunicationHandle(value: "+15550002222", kind: .phoneNumber)]
    )

    /// Starts a limits worker (`askrelay-limits`, a real process) for b0 and one for b2, and waits for their ready
    /// lines; b0's is seeded with ``movingChildLimits`` for the moving family's child `c-<moving>`.
    func startLimits() throws {
        let seed = directory.path + "/limits-b0.json"
        try Data(
            """
            {"children": {"c-\(moving)": {"contactSyncSetUp": false,
              "knownHandles": [{"kind": "phoneNumber", "value": "+15550002222"}]}}}
            """.utf8
        ).write(to: URL(fileURLWithPath: seed))
        for (shard, list) in [("b0", l2), ("b2", l3)] {
            let process = try RelayProcess(
                "askrelay-limits",
                [
                    "--brokers", list, "--shard-name", shard, "--id", "limits-\(shard)", "--data-dir",
                    limitsDirectory(shard), "--heartbeat", "200ms",
                ] + (shard == "b0" ? ["--state", seed] : []),
                logDirectory: directory.path
            )
            limits.append(process)
            _ = try process.waitForLine(startingWith: "ready")
        }
    }

    func limitsDirectory(_ shard: String) -> String { directory.path + "/limits-\(shard)" }

    /// Waits until b2's limits worker has stored the moving child's state from b0 (it comes with the import, as
    /// a `limits.write`). - Throws: when it has not within 10 s, with what it has.
    func expectLimitsMovedToB2() throws {
        let child = "c-\(moving)"
        let deadline = ContinuousClock.now + .seconds(10)
        var stored = LimitsState()
        while ContinuousClock.now < deadline {
            stored = try LimitsWorker.readStoredState(of: child, dataDirectory: limitsDirectory("b2"))
            if stored == Self.movingChildLimits { return }
            // A poll with a deadline: the store is another process's file and says nothing when it changes.
            usleep(5_000)
        }
        throw TestFailure("b2's limits worker has \(stored) for \(child), not b0's \(Self.movingChildLimits)")
    }

    /// `askrelay rebalance` from L2 to L3, epoch 1.
    func mover(pauseBefore: String? = nil, timeout: String = "30s") throws -> RelayProcess {
        try RelayProcess(
            "askrelay",
            ["rebalance", "--from", l2, "--to", l3, "--admin", admin, "--epoch", "1", "--timeout", timeout]
                + (pauseBefore.map { ["--pause-before", $0] } ?? []),
            logDirectory: directory.path
        )
    }

    /// Runs the mover to its end. - Returns: its output.
    @discardableResult
    func rebalance() throws -> [String] {
        let mover = try mover()
        let status = try mover.wait(timeout: .seconds(60))
        guard status.code == 0 else { throw TestFailure("rebalance failed (\(status)): \(mover.logTail())") }
        return mover.output
    }

    /// One admin request to broker `index`.
    func admin(_ index: Int, _ request: AdminRequest) throws -> AdminReply {
        let socket = try context.socket(.req)
        try socket.set(.linger, 0)
        try socket.connect("ipc://\(directory.path)/admin-b\(index).sock")
        _ = try socket.send(Array(try JSONEncoder().encode(request)))
        guard try socket.wait(timeoutMilliseconds: 10_000), let (frame, _) = try socket.receive(.dontWait) else {
            throw TestFailure("broker b\(index) did not answer \(request.op)")
        }
        return try JSONDecoder().decode(AdminReply.self, from: Data(frame))
    }

    /// Family `family` asks, is presented and sent at broker `index` (a raw child, limits worker and guardian);
    /// the guardian takes the question and does not acknowledge it, then leaves; a second question waits for it
    /// in the broker's journal. - Returns: the two questions.
    func openFamily(_ family: String, at index: Int) throws -> [AnyPermissionQuestion] {
        let child = try RawPeer(context: context, endpoint: endpoint(index))
        let limits = try RawPeer(context: context, endpoint: endpoint(index))
        let guardian = try RawPeer(context: context, endpoint: endpoint(index))
        try child.register(role: .child, ["child/c-\(family)"], family: family)
        try limits.register(role: .limits, ["limits/l-\(family)"])
        try guardian.register(role: .guardian, ["guardian/g-\(family)"], family: family)
        let first = Self.question()
        try askPresentAndSend(first, family: family, child: child, limits: limits)
        #expect(try guardian.expectDelivery(kind: "question").subject == MessageID(uuid: first.id))
        try guardian.bye()
        // The broker has ended the guardian's session once the limits worker's next round trip comes back.
        let second = Self.question()
        try askPresentAndSend(second, family: family, child: child, limits: limits)
        try child.bye()
        try limits.bye()
        return [first, second]
    }

    /// Opens both families at b0, starts the limits workers, then runs the mover until it reaches `step` of the
    /// moving family and kills it there (SIGKILL). - Returns: the moving family's two questions.
    func moveStoppedBefore(_ step: String) throws -> [AnyPermissionQuestion] {
        let questions = try openFamily(moving, at: 0)
        _ = try openFamily(staying, at: 0)
        try startLimits()
        let mover = try mover(pauseBefore: step)
        _ = try mover.waitForLine(startingWith: "paused before \(step) family=\(moving)")
        mover.kill9()
        return questions
    }

    static func question() -> AnyPermissionQuestion {
        AnyPermissionQuestion(
            PermissionQuestion<CommunicationTopic>(
                handle: CommunicationHandle(value: "+15551234567", kind: .phoneNumber)
            )
        )
    }

    func askPresentAndSend(_ question: AnyPermissionQuestion, family: String, child: RawPeer, limits: RawPeer) throws {
        let childAddress = "child/c-\(family)"
        try child.expectAck(try child.send(AskRequest(question: question), from: childAddress, to: "limits"))
        let ask = try limits.expectDelivery(kind: "ask")
        try limits.ack([ask.id!])
        try limits.expectAck(
            try limits.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: "limits/l-\(family)",
                to: childAddress
            )
        )
        try child.ack([try child.expectDelivery(kind: "ask.result").id!])
        try child.expectAck(try child.send(SendQuestion(questionID: question.id), from: childAddress, to: "broker"))
    }

    /// The family is whole at broker `index` and nowhere else: the old broker b0 has it moved to b2 and holds
    /// nothing of it; its guardian, registering at b2, gets both questions, and its answer reaches the child there.
    func expectWholeAtB2(_ questions: [AnyPermissionQuestion]) throws {
        let old = try admin(0, AdminRequest(op: "status"))
        #expect(old.moves?.first { $0.family == moving }?.state == .moved, "\(old)")
        #expect(!(old.families ?? []).contains(moving), "b0 keeps nothing of the family: \(old)")
        #expect((old.families ?? []).contains(staying), "the family that does not move stays: \(old)")
        let new = try admin(2, AdminRequest(op: "status"))
        #expect(new.moves?.first { $0.family == moving }?.state == .imported, "\(new)")
        #expect((new.families ?? []).contains(moving), "\(new)")
        for other in [1] {
            let status = try admin(other, AdminRequest(op: "status"))
            #expect(!(status.families ?? []).contains(moving), "b\(other): \(status)")
        }

        let guardian = try RawPeer(context: context, endpoint: endpoint(2))
        try guardian.register(role: .guardian, ["guardian/g-\(moving)"], family: moving)
        var asked: Set<MessageID> = []
        for _ in 0..<2 {
            let delivery = try guardian.expectDelivery(kind: "question")
            asked.insert(delivery.subject!)
            try guardian.ack([delivery.id!])
        }
        #expect(asked == Set(questions.map { MessageID(uuid: $0.id) }), "both open questions, nothing lost")
        // The child's limits state came along (before the approval below teaches b2's limits worker a handle).
        if !limits.isEmpty { try expectLimitsMovedToB2() }
        let child = try RawPeer(context: context, endpoint: endpoint(2))
        try child.register(role: .child, ["child/c-\(moving)"], family: moving)
        // SENDs b0 accepted, sent again to b2 as after an ACK lost on the wire during the move (b2 does not know
        // b0's accepted ids): acknowledged again, not refused `duplicate-question` or `already-sent`.
        let address = "child/c-\(moving)"
        try child.expectAck(try child.send(AskRequest(question: questions[1]), from: address, to: "limits"))
        try child.expectAck(try child.send(SendQuestion(questionID: questions[1].id), from: address, to: "broker"))
        let answer = GuardianAnswer(questionID: questions[0].id, choiceID: PermissionChoice.approve.id)
        try guardian.expectAck(try guardian.send(answer, from: "guardian/g-\(moving)", to: "broker"))
        let response = try child.expectDelivery(kind: "response")
        #expect(response.subject == MessageID(uuid: questions[0].id))

        // The old broker names the new one.
        let stale = try RawPeer(context: context, endpoint: endpoint(0))
        try stale.hello(role: .child, endpoints: [EndpointClaim(address: "child/c-\(moving)", family: moving)])
        let refusal = try stale.expectNack()
        #expect(refusal.code == ErrorCode.moved.rawValue, "\(refusal)")
        #expect(MovedReason.parse(refusal.reason)?.broker.name == "b2", "\(refusal.reason)")
    }
}

@Suite("Families move between running brokers with their state (docs/scaling.md, Rebalancing)", .serialized)
struct FamilyMoveTests {
    @Test("askrelay rebalance moves a family's open questions, roster and undelivered messages; others stay")
    func moveCarriesState() throws {
        let world = try MoveWorld()
        defer { world.stop() }
        let questions = try world.openFamily(world.moving, at: 0)
        _ = try world.openFamily(world.staying, at: 0)
        try world.startLimits()
        let output = try world.rebalance()
        let moved = output.first { $0.hasPrefix("moved family=\(world.moving) from=b0 to=b2 questions=2") }
        #expect(moved?.contains(" limits=1 ") == true, "one child's limits state moved: \(output)")
        #expect(output.contains { $0.hasPrefix("rebalanced epoch=1 families=1") }, "\(output)")
        try world.expectWholeAtB2(questions)
        // The family that stays is served by b0 as before.
        let guardian = try RawPeer(context: world.context, endpoint: world.endpoint(0))
        try guardian.register(role: .guardian, ["guardian/g-\(world.staying)"], family: world.staying)
        #expect(try guardian.expectDelivery(kind: "question").subject != nil)
        // Run again: nothing left to move.
        #expect(try world.rebalance().contains { $0.hasPrefix("rebalanced epoch=1 families=0") })
    }

    @Test("kill -9 of the old broker between import and release: restarted, the mover's rerun finishes the move")
    func killOldBroker() throws {
        let world = try MoveWorld()
        defer { world.stop() }
        let questions = try world.moveStoppedBefore("release")
        world.brokers[0].kill9()
        try world.brokers[0].restart()
        // Restarted, b0 still holds the family for its move: its SENDs wait.
        let child = try RawPeer(context: world.context, endpoint: world.endpoint(0))
        try child.hello(
            role: .child,
            endpoints: [EndpointClaim(address: "child/c-\(world.moving)", family: world.moving)]
        )
        #expect(try child.expectNack().code == ErrorCode.moving.rawValue)
        try world.rebalance()
        try world.expectWholeAtB2(questions)
    }

    @Test("kill -9 of the new broker after its import: restarted, it has the family once, and the move finishes")
    func killNewBroker() throws {
        let world = try MoveWorld()
        defer { world.stop() }
        let questions = try world.moveStoppedBefore("release")
        world.brokers[2].kill9()
        try world.brokers[2].restart()
        let output = try world.rebalance()
        #expect(output.contains { $0.hasPrefix("moved family=\(world.moving)") }, "\(output)")
        try world.expectWholeAtB2(questions)
    }

    @Test("with no limits worker at the old broker the mover says what it waits for; with one, the rerun moves")
    func moveWaitsForLimits() throws {
        let world = try MoveWorld()
        defer { world.stop() }
        let questions = try world.openFamily(world.moving, at: 0)
        _ = try world.openFamily(world.staying, at: 0)
        let mover = try world.mover(timeout: "3s")
        let status = try mover.wait(timeout: .seconds(30))
        #expect(status.code == 69, "\(status)")
        #expect(
            mover.logTail().contains(
                "did not export family \(world.moving): family '\(world.moving)': waiting for the limits service to "
                    + "send the limits state of 1 child (c-\(world.moving)); a limits worker must be connected"
            ),
            "\(mover.logTail())"
        )
        let held = try world.admin(0, AdminRequest(op: "status"))
        #expect(held.moves?.first { $0.family == world.moving }?.state == .held, "held, not lost: \(held)")
        try world.startLimits()
        try world.rebalance()
        try world.expectWholeAtB2(questions)
    }

    @Test("kill -9 of the mover after the export: the family is held, not lost; the rerun moves it")
    func killMover() throws {
        let world = try MoveWorld()
        defer { world.stop() }
        let questions = try world.moveStoppedBefore("import")
        let held = try world.admin(0, AdminRequest(op: "status"))
        #expect(held.moves?.first { $0.family == world.moving }?.state == .held, "\(held)")
        #expect((held.families ?? []).contains(world.moving), "the state is still at b0")
        let imported = try world.admin(2, AdminRequest(op: "status"))
        #expect(!(imported.families ?? []).contains(world.moving), "nothing at b2 before the import")
        try world.rebalance()
        try world.expectWholeAtB2(questions)
    }
}
