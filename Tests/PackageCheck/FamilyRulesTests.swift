// The larger outside example (docs/testing.md, "A larger example"): the family's rules as a team that depends on
// AskRelay would test them, with the documented API only. make package-test copies this file beside the tutorial's
// AskFlowTests.swift in the outside package and runs both with its `swift test`; it is not a target of AskRelay.
import AskRelayTesting
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2)))
struct FamilyRulesTests {
    let friend = CommunicationHandle(value: "+15550100", kind: .phoneNumber)
    let classmate = CommunicationHandle(value: "classmate@example.com", kind: .emailAddress)

    @Test(
        "a sent question reaches both guardians within 10 s; once sent, it can no longer be cancelled",
        .askRelayCluster()
    )
    func questionReachesBothGuardians() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        let flow = FlowWatch(children: app, guardians: guardians)

        let question = PermissionQuestion(handles: [friend, classmate])
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        for guardian in ["g1-1", "g1-2"] {
            let delivered = try await flow.expectQuestion(question.id, at: guardian, within: .seconds(10))
            #expect(delivered.child == "c1-1")
            #expect(delivered.family == "f1")
            #expect(delivered.communication?.handles == [friend, classmate])
            #expect(delivered.choices.map(\.id) == [PermissionChoice.approve.id, PermissionChoice.decline.id])
        }
        await #expect(throws: SheetError.alreadySent) {
            try await app.child("c1-1").cancel(question.id)
        }

        await app.stop()
        await guardians.stop()
    }

    @Test(
        "the first answer wins: one response with its choice, the other guardian is told who answered",
        .askRelayCluster()
    )
    func firstAnswerWins() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        let flow = FlowWatch(children: app, guardians: guardians)

        let question = PermissionQuestion(handle: friend)
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
        let toDad = try await flow.expectQuestion(question.id, at: "g1-2", within: .seconds(10))

        try await toDad.answer(PermissionChoice.decline.id)
        let response = try await flow.expectResponse(to: question.id, choice: .decline, within: .seconds(10))
        #expect(response.child == "c1-1")
        try await flow.expectClosed(
            question.id,
            at: "g1-1",
            reason: .answered,
            answeredBy: "g1-2",
            within: .seconds(10)
        )
        await #expect(throws: GuardianAnswerError.alreadyClosed) {
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
        }
        // Only one: no second response is on its way (the marker question came back after the quiet second).
        try await flow.expectNoResponse(to: question.id, during: .seconds(1))

        let entry = try await cluster.waitForLedger(question.id) { $0.state == .answered }
        #expect(entry.answeredBy == "g1-2")
        #expect(entry.answerChoiceID == PermissionChoice.decline.id)
        await app.stop()
        await guardians.stop()
    }

    @Test(
        "two guardians on their own connections answer at once: exactly one wins, and its choice is the response",
        .askRelayCluster()
    )
    func racingGuardians() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let mum = try cluster.makeGuardianCenter(guardians: [GuardianIdentity(id: "g1-1", family: "f1")])
        let dad = try cluster.makeGuardianCenter(guardians: [GuardianIdentity(id: "g1-2", family: "f1")])
        let mumFlow = FlowWatch(children: app, guardians: mum)
        let dadFlow = FlowWatch(children: app, guardians: dad)

        let question = PermissionQuestion(handle: friend)
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        let toMum = try await mumFlow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
        let toDad = try await dadFlow.expectQuestion(question.id, at: "g1-2", within: .seconds(10))

        async let mumWon = won(toMum, with: .approve)
        async let dadWon = won(toDad, with: .decline)
        let (mumWins, dadWins) = try await (mumWon, dadWon)
        #expect(mumWins != dadWins, "exactly one answer is accepted (mum: \(mumWins), dad: \(dadWins))")

        if mumWins {
            try await mumFlow.expectResponse(to: question.id, choice: .approve, within: .seconds(10))
            try await dadFlow.expectClosed(
                question.id,
                at: "g1-2",
                reason: .answered,
                answeredBy: "g1-1",
                within: .seconds(10)
            )
        } else {
            try await mumFlow.expectResponse(to: question.id, choice: .decline, within: .seconds(10))
            try await mumFlow.expectClosed(
                question.id,
                at: "g1-1",
                reason: .answered,
                answeredBy: "g1-2",
                within: .seconds(10)
            )
        }
        try await mumFlow.expectNoResponse(to: question.id, during: .seconds(1))
        #expect(try cluster.ledger(question.id)?.answeredBy == (mumWins ? "g1-1" : "g1-2"))

        await app.stop()
        await mum.stop()
        await dad.stop()
    }

    @Test("a cancelled question never reaches a guardian and never gets a response", .askRelayCluster())
    func cancelledQuestion() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        let flow = FlowWatch(children: app, guardians: guardians)

        let question = PermissionQuestion(handle: friend)
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").cancel(question.id)
        await #expect(throws: SheetError.cancelled) {
            try await app.child("c1-1").send(question.id)
        }
        try await flow.expectNoQuestion(question.id, at: "g1-1", during: .seconds(1))
        try await flow.expectNoQuestion(question.id, at: "g1-2", during: .seconds(1))
        try await flow.expectNoResponse(to: question.id, child: "c1-1", during: .seconds(1))

        // The evidence: one marker question per call, each delivered and answered on the same queues.
        #expect(flow.markers.count == 3)
        for marker in flow.markers {
            #expect(flow.responses.contains { $0.questionID == marker })
        }
        #expect(try cluster.ledger(question.id)?.state == .cancelled)
        await app.stop()
        await guardians.stop()
    }

    @Test(
        "a question past its expiry is closed expired at both guardians; a late answer is refused; no response",
        .askRelayCluster { $0.drivenClock = true }
    )
    func expiredQuestion() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let clock = try #require(cluster.clock)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        let flow = FlowWatch(children: app, guardians: guardians)

        let question = PermissionQuestion(handle: friend, expirationDate: clock.now.addingTimeInterval(3600))
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        let delivered = try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
        try await flow.expectQuestion(question.id, at: "g1-2", within: .seconds(10))
        #expect(delivered.expiresAt == question.expirationDate)

        try await cluster.advanceClock(by: .seconds(3600))
        try await flow.expectClosed(question.id, at: "g1-1", reason: .expired, within: .seconds(10))
        try await flow.expectClosed(question.id, at: "g1-2", reason: .expired, within: .seconds(10))
        await #expect(throws: GuardianAnswerError.expired) {
            try await delivered.answer(PermissionChoice.approve.id)
        }
        try await flow.expectNoResponse(to: question.id, during: .seconds(1))
        #expect(try cluster.ledger(question.id)?.state == .expired)
        await app.stop()
        await guardians.stop()
    }

    @Test(
        "a question nobody answers is closed expired when the 48-hour pending window ends",
        .askRelayCluster { $0.drivenClock = true }
    )
    func pendingWindowEnds() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        let flow = FlowWatch(children: app, guardians: guardians)

        let question = PermissionQuestion(handle: friend)
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))

        try await cluster.advanceClock(by: .seconds(48 * 3600))
        try await flow.expectClosed(question.id, at: "g1-1", reason: .expired, within: .seconds(10))
        try await flow.expectNoResponse(to: question.id, during: .seconds(1))
        await app.stop()
        await guardians.stop()
    }

    /// Whether a guardian's answer won: `true` when it was accepted, `false` when it was refused because the other
    /// guardian's answer won; any other refusal is thrown (and fails the test).
    func won(_ question: GuardianCenter.Question, with choice: PermissionChoice) async throws -> Bool {
        do {
            try await question.answer(choice.id)
            return true
        } catch let refusal where refusal == .alreadyClosed {
            return false
        }
    }
}
