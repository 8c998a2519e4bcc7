import AskAgents
import AskBroker
import AskClient
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// The parent worker against a real in-process broker and limits worker, with a raw peer playing the child.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ParentWorkerTests {
    final class Setup {
        let broker: TestBroker
        let context: ZMQContext
        let data = TempDirectory()
        let limits: LimitsWorker
        var parent: ParentWorker?
        let events = Collected<ParentWorkerEvent>()
        let child: RawPeer
        var recordsPath: String { data.path + "/answers.jsonl" }

        /// - Parameter clock: the broker's and the parent's clock (a test that drives time gives a `DrivenClock`).
        init(guardians: [GuardianSetup], answerAfterExpiry: Bool = false, clock: any AskClock = SystemClock()) throws {
            broker = try TestBroker { $0.clock = clock }
            context = try ZMQContext()
            var limitsConfiguration = LimitsWorkerConfiguration()
            limitsConfiguration.broker = broker.endpoint
            limitsConfiguration.dataDirectory = data.path + "/limits"
            limitsConfiguration.heartbeat = .milliseconds(200)
            let limitsReady = Collected<Int>()
            limits = try LimitsWorker(
                configuration: limitsConfiguration,
                logger: .silent(),
                context: context,
                onRegistered: { limitsReady.append($0) }
            )
            _ = try limitsReady.expect { _ in true }

            var configuration = ParentWorkerConfiguration(guardians: guardians)
            configuration.seed = 7
            configuration.recordsPath = data.path + "/answers.jsonl"
            configuration.answerAfterExpiry = answerAfterExpiry
            configuration.clock = clock
            let registered = Collected<Bool>()
            let events = self.events
            parent = try ParentWorker(
                configuration: configuration,
                broker: broker.endpoint,
                heartbeat: .milliseconds(200),
                logger: .silent(),
                context: context,
                onRegistered: { registered.append(true) },
                onEvent: { events.append($0) }
            )
            _ = try registered.expect { _ in true }

            child = try RawPeer(context: context, endpoint: broker.endpoint)
            try child.register(role: .child, ["child/c1"], family: "f1")
        }

        func stop() {
            parent?.stop()
            limits.stop()
            broker.stop()
            data.cleanup()
        }

        func records() -> [GuardianAnswerRecord] {
            JSONLinesWriter.read(GuardianAnswerRecord.self, path: recordsPath).values
        }

        func response(for q: AnyPermissionQuestion, timeout: Duration = .seconds(5)) throws -> AnyPermissionResponse {
            try child.expect(timeout: timeout) {
                $0.command == .deliver && $0.kind == AnyPermissionResponse.kind
                    && (try? $0.decode(AnyPermissionResponse.self).question.id) == q.id
            }.decode(AnyPermissionResponse.self)
        }

        func result(for q: AnyPermissionQuestion, guardian: String? = nil) throws -> GuardianAnswerRecord {
            let event = try events.expect {
                if case .answerResult(let record) = $0 {
                    return record.question == q.id && (guardian == nil || record.guardian == guardian)
                }
                return false
            }
            guard case .answerResult(let record) = event else { throw TestFailure("not a result") }
            return record
        }
    }

    static func guardian(
        _ id: String,
        _ policy: DecisionPolicy,
        think: ThinkTime = .fixed(.zero),
        offline: OfflineSchedule? = nil
    ) -> GuardianSetup {
        GuardianSetup(id: id, family: "f1", policy: policy, think: think, offline: offline)
    }

    @Test(arguments: [(DecisionPolicy.approveAll, PermissionChoice.approve), (.denyAll, .decline)])
    func answersPerPolicy(policy: DecisionPolicy, choice: PermissionChoice) throws {
        let setup = try Setup(guardians: [Self.guardian("g1", policy, think: .fixed(.milliseconds(20)))])
        defer { setup.stop() }
        let q = question([phone("+14155550123")])
        try setup.child.askAndSend(q, child: "c1")
        #expect(try setup.response(for: q).choice == choice)
        let record = try setup.result(for: q)
        #expect(record.result == "accepted")
        #expect(record.choiceID == choice.id)
        #expect(record.answeredAt >= record.receivedAt)
        #expect(setup.records().map(\.question) == [q.id])
    }

    @Test func neverPolicyDoesNotAnswer() throws {
        let setup = try Setup(guardians: [Self.guardian("g1", .never)])
        defer { setup.stop() }
        let q = question([phone("+14155550124")])
        try setup.child.askAndSend(q, child: "c1")
        _ = try setup.events.expect {
            if case .dropped(_, let id, "never") = $0 { return id == q.id }; return false
        }
        // Evidence that an answer would have come by now: a later question, delivered to the parent on the same
        // connection, has been let go too; and the broker has relayed to the child all it had.
        let later = question([phone("+14155550128")])
        try setup.child.askAndSend(later, child: "c1")
        _ = try setup.events.expect {
            if case .dropped(_, let id, "never") = $0 { return id == later.id }; return false
        }
        #expect(!setup.events.all.contains { if case .answered = $0 { true } else { false } })
        #expect(try setup.child.receivesNothing { $0.kind == AnyPermissionResponse.kind })
        #expect(setup.records().isEmpty)
    }

    @Test func firstOfTwoGuardiansWinsAndTheOtherIsRefusedAlreadyClosed() throws {
        // Both think one second on a driven clock that moves only once both hold the question: the worker's tick
        // then decides both in one turn and sends both answers before it can read the broker's close. (With no think
        // time, a loaded machine let the first answer's close arrive before the second guardian decided.)
        let clock = DrivenClock()
        let think = ThinkTime.fixed(.seconds(1))
        let setup = try Setup(
            guardians: [Self.guardian("g1", .approveAll, think: think), Self.guardian("g2", .denyAll, think: think)],
            clock: clock
        )
        defer { setup.stop() }
        let q = question([phone("+14155550125")])
        try setup.child.askAndSend(q, child: "c1")
        for guardian in ["g1", "g2"] {
            _ = try setup.events.expect {
                if case .received(guardian, let id) = $0 { return id == q.id }; return false
            }
        }
        clock.advance(by: .seconds(1))
        let response = try setup.response(for: q)
        let first = try setup.result(for: q, guardian: "g1")
        let second = try setup.result(for: q, guardian: "g2")
        let results = [first, second].sorted { $0.result < $1.result }
        #expect(results.map(\.result) == ["accepted", "already-closed"])
        #expect(results[0].choiceID == response.choice.id)
        #expect(Set(setup.records().map(\.result)) == ["accepted", "already-closed"])
        // Both answers were handled by the broker (both results came back): a second response would be here.
        #expect(try setup.child.receivesNothing { $0.kind == AnyPermissionResponse.kind })
    }

    @Test func neverAnswersAtOrAfterExpiry() throws {
        // On a driven clock the broker and the parent share: the guardian thinks 2 minutes, the question expires
        // after 1; a second question without expiry is the evidence that the think time did pass.
        let clock = DrivenClock()
        let setup = try Setup(
            guardians: [Self.guardian("g1", .approveAll, think: .fixed(.seconds(120)))],
            clock: clock
        )
        defer { setup.stop() }
        var q = question([phone("+14155550126")])
        q.expirationDate = clock.now.addingTimeInterval(60)
        try setup.child.askAndSend(q, child: "c1")
        let witness = question([phone("+14155550129")])
        try setup.child.askAndSend(witness, child: "c1")
        for id in [q.id, witness.id] {
            _ = try setup.events.expect(within: .seconds(5)) {
                if case .received(_, let received) = $0 { return received == id }
                return false
            }
        }
        clock.advance(by: .seconds(60))
        let expiring = q.id
        let dropped = try setup.events.expect(within: .seconds(5)) {
            if case .dropped(_, let id, _) = $0 { return id == expiring }
            return false
        }
        guard case .dropped(_, _, let why) = dropped else { return }
        #expect(why == "closed-expired" || why == "expired")
        // Past the think time: the witness (held as long, decided no earlier) is answered, the expired one is not.
        clock.advance(by: .seconds(60))
        _ = try setup.events.expect(within: .seconds(5)) {
            if case .answered(_, let id, _) = $0 { return id == witness.id }
            return false
        }
        #expect(
            !setup.events.all.contains {
                if case .answered(_, let id, _) = $0 { return id == q.id }
                return false
            }
        )
        _ = try setup.result(for: witness)
        #expect(setup.records().map(\.question) == [witness.id])
    }

    @Test func answerAfterExpiryModeIsRefusedExpired() throws {
        let clock = DrivenClock()
        let setup = try Setup(guardians: [Self.guardian("g1", .approveAll)], answerAfterExpiry: true, clock: clock)
        defer { setup.stop() }
        var q = question([phone("+14155550127")])
        q.expirationDate = clock.now.addingTimeInterval(60)
        try setup.child.askAndSend(q, child: "c1")
        let expiring = q.id
        _ = try setup.events.expect {
            if case .received(_, let id) = $0 { return id == expiring }; return false
        }
        clock.advance(by: .seconds(60))
        let record = try setup.result(for: q)
        #expect(record.result == "expired")
        let expiry = try #require(record.expiresAt)
        #expect(record.answeredAt >= expiry)
        #expect(setup.records().map(\.result) == ["expired"])
        #expect(setup.records().map(\.question) == [q.id])
    }

    @Test func offlineGuardianAnswersQueuedQuestionWhenBack() throws {
        let offline = try OfflineSchedule(every: .seconds(60), duration: .seconds(1))
        let clock = DrivenClock()
        let setup = try Setup(guardians: [Self.guardian("g1", .approveAll, offline: offline)], clock: clock)
        defer { setup.stop() }
        let q = question([phone("+14155550128")])
        try setup.child.askAndSend(q, child: "c1")
        _ = try setup.events.expect {
            if case .received(_, let id) = $0 { return id == q.id }; return false
        }
        clock.advance(by: .seconds(1))
        let response: AnyPermissionResponse
        do { response = try setup.response(for: q) } catch {
            throw TestFailure("\(error); parent events: \(setup.events.all)")
        }
        #expect(response.choice == .approve)
        // The guardian was offline for the first second of its life; the answer came only after it was back (the
        // record's dates are the driven clock's).
        let record = try setup.result(for: q)
        #expect(record.result == "accepted")
        #expect(record.answeredAt.timeIntervalSince(record.receivedAt) >= 1)
    }
}
