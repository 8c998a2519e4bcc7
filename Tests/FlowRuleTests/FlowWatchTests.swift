import AskRelayTesting
import Foundation
import Testing

/// AskRelayTesting's ``FlowWatch``: the story steps' expectations, each passing on a real flow and failing, with
/// what was expected and what came, when the flow does something else.
@Suite("FlowWatch expectations", .serialized, .timeLimit(.minutes(2)))
struct FlowWatchTests {
    /// Whether an issue's comments contain `text`.
    static func says(_ text: String) -> @Sendable (Issue) -> Bool {
        { issue in issue.comments.contains { $0.rawValue.contains(text) } }
    }

    /// A test's set-up: the current cluster, its children's and guardians' centers, and a watch made before anything
    /// is asked.
    struct Flow {
        let cluster: AskRelayCluster
        let children: AskCenter
        let guardians: GuardianCenter
        let watch: FlowWatch

        /// A question about `friend` that c1-1 asks and, unless `send` is false, sends.
        func question(send: Bool = true) async throws -> PermissionQuestion<CommunicationTopic> {
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            if send { try await children.child("c1-1").send(question.id) }
            return question
        }
    }

    /// Runs `body` with a ``Flow`` on the current cluster; the centers stop however it ends.
    func withFlow(_ body: (Flow) async throws -> Void) async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let watch = FlowWatch(children: children, guardians: guardians)
            try await body(Flow(cluster: cluster, children: children, guardians: guardians, watch: watch))
        }
    }

    @Test(
        "question, response, closed and no further response: each passes on the flow that does it",
        .askRelayCluster()
    )
    func passingFlow() async throws {
        try await withFlow { setUp in
            let flow = setUp.watch
            let question = try await setUp.question()
            let delivered = try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
            try await flow.expectQuestion(question.id, at: "g1-2", within: .seconds(10))
            try await delivered.answer(PermissionChoice.approve.id)
            let response = try await flow.expectResponse(to: question.id, choice: .approve, within: .seconds(10))
            #expect(response.child == "c1-1")
            try await flow.expectClosed(
                question.id,
                at: "g1-2",
                reason: .answered,
                answeredBy: "g1-1",
                within: .seconds(10)
            )
            try await flow.expectNoResponse(to: question.id, during: .milliseconds(200))
            #expect(flow.markers.count == 1)
            #expect(flow.responses.filter { $0.questionID == question.id }.count == 1)
        }
    }

    @Test(
        "a cancelled question: no question at either guardian and no response, proved by a marker",
        .askRelayCluster()
    )
    func cancelledProvedByMarker() async throws {
        try await withFlow { setUp in
            let flow = setUp.watch
            let question = try await setUp.question(send: false)
            try await setUp.children.child("c1-1").cancel(question.id)
            try await flow.expectNoQuestion(question.id, at: "g1-1", during: .milliseconds(200))
            try await flow.expectNoResponse(to: question.id, child: "c1-1", during: .milliseconds(200))
            // Each call asked its marker, and each marker came through both ways.
            #expect(flow.markers.count == 2)
            #expect(Set(flow.responses.map(\.questionID)) == flow.markers)
        }
    }

    @Test("each expectation fails, saying what it expected and what came", .askRelayCluster())
    func failures() async throws {
        try await withFlow { setUp in
            let (flow, guardians) = (setUp.watch, setUp.guardians)
            let never = UUID()
            try await withKnownIssue {
                try await flow.expectQuestion(never, at: "g1-1", within: .milliseconds(100))
            } matching: {
                Self.says("expected question \(never) at g1-1 within")($0) && Self.says("got no question at g1-1")($0)
            }
            try await withKnownIssue {
                try await flow.expectResponse(to: never, within: .milliseconds(100))
            } matching: {
                Self.says("got none")($0)
            }

            let question = try await setUp.question()
            // It does arrive: expecting that it does not fails as soon as it does.
            try await withKnownIssue {
                try await flow.expectNoQuestion(question.id, at: "g1-1", during: .seconds(60))
            } matching: {
                Self.says("expected no question \(question.id) at g1-1")($0)
                    && Self.says("got question \(question.id) at g1-1")($0)
            }
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.decline.id, as: "g1-1")
            try await withKnownIssue {
                try await flow.expectResponse(to: question.id, choice: .approve, within: .seconds(10))
            } matching: {
                Self.says("with choice askrelay.approve; got choice askrelay.decline")($0)
            }
            try await withKnownIssue {
                try await flow.expectClosed(question.id, at: "g1-2", reason: .expired, within: .seconds(10))
            } matching: {
                Self.says("expected closed expired at g1-2; got closed answered by g1-1")($0)
            }
            // No hosted child and guardian to send a marker between: the evidence fails, saying which is missing.
            try await withKnownIssue {
                try await flow.expectNoQuestion(never, at: "g9-9", during: .milliseconds(1))
            } matching: {
                Self.says("expected evidence that \(never) did not reach g9-9")($0)
                    && Self.says("got no hosted child and guardian of g9-9's family")($0)
            }
            try await withKnownIssue {
                try await flow.expectNoResponse(to: never, child: "c9-9", during: .milliseconds(1))
            } matching: {
                Self.says("expected evidence that no response to \(never) is on its way")($0)
                    && Self.says("got no hosted child and guardian of c9-9's family")($0)
            }
            #expect(flow.markers.isEmpty)
        }
    }

    @Test(
        "a response that comes after the quiet window but before the marker's fails expectNoResponse",
        .askRelayCluster()
    )
    func responseBeforeTheMarker() async throws {
        try await withFlow { setUp in
            let (flow, cluster, guardians) = (setUp.watch, setUp.cluster, setUp.guardians)
            let question = try await setUp.question()
            try await flow.expectQuestion(question.id, at: "g1-2", within: .seconds(10))
            // The limits worker is stopped, so the marker's ask waits for it: the question's response, queued for
            // the child before the marker's, is what the evidence must find.
            try await cluster.run { try cluster.limits.suspend() }
            let expectation = Task {
                try await withKnownIssue {
                    try await flow.expectNoResponse(to: question.id, during: .milliseconds(1))
                } matching: {
                    Self.says("expected no response to \(question.id)")($0)
                        && Self.says("got 1 more (askrelay.approve)")($0)
                }
            }
            // The quiet window is over once the marker is being asked.
            #expect(await eventually { !flow.markers.isEmpty })
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.approve.id, as: "g1-2")
            try await cluster.run { try cluster.limits.resume() }
            try await expectation.value
        }
    }

    @Test("two guardians on connections of their own answer at once: exactly one is accepted", .askRelayCluster())
    func guardiansRaceOnTwoConnections() async throws {
        let cluster = try currentCluster()
        let app = try cluster.makeAskCenter()
        let mum = try cluster.makeGuardianCenter(guardians: [GuardianIdentity(id: "g1-1", family: "f1")])
        let dad = try cluster.makeGuardianCenter(guardians: [GuardianIdentity(id: "g1-2", family: "f1")])
        let flow = FlowWatch(children: app, guardians: mum)
        let question = PermissionQuestion(handle: friend)
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
        #expect(await dad.waitUntilRegistered())
        let id = question.id
        // docs/testing.md, "One connection per guardian, for races":
        async let first: Void = mum.answer(questionID: id, choiceID: PermissionChoice.approve.id, as: "g1-1")
        async let second: Void = dad.answer(questionID: id, choiceID: PermissionChoice.decline.id, as: "g1-2")
        var accepted = 0
        do { try await first; accepted += 1 } catch { #expect(error as? GuardianAnswerError == .alreadyClosed) }
        do { try await second; accepted += 1 } catch { #expect(error as? GuardianAnswerError == .alreadyClosed) }
        #expect(accepted == 1)
        let response = try await flow.expectResponse(to: id, within: .seconds(10))
        #expect(try cluster.ledger(id)?.answerChoiceID == response.choice.id)
        await app.stop()
        await mum.stop()
        await dad.stop()
    }
}
