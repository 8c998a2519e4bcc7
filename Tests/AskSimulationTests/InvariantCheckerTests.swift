import AskAgents
import AskBroker
import AskProtocol
import Foundation
import Testing

@testable import AskSimulation

/// A small synthetic run: one question per outcome, consistent across child records, guardian records and ledger.
struct SyntheticRun {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    var children: [ChildFlowRecord] = []
    var guardians: [GuardianAnswerRecord] = []
    var ledger: [QuestionRecord] = []
    var processes: [ProcessExitReport] = [
        .init(name: "broker", runs: [.init(pid: 10, exitCode: 0)]),
        .init(name: "child-1", runs: [.init(pid: 11, exitCode: 0)]),
    ]
    var ids: [String: UUID] = [:]

    init() {
        add("approved", outcome: .approved, state: .answered, choice: "q-approve", approve: true)
        add("denied", outcome: .denied, state: .answered, choice: "q-decline", approve: false)
        add("cancelled", outcome: .cancelled, state: .cancelled)
        add("expired", outcome: .expired, state: .expired)
        add("abandoned", outcome: .abandoned, state: .abandoned)
        add("refused", outcome: .refused, state: .refused, askError: "communicationLimitsNotEnabled")
        // An invalid question is refused by the broker before the ledger records it.
        add("invalid", outcome: .refused, state: nil, askError: "invalidQuestion")
        children.append(
            ChildFlowRecord(
                question: nil,
                child: "c1-0-0",
                family: "f0",
                topic: "communication",
                outcome: .knownHandle,
                closedAt: t0
            )
        )
    }

    mutating func add(
        _ name: String,
        outcome: FlowOutcome,
        state: QuestionState?,
        choice: String? = nil,
        approve: Bool = false,
        askError: String? = nil
    ) {
        let id = UUID()
        ids[name] = id
        let asked = t0
        let expires = t0.addingTimeInterval(3)
        let answered = outcome == .approved || outcome == .denied
        children.append(
            ChildFlowRecord(
                question: id,
                child: "c1-0-0",
                family: "f0",
                topic: "communication",
                outcome: outcome,
                askError: askError,
                choiceID: answered ? choice : nil,
                askedAt: asked,
                presentedAt: asked.addingTimeInterval(0.01),
                sentAt: answered || outcome == .expired ? asked.addingTimeInterval(0.02) : nil,
                respondedAt: answered ? asked.addingTimeInterval(0.5) : nil,
                closedAt: asked.addingTimeInterval(answered ? 0.5 : 3),
                expiresAt: expires,
                responsesSurfaced: answered ? 1 : 0
            )
        )
        if answered, let choice {
            guardians.append(
                GuardianAnswerRecord(
                    question: id,
                    guardian: "g1-f0-0",
                    family: "f0",
                    choiceID: choice,
                    receivedAt: asked.addingTimeInterval(0.03),
                    answeredAt: asked.addingTimeInterval(0.4),
                    result: "accepted",
                    expiresAt: expires
                )
            )
            guardians.append(
                GuardianAnswerRecord(
                    question: id,
                    guardian: "g2-f0-0",
                    family: "f0",
                    choiceID: choice,
                    receivedAt: asked.addingTimeInterval(0.03),
                    answeredAt: asked.addingTimeInterval(0.45),
                    result: "already-closed",
                    expiresAt: expires
                )
            )
        }
        if let state {
            ledger.append(
                QuestionRecord(
                    id: MessageID(uuid: id),
                    child: "c1-0-0",
                    family: "f0",
                    state: state,
                    createdAt: asked,
                    expiresAt: expires,
                    question: [],
                    choiceIDs: ["q-approve", "q-decline"],
                    approvalChoiceIDs: ["q-approve"],
                    answeredBy: answered ? "g1-f0-0" : nil,
                    answerChoiceID: answered ? choice : nil,
                    closedAt: state.isClosed ? asked.addingTimeInterval(answered ? 0.41 : 3) : nil
                )
            )
        }
    }

    var inputs: InvariantInputs {
        InvariantInputs(childRecords: children, guardianRecords: guardians, ledger: ledger, processes: processes)
    }

    func check(_ inputs: InvariantInputs? = nil) -> InvariantResult { InvariantChecker.check(inputs ?? self.inputs) }

    mutating func editChild(_ name: String, _ edit: (inout ChildFlowRecord) -> Void) {
        let index = children.firstIndex { $0.question == ids[name] }!
        edit(&children[index])
    }

    mutating func editLedger(_ name: String, _ edit: (inout QuestionRecord) -> Void) {
        let index = ledger.firstIndex { $0.id == MessageID(uuid: ids[name]!) }!
        edit(&ledger[index])
    }
}

@Suite("InvariantChecker on synthetic records", .timeLimit(.minutes(1)))
struct InvariantCheckerTests {
    func expectViolation(
        _ result: InvariantResult,
        _ invariant: Invariant,
        question: UUID?,
        process: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(!result.ok, sourceLocation: sourceLocation)
        let matching = result.violations.filter { $0.invariant == invariant }
        #expect(
            !matching.isEmpty,
            "expected \(invariant.rawValue), got \(result.violations)",
            sourceLocation: sourceLocation
        )
        if let question {
            #expect(
                matching.contains { $0.questions.contains(question) },
                "\(question) not named in \(matching)",
                sourceLocation: sourceLocation
            )
            #expect(
                matching.first.map { "\($0)" }?.contains(question.uuidString.lowercased()) == true,
                sourceLocation: sourceLocation
            )
        }
        if let process {
            #expect(matching.contains { $0.processes.contains(process) }, sourceLocation: sourceLocation)
        }
    }

    @Test("a clean run passes every invariant")
    func cleanRun() {
        let result = SyntheticRun().check()
        #expect(result.ok, "\(result.violations)")
        // A run without power cuts does not claim to have checked the journal after them.
        #expect(result.checked == Invariant.allCases.filter { $0 != .journalSurvivesPowerCuts })
        #expect(result.notes.isEmpty)
    }

    @Test("power cuts: the journal's integrity_check after each is checked; one that failed is a violation")
    func powerCuts() {
        let run = SyntheticRun()
        var inputs = run.inputs
        inputs.powerCuts = [
            PowerCutCheck(process: "broker", at: "1.2s", integrity: ["ok"]),
            PowerCutCheck(process: "broker", at: "2.5s", integrity: ["ok"]),
        ]
        let sound = run.check(inputs)
        #expect(sound.ok, "\(sound.violations)")
        #expect(sound.checked.contains(.journalSurvivesPowerCuts))
        #expect(sound.notes == ["2 power cut(s); the journal passed integrity_check after 2 of them"])
        inputs.powerCuts.append(
            PowerCutCheck(process: "broker", at: "4s", integrity: ["*** in database main ***", "Page 7: never used"])
        )
        let broken = run.check(inputs)
        expectViolation(broken, .journalSurvivesPowerCuts, question: nil, process: "broker")
        #expect(broken.violations.first?.message.contains("after the power cut at 4s: *** in database main") == true)
        #expect(broken.notes == ["3 power cut(s); the journal passed integrity_check after 2 of them"])
    }

    @Test("a question recorded twice by the child ends more than once")
    func endedTwice() {
        var run = SyntheticRun()
        run.children.append(run.children.first { $0.question == run.ids["expired"] }!)
        expectViolation(run.check(), .endsExactlyOnce, question: run.ids["expired"])
    }

    @Test("a question still open in the ledger has not ended")
    func stillOpen() {
        var run = SyntheticRun()
        run.editLedger("expired") {
            $0.state = .sent
            $0.closedAt = nil
        }
        expectViolation(run.check(), .endsExactlyOnce, question: run.ids["expired"])
    }

    @Test("a ledger question without a child record has not ended for the child")
    func missingChildRecord() {
        var run = SyntheticRun()
        run.children.removeAll { $0.question == run.ids["cancelled"] }
        expectViolation(run.check(), .endsExactlyOnce, question: run.ids["cancelled"])
    }

    @Test("a child outcome that disagrees with the ledger is reported")
    func inconsistent() {
        var run = SyntheticRun()
        run.editLedger("expired") { $0.state = .cancelled }
        expectViolation(run.check(), .endsExactlyOnce, question: run.ids["expired"])
        var approvedAsDenied = SyntheticRun()
        approvedAsDenied.editChild("approved") { $0.outcome = .denied }
        expectViolation(approvedAsDenied.check(), .endsExactlyOnce, question: approvedAsDenied.ids["approved"])
    }

    @Test("a response without an accepted guardian answer is reported")
    func responseWithoutAnswer() {
        var run = SyntheticRun()
        run.guardians.removeAll { $0.question == run.ids["approved"] && $0.result == "accepted" }
        expectViolation(run.check(), .responseNeedsAcceptedAnswer, question: run.ids["approved"])
    }

    @Test("when a fault ended the parent run whose guardian answered, the ledger stands in for its lost record")
    func lostGuardianRecordExcused() {
        var run = SyntheticRun()
        run.guardians.removeAll { $0.question == run.ids["approved"] && $0.result == "accepted" }
        var inputs = run.inputs
        let terminated = InterruptedRun(
            process: "parent-1",
            idPrefix: "g1-",
            from: run.t0.addingTimeInterval(-10),
            until: run.t0.addingTimeInterval(5),
            cause: "terminated by the fault schedule (SIGTERM)"
        )
        inputs.interruptedParentRuns = [terminated]
        #expect(run.check(inputs).ok, "\(run.check(inputs).violations)")
        // Another parent's run, or a run that had ended before the answer was accepted: the record is missing.
        inputs.interruptedParentRuns = [InterruptedRun(process: "parent-2", idPrefix: "g2-", from: run.t0, cause: "x")]
        expectViolation(run.check(inputs), .responseNeedsAcceptedAnswer, question: run.ids["approved"])
        var earlier = terminated
        earlier.until = run.t0
        inputs.interruptedParentRuns = [earlier]
        expectViolation(run.check(inputs), .responseNeedsAcceptedAnswer, question: run.ids["approved"])
    }

    @Test("an answer accepted at or after expiry is reported (guardian record)")
    func acceptedAfterExpiryGuardian() {
        var run = SyntheticRun()
        let index = run.guardians.firstIndex { $0.question == run.ids["denied"] && $0.result == "accepted" }!
        run.guardians[index].answeredAt = run.guardians[index].expiresAt!
        expectViolation(run.check(), .noAnswerAfterExpiry, question: run.ids["denied"])
    }

    @Test("an answer accepted at or after expiry is reported (ledger)")
    func acceptedAfterExpiryLedger() {
        var run = SyntheticRun()
        run.editLedger("approved") { $0.closedAt = $0.expiresAt.addingTimeInterval(0.001) }
        expectViolation(run.check(), .noAnswerAfterExpiry, question: run.ids["approved"])
    }

    @Test("a guardian that answers at or after expiry is reported even when the broker refused it")
    func guardianIgnoredExpiry() {
        var run = SyntheticRun()
        let expired = run.ids["expired"]!
        run.guardians.append(
            GuardianAnswerRecord(
                question: expired,
                guardian: "g1-0-0",
                family: "f0",
                choiceID: "q-approve",
                receivedAt: run.t0,
                answeredAt: run.t0.addingTimeInterval(3),
                result: "expired",
                expiresAt: run.t0.addingTimeInterval(3)
            )
        )
        let result = run.check()
        expectViolation(result, .guardiansHonourExpiry, question: expired)
        #expect(!result.violations.contains { $0.invariant == .noAnswerAfterExpiry })
    }

    @Test("an extra line for a second response is a response surfaced twice, not a second ending")
    func extraLine() {
        var run = SyntheticRun()
        var extra = run.children.first { $0.question == run.ids["approved"] }!
        extra.responsesSurfaced = 2
        run.children.append(extra)
        let result = run.check()
        expectViolation(result, .responseAtMostOnce, question: run.ids["approved"])
        #expect(!result.violations.contains { $0.invariant == .endsExactlyOnce })
    }

    @Test(
        "a killed child's in-flight question the ledger closed is decided by the ledger, not a violation, only for that run's questions"
    )
    func interruptedChild() {
        var run = SyntheticRun()
        run.children.removeAll { $0.question == run.ids["expired"] }
        var inputs = run.inputs
        let killed = InterruptedRun(
            process: "child-1",
            idPrefix: "c1-",
            from: run.t0.addingTimeInterval(-10),
            until: run.t0.addingTimeInterval(5),
            cause: "killed by the fault schedule (SIGKILL)"
        )
        inputs.interruptedRuns = [killed]
        let result = run.check(inputs)
        #expect(result.ok, "\(result.violations)")
        // The ledger closed it (expired): a definite end, so the verdict is valid, and the count says so.
        #expect(result.verdict == .valid && result.unknown.isEmpty)
        #expect(result.decidedByLedger == ["expired": 1])
        #expect(
            result.notes.contains {
                $0.hasPrefix("child-1 was killed by the fault schedule (SIGKILL) with 1 question(s) in flight")
                    && $0.contains("the ledger decided 1 (expired 1)")
            },
            "\(result.notes)"
        )
        // Another process's run, or a run of the same process that ended before the question was asked: not excused.
        inputs.interruptedRuns = [InterruptedRun(process: "child-2", idPrefix: "c2-", from: run.t0, cause: "x")]
        expectViolation(run.check(inputs), .endsExactlyOnce, question: run.ids["expired"])
        var earlier = killed
        earlier.until = run.t0.addingTimeInterval(-1)
        inputs.interruptedRuns = [earlier]
        expectViolation(run.check(inputs), .endsExactlyOnce, question: run.ids["expired"])
    }

    @Test("an interrupted question still open when the broker stopped is unknown before its deadline, else a violation")
    func interruptedOpenQuestion() throws {
        var run = SyntheticRun()
        let id = run.ids["expired"]!
        run.children.removeAll { $0.question == id }
        let index = run.ledger.firstIndex { $0.id.uuid == id }!
        run.ledger[index].state = .sent
        run.ledger[index].closedAt = nil
        var inputs = run.inputs
        inputs.interruptedRuns = [
            InterruptedRun(
                process: "child-1",
                idPrefix: "c1-",
                from: run.t0.addingTimeInterval(-10),
                cause: "told to finish (SIGTERM) after its drain bound"
            )
        ]
        // The broker stopped before the question's deadline (t0 + 3 s): nobody could have closed it.
        inputs.brokerStoppedAt = run.t0.addingTimeInterval(2)
        let result = run.check(inputs)
        #expect(result.ok, "\(result.violations)")
        // Not excused: unknown, with its process, reason and id, and ends-exactly-once undecided for it.
        #expect(result.verdict == .unknown)
        #expect(result.unknownCount == 1)
        #expect(result.unknown.first?.process == "child-1" && result.unknown.first?.questions == [id])
        #expect(result.unknown.first?.reason.contains("still open in the ledger when the broker stopped") == true)
        #expect(
            result.statuses.first { $0.invariant == .endsExactlyOnce }
                == InvariantStatus(invariant: .endsExactlyOnce, status: .undecided, undecidedFlows: 1)
        )
        #expect(result.statuses.filter { $0.status == .holds }.count == result.checked.count - 1)
        #expect(
            result.notes.contains {
                $0.contains("SIGTERM) after its drain bound") && $0.contains("; 1 unknown")
            }
        )
        // The verdict travels in report.json, and an older report without it still decodes.
        let data = try JSONEncoder().encode(result)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["verdict"] as? String == "unknown")
        #expect(try JSONDecoder().decode(InvariantResult.self, from: data).unknownCount == 1)
        let older = try JSONSerialization.data(
            withJSONObject: ["ok": true, "violations": [], "checked": ["ends-exactly-once"], "notes": []]
        )
        #expect(try JSONDecoder().decode(InvariantResult.self, from: older).verdict == .valid)
        // Stopped well after the deadline: the broker should have expired it.
        inputs.brokerStoppedAt = run.t0.addingTimeInterval(10)
        expectViolation(run.check(inputs), .endsExactlyOnce, question: id)
        // Not interrupted: an open question is a violation whenever the broker stopped.
        inputs.interruptedRuns = []
        inputs.brokerStoppedAt = run.t0.addingTimeInterval(2)
        expectViolation(run.check(inputs), .endsExactlyOnce, question: id)
    }

    @Test("a response surfaced twice is reported")
    func surfacedTwice() {
        var run = SyntheticRun()
        run.editChild("approved") { $0.responsesSurfaced = 2 }
        expectViolation(run.check(), .responseAtMostOnce, question: run.ids["approved"])
    }

    @Test("a cancelled question that surfaced a response is reported")
    func cancelledResponded() {
        var run = SyntheticRun()
        run.editChild("cancelled") {
            $0.responsesSurfaced = 1
            $0.respondedAt = $0.closedAt
        }
        expectViolation(run.check(), .cancelledNeverResponds, question: run.ids["cancelled"])
    }

    @Test("a process that crashed, or exited non-zero, or is still running, is reported; a fault-schedule kill is not")
    func processes() {
        var run = SyntheticRun()
        run.processes = [
            .init(
                name: "broker",
                runs: [.init(pid: 1, signal: SIGKILL, expectedSignal: SIGKILL), .init(pid: 2, exitCode: 0)]
            ),
            .init(name: "parent-1", runs: [.init(pid: 3, signal: SIGSEGV)]),
            .init(name: "child-1", runs: [.init(pid: 4, exitCode: 1)]),
            .init(name: "limits", runs: [.init(pid: 5, running: true)]),
        ]
        let result = run.check()
        expectViolation(result, .processesExitCleanly, question: nil, process: "parent-1")
        expectViolation(result, .processesExitCleanly, question: nil, process: "child-1")
        expectViolation(result, .processesExitCleanly, question: nil, process: "limits")
        #expect(!result.violations.contains { $0.processes.contains("broker") })
        #expect(result.violations.first { $0.processes == ["parent-1"] }?.message.contains("SIGSEGV") == true)
    }

    @Test("without the ledger (external broker) the ledger checks are skipped and said so")
    func withoutLedger() {
        var run = SyntheticRun()
        run.ledger = []
        var inputs = run.inputs
        inputs.ledger = nil
        let result = run.check(inputs)
        #expect(result.ok)
        #expect(result.notes.contains { $0.contains("ledger checks skipped") })
    }

    @Test("many questions breaking one rule give one violation that names them and counts them")
    func grouped() {
        var run = SyntheticRun()
        var ids: [UUID] = []
        for _ in 0..<30 {
            let id = UUID()
            ids.append(id)
            run.children.append(
                ChildFlowRecord(
                    question: id,
                    child: "c",
                    family: "f0",
                    topic: "communication",
                    outcome: .cancelled,
                    closedAt: run.t0,
                    responsesSurfaced: 1
                )
            )
        }
        let result = InvariantChecker.check(
            InvariantInputs(childRecords: run.children, guardianRecords: run.guardians, ledger: nil)
        )
        let cancelled = result.violations.filter { $0.invariant == .cancelledNeverResponds }
        #expect(cancelled.count == 1)
        #expect(cancelled.first?.questions.count == 20)
        #expect(cancelled.first?.message.contains("30 questions") == true)
    }
}
