import AskRelayTesting
import AskTestKit
import Foundation
import Testing

/// Every rule of the ask flow (docs/architecture.md, DESIGN.md "The flow it models"), tested against real processes
/// with the cluster harness, as a team would write them. Each test gets a cluster of its own from the trait.
@Suite("Flow rules", .serialized, .timeLimit(.minutes(2)))
struct FlowRuleTests {
    @Test(
        "a sent question reaches every guardian; the first answer wins, the other is told it closed and is refused",
        .askRelayCluster()
    )
    func firstAnswerWins() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let events = Collected(guardians.events())
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))

            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            let delivered = await events.wait(for: 2)
            #expect(
                Set(delivered.compactMap { if case .question(let q) = $0 { q.guardian.id } else { nil } }) == [
                    "g1-1", "g1-2",
                ]
            )

            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
            let late = await answerRefusal(guardians, question.id, PermissionChoice.decline.id, as: "g1-2")
            #expect(late == .alreadyClosed)

            let response = try #require(await responses.wait(for: 1).first)
            #expect(response.question.id == question.id && response.choice == .approve)
            let entry = try await cluster.waitForLedger(question.id) { $0.state == .answered }
            #expect(entry.answeredBy == "g1-1" && entry.answerChoiceID == PermissionChoice.approve.id)
            // The winner knows from its accepted answer; the other guardian is told.
            let closed = await events.first {
                if case .closed(let closed) = $0 { closed.guardian.id == "g1-2" } else { false }
            }
            guard case .closed(let notice) = closed else {
                Issue.record("g1-2 was not told the question closed")
                return
            }
            #expect(notice.reason == .answered && notice.answeredBy == "g1-1")
            // An approval makes the handle known to the system; the response came once.
            #expect(try await eventually { try await children.child("c1-1").limits.isKnownHandle(friend) })
            let came = try await responsesThroughMarker(responses, children: children, guardians: guardians)
            #expect(came.filter { $0 == question.id }.count == 1, "\(came)")
        }
    }

    @Test("a denial answers the child but does not make the handle known", .askRelayCluster())
    func denialLearnsNothing() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            _ = await questions(of: guardians).wait(for: 1)
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.decline.id, as: "g1-2")
            #expect(try #require(await responses.wait(for: 1).first).choice == .decline)
            #expect(try await !children.child("c1-1").limits.isKnownHandle(friend))
        }
    }

    @Test("a cancelled question never gets a response, and guardians never see it", .askRelayCluster())
    func cancelledNeverResponds() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let events = Collected(guardians.events())
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").cancel(question.id)
            #expect(try await cluster.waitForLedger(question.id) { $0.state.isClosed }.state == .cancelled)
            // An answer to it is refused, and sending it now is too.
            #expect(await answerRefusal(guardians, question.id, PermissionChoice.approve.id, as: "g1-1") == .cancelled)
            await #expect(throws: SheetError.self) { try await children.child("c1-1").send(question.id) }
            let came = try await responsesThroughMarker(responses, children: children, guardians: guardians)
            #expect(!came.contains(question.id), "\(came)")
            let seen = events.all.map { event in
                switch event {
                case .question(let delivered): delivered.id
                case .closed(let closed): closed.questionID
                }
            }
            #expect(!seen.isEmpty && !seen.contains(question.id), "\(seen)")
        }
    }

    @Test(
        "a presented question that is never sent is abandoned when the pending window ends",
        .askRelayCluster { $0.drivenClock = true }
    )
    func pendingStateExpires() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, _ in
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            // The default window, 48 hours, a millisecond short: still pending.
            try await cluster.advanceClock(by: .seconds(48 * 3600) - .milliseconds(1))
            #expect(try cluster.ledger(question.id)?.state == .presented)
            try await cluster.advanceClock(by: .milliseconds(1))
            // The broker expired it before acknowledging the advance, and journaled it before that.
            #expect(try cluster.ledger(question.id)?.state == .abandoned)
            await #expect(throws: SheetError.expired) { try await children.child("c1-1").send(question.id) }
        }
    }

    @Test(
        "no answer is accepted after the question's expiry; guardians are told it expired",
        .askRelayCluster { $0.drivenClock = true }
    )
    func noAnswerAfterExpiry() async throws {
        let cluster = try currentCluster()
        let clock = try #require(cluster.clock)
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let events = Collected(guardians.events())
            var question = PermissionQuestion(handle: friend)
            question.expirationDate = clock.now.addingTimeInterval(3600)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            try await cluster.advanceClock(by: .seconds(3600))
            // The broker routed the `closed` notices before it acknowledged the advance: they are on their way.
            let expired = await events.first(within: .seconds(10)) {
                if case .closed(let closed) = $0 { closed.reason == .expired } else { false }
            }
            #expect(expired != nil)
            #expect(await answerRefusal(guardians, question.id, PermissionChoice.approve.id, as: "g1-1") == .expired)
            #expect(try cluster.ledger(question.id)?.state == .expired)
            #expect(responses.all.isEmpty)
        }
    }

    @Test("limits off, contact sync missing or not eligible: ask throws the matching AskError", .askRelayCluster())
    func admissionErrors() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, _ in
            let child = children.child("c1-1")
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", limitsEnabled: false))
            #expect(await askError(child, PermissionQuestion(handle: friend)) == .communicationLimitsNotEnabled)
            try await cluster.changeLimits(
                LimitsAdminChange(child: "c1-1", limitsEnabled: true, contactSyncSetUp: false)
            )
            #expect(await askError(child, PermissionQuestion(handle: friend)) == .contactSyncNotSetup)
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", contactSyncSetUp: true, eligible: false))
            #expect(await askError(child, PermissionQuestion(handle: friend)) == .notAvailable)
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", eligible: true))
            #expect(await askError(child, PermissionQuestion(handle: friend)) == nil)
        }
    }

    @Test(
        "an invalid question is refused with invalidQuestion naming the field; other failures are systemError",
        .askRelayCluster()
    )
    func invalidQuestionsAndSystemErrors() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, _ in
            let child = children.child("c1-1")
            let noPeople = PermissionQuestion(handles: [])
            let emptyHandle = PermissionQuestion(handle: CommunicationHandle(value: "", kind: .emailAddress))
            var foreignDefault = PermissionQuestion(handle: friend)
            foreignDefault.defaultChoice = PermissionChoice(id: "elsewhere", title: "Elsewhere", answer: .denial)
            var past = PermissionQuestion(handle: friend)
            past.expirationDate = Date().addingTimeInterval(-60)
            for question in [noPeople, emptyHandle, foreignDefault, past] {
                let error = await askError(child, question)
                guard case .invalidQuestion(let reason) = error else {
                    Issue.record("expected invalidQuestion, got \(String(describing: error))")
                    continue
                }
                #expect(!reason.field.isEmpty)
            }
            // A child this center does not host, and a limits service that never answers, are system errors.
            // (`AskError.unknown` is what a client reads for an error case it does not know, from a newer limits
            // worker; the askrelay-limits of this package never sends one.)
            guard case .systemError = await askError(children.child("c9-9"), PermissionQuestion(handle: friend)) else {
                Issue.record("an unhosted child should get systemError")
                return
            }
            #expect(try await cluster.run { try cluster.limits.kill() } == .signaled(SIGKILL))
            var options = AskCenter.Options()
            options.askTimeout = .seconds(1)
            let impatient = try cluster.makeAskCenter(options: options)
            defer { Task { await impatient.stop() } }
            guard case .systemError = await askError(impatient.child("c1-1"), PermissionQuestion(handle: friend)) else {
                Issue.record("an ask nobody admits should time out with systemError")
                return
            }
        }
    }

    @Test(
        "known handles: isKnownHandle and knownHandles(in:) follow admin changes, whatever the limits state",
        .askRelayCluster()
    )
    func knownHandles() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, _ in
            let limits = children.child("c1-1").limits
            let stranger = CommunicationHandle(value: "stranger@example.org", kind: .emailAddress)
            #expect(try await !limits.isKnownHandle(friend))
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", limitsEnabled: false, addKnown: [friend]))
            #expect(try await limits.isKnownHandle(friend))
            #expect(try await limits.knownHandles(in: [friend, stranger]) == [friend])
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", removeKnown: [friend]))
            #expect(try await limits.knownHandles(in: [friend, stranger]).isEmpty)
        }
    }

    @Test("the broker is killed -9 after the send: the answer still arrives, exactly once", .askRelayCluster())
    func brokerKilledAfterSend() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            try await cluster.run {
                _ = try cluster.broker.kill(); try cluster.broker.restart()
            }
            // The journal kept the sent question: the guardians get it (again) from the restarted broker.
            #expect(await questions.first { $0.id == question.id } != nil)
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
            #expect(try #require(await responses.wait(for: 1).first).choice == .approve)
            let came = try await responsesThroughMarker(responses, children: children, guardians: guardians)
            #expect(came.filter { $0 == question.id }.count == 1, "\(came)")
            #expect(try cluster.ledger(question.id)?.answeredBy == "g1-1")
        }
    }

    @Test("a broker stopped with SIGSTOP and continued with SIGCONT loses nothing", .askRelayCluster())
    func brokerStoppedAndContinued() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let questions = questions(of: guardians)
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            try await cluster.run { try cluster.broker.suspend() }
            // Stopped long enough for the clients to notice the broker is silent (3 heartbeats of 250 ms).
            #expect(await eventually { !children.isConnected && !guardians.isConnected })
            try await cluster.run { try cluster.broker.resume() }
            #expect(await questions.first { $0.id == question.id } != nil)
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.decline.id, as: "g1-2")
            #expect(try #require(await responses.wait(for: 1).first).choice == .decline)
            let came = try await responsesThroughMarker(responses, children: children, guardians: guardians)
            #expect(came.filter { $0 == question.id }.count == 1, "\(came)")
        }
    }

    @Test(
        "the limits worker restarted: an ask made while it is down is admitted when it is back, state kept",
        .askRelayCluster()
    )
    func limitsRestarted() async throws {
        let cluster = try currentCluster()
        try await withClients(cluster) { children, _ in
            try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", addKnown: [friend]))
            #expect(try await cluster.run { try cluster.limits.terminate() } == .exited(0))
            async let asked = askError(children.child("c1-1"), PermissionQuestion(handle: friend))
            try await cluster.run { try cluster.limits.restart() }
            #expect(await asked == nil)
            // kill -9 and restart: the limits store keeps what it learnt.
            try await cluster.run {
                _ = try cluster.limits.kill(); try cluster.limits.restart()
            }
            #expect(try await children.child("c1-1").limits.isKnownHandle(friend))
        }
    }
}

/// The same flow with CURVE: every process and client authenticates with keys the cluster generated.
@Suite("Flow rules with CURVE", .serialized, .timeLimit(.minutes(1)), .askRelayCluster(curve: true, transport: .ipc))
struct CurveFlowRuleTests {
    @Test("ask, send, answer and response over CURVE")
    func flowOverCurve() async throws {
        let cluster = try currentCluster()
        #expect(cluster.curve != nil)
        try await withClients(cluster) { children, guardians in
            let responses = Collected(children.child("c1-1").responses(for: CommunicationTopic.self))
            let question = PermissionQuestion(handle: friend)
            try await children.child("c1-1").ask(question)
            try await children.child("c1-1").send(question.id)
            _ = await questions(of: guardians).wait(for: 1)
            try await guardians.answer(questionID: question.id, choiceID: PermissionChoice.approve.id, as: "g1-1")
            #expect(try #require(await responses.wait(for: 1).first).choice == .approve)
        }
    }
}
