import AskClient
import AskModel
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// A child's `AskCenter` and a guardian's `GuardianCenter` of family `moving` on broker b0, while
/// `askrelay rebalance` moves the family to b2 (brokers and limits workers as real processes).
@Suite("Workers follow a family that moves between brokers (docs/scaling.md, Rebalancing)", .serialized)
struct FollowMoveTests {
    static func question() -> PermissionQuestion<CommunicationTopic> {
        PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
    }

    @Test("centers keep working through a move: a call in progress waits, every answer reaches the app once")
    func centersFollow() async throws {
        let world = try MoveWorld()
        defer { world.stop() }
        try world.startLimits()
        let context = ClientContext(try ZMQContext())
        var childOptions = AskCenter.Options()
        childOptions.heartbeatInterval = .milliseconds(200)
        let child = try AskCenter(
            broker: world.endpoint(0),
            children: [ChildIdentity(id: "c1", family: world.moving)],
            stateDirectory: world.directory.path + "/child",
            logger: .silent(),
            context: context,
            options: childOptions
        )
        var guardianOptions = GuardianCenter.Options()
        guardianOptions.heartbeatInterval = .milliseconds(200)
        let guardians = try GuardianCenter(
            broker: world.endpoint(0),
            guardians: [GuardianIdentity(id: "g1", family: world.moving)],
            logger: .silent(),
            context: context,
            options: guardianOptions
        )
        let questions = Collected<GuardianCenter.Question>(guardians.events()) { event in
            if case .question(let question) = event { question } else { nil }
        }
        let responses = Collected(child.responses(for: CommunicationTopic.self))
        #expect(await child.waitUntilRegistered(timeout: .seconds(10)))
        #expect(await guardians.waitUntilRegistered(timeout: .seconds(10)))
        let session = child.child("c1")

        // A question open at b0 before the move.
        let first = Self.question()
        try await session.ask(first)
        try await session.send(first.id)
        #expect(await questions.first { $0.id == first.id } != nil, "the guardian got the first question at b0")

        // The family held for its move: an ask now waits through it and goes to b2.
        let mover = try world.mover(pauseBefore: "export")
        _ = try await blocking { try mover.waitForLine(startingWith: "paused before export") }
        let second = Self.question()
        async let asked: Void = session.ask(second)
        let held = try world.admin(0, AdminRequest(op: "status"))
        #expect(held.moves?.first { $0.family == world.moving }?.state == .held, "\(held)")
        mover.kill9()
        _ = try await blocking { try world.rebalance() }
        try await asked
        try await session.send(second.id)
        #expect(await questions.first { $0.id == second.id } != nil, "the guardian got the second question at b2")

        // Both answered through b2; each response reaches the app once.
        try await guardians.answer(questionID: first.id, choiceID: PermissionChoice.approve.id, as: "g1")
        try await guardians.answer(questionID: second.id, choiceID: PermissionChoice.decline.id, as: "g1")
        // A third flow after the move: its response coming is the evidence that a copy of the first two would
        // have come by then too.
        let third = Self.question()
        try await session.ask(third)
        try await session.send(third.id)
        _ = await questions.first { $0.id == third.id }
        try await guardians.answer(questionID: third.id, choiceID: PermissionChoice.approve.id, as: "g1")
        let got = await responses.wait(for: 3, within: .seconds(20))
        #expect(got.map(\.response.question.id).sorted() == [first.id, second.id, third.id].sorted(), "\(got)")
        let all = responses.all.map(\.response.question.id)
        #expect(all.count == 3 && Set(all).count == 3, "each response reaches the app once: \(all)")

        let moved = try world.admin(0, AdminRequest(op: "status"))
        #expect(moved.moves?.first { $0.family == world.moving }?.state == .moved, "\(moved)")
        #expect(!(moved.families ?? []).contains(world.moving), "b0 keeps nothing of the family: \(moved)")
        questions.cancel()
        responses.cancel()
        await guardians.stop()
        await child.stop()
    }
}
