import AskCLI
import AskAgents
import AskBroker
import AskProtocol
import AskRelayProcesses
import Foundation

/// How one simulated process ended, for the "every process exited cleanly" invariant.
public struct ProcessExitReport: Codable, Sendable, Hashable {
    public var name: String
    /// `exit 0`, `killed by SIGKILL`, ... per run, oldest first.
    public var runs: [Run]

    public struct Run: Codable, Sendable, Hashable {
        public var pid: Int32
        public var exitCode: Int32?
        public var signal: Int32?
        /// Our own fault schedule ended this run with that signal.
        public var expectedSignal: Int32?
        /// Still running when the check was made (never collected).
        public var running: Bool

        public init(
            pid: Int32,
            exitCode: Int32? = nil,
            signal: Int32? = nil,
            expectedSignal: Int32? = nil,
            running: Bool = false
        ) {
            self.pid = pid
            self.exitCode = exitCode
            self.signal = signal
            self.expectedSignal = expectedSignal
            self.running = running
        }

        /// Exit 0, or ended by the very signal our fault schedule sent (a `term` fault may also end in exit 0).
        public var isClean: Bool {
            if running { return false }
            if exitCode == 0 { return true }
            if let signal, let expectedSignal, signal == expectedSignal { return true }
            return false
        }

        public var summary: String {
            if running { return "still running" }
            if let exitCode { return "exit \(exitCode)" }
            if let signal {
                return "killed by \(signalName(signal))" + (expectedSignal == signal ? " (fault schedule)" : "")
            }
            return "unknown"
        }
    }

    public init(name: String, runs: [Run]) {
        self.name = name
        self.runs = runs
    }
}

/// Everything the checker reads: the children's and guardians' JSON Lines records, the broker's ledger (when the
/// simulation ran its own broker), and how each process ended.
public struct InvariantInputs: Sendable {
    public var childRecords: [ChildFlowRecord]
    public var guardianRecords: [GuardianAnswerRecord]
    /// `nil` when the ledger could not be read (an external `--broker`): the ledger checks are skipped.
    public var ledger: [QuestionRecord]?
    public var processes: [ProcessExitReport]
    /// Records lines that did not decode (a process killed mid-write loses at most its last line).
    public var unreadableLines: Int
    /// Runs of parent processes the fault schedule killed or terminated: an answer the broker accepted from one of
    /// their guardians during the run may miss its guardian record (a parent told to stop while the broker is down
    /// never learns the answer was accepted), so the broker's ledger stands in as the evidence of that answer.
    public var interruptedParentRuns: [InterruptedRun]
    /// Runs of child processes that our own signal ended (a fault, or a drain that outlived its bound): the flows
    /// they had in flight are never recorded (askrelay-child records finished flows only): the ledger decides those
    /// it closed, and those it still had open when the broker stopped, before their deadline, are unknown.
    public var interruptedRuns: [InterruptedRun]
    /// When the broker was told to stop at the end of the run; a question still open then is unknown only if it was
    /// interrupted and its deadline had not passed (else a violation).
    public var brokerStoppedAt: Date?
    /// Every power-cut fault played, with its journal check.
    public var powerCuts: [PowerCutCheck]

    public init(
        childRecords: [ChildFlowRecord],
        guardianRecords: [GuardianAnswerRecord],
        ledger: [QuestionRecord]?,
        processes: [ProcessExitReport] = [],
        unreadableLines: Int = 0,
        interruptedParentRuns: [InterruptedRun] = [],
        interruptedRuns: [InterruptedRun] = [],
        brokerStoppedAt: Date? = nil,
        powerCuts: [PowerCutCheck] = []
    ) {
        self.powerCuts = powerCuts
        self.interruptedRuns = interruptedRuns
        self.brokerStoppedAt = brokerStoppedAt
        self.childRecords = childRecords
        self.guardianRecords = guardianRecords
        self.ledger = ledger
        self.processes = processes
        self.unreadableLines = unreadableLines
        self.interruptedParentRuns = interruptedParentRuns
    }
}

/// A power cut of a broker during the run: when it played, and `PRAGMA integrity_check` of what its journal's files
/// held just after it (`["ok"]` when sound).
public struct PowerCutCheck: Codable, Sendable, Hashable {
    public var process: String
    /// The time into the play, as a duration text (`3.2s`).
    public var at: String
    public var integrity: [String]

    public init(process: String, at: String, integrity: [String]) {
        self.process = process
        self.at = at
        self.integrity = integrity
    }
}

/// One run of a child or parent process that our signal ended, and the time in which the broker recorded its
/// questions or answers: from its start until the next run of the same process registered (`nil`: none did). The
/// next run asks and answers only once registered, and this run's last messages may reach the broker after the
/// next run started (a stopped broker reads them when it continues).
public struct InterruptedRun: Codable, Sendable, Hashable {
    public var process: String
    /// Id prefix of the children or guardians the process hosts (`c1-`, `g2-`).
    public var idPrefix: String
    public var from: Date
    public var until: Date?
    /// What ended it, in words (`killed by the fault schedule (SIGKILL)`).
    public var cause: String

    public init(process: String, idPrefix: String, from: Date, until: Date? = nil, cause: String) {
        self.process = process
        self.idPrefix = idPrefix
        self.from = from
        self.until = until
        self.cause = cause
    }

    /// The question was asked by one of this run's children while it ran.
    func owns(_ entry: QuestionRecord) -> Bool { covers(entry.child, at: entry.createdAt) }

    /// The ledger's accepted answer came from one of this run's guardians while it ran.
    func ownsAnswer(_ entry: QuestionRecord) -> Bool {
        guard let guardian = entry.answeredBy, let closedAt = entry.closedAt else { return false }
        return covers(guardian, at: closedAt)
    }

    private func covers(_ id: String, at time: Date) -> Bool {
        id.hasPrefix(idPrefix) && time >= from && until.map { time < $0 } ?? true
    }
}

/// The broker's expiry timer may close a question this long after its deadline.
let ledgerTimerSlack: TimeInterval = 1.5

/// One broken invariant: which one, the questions (or processes) involved, and why.
public struct InvariantViolation: Codable, Sendable, Hashable, CustomStringConvertible {
    public var invariant: Invariant
    public var questions: [UUID]
    public var processes: [String]
    public var message: String

    public init(_ invariant: Invariant, questions: [UUID] = [], processes: [String] = [], _ message: String) {
        self.invariant = invariant
        self.questions = questions
        self.processes = processes
        self.message = message
    }

    public var description: String {
        var subjects = questions.map { $0.uuidString.lowercased() }
        subjects += processes
        return "[\(invariant.rawValue)] \(subjects.joined(separator: ", ")): \(message)"
    }
}

/// The invariants a simulation must keep (docs/simulation.md).
public enum Invariant: String, Codable, Sendable, CaseIterable {
    /// Every question ends exactly once: one child record, a closed ledger entry, and the two agree.
    case endsExactlyOnce = "ends-exactly-once"
    /// A response (approved/denied) only follows a guardian's accepted answer with the same choice.
    case responseNeedsAcceptedAnswer = "response-needs-accepted-answer"
    /// No answer is accepted at or after the question's expiry.
    case noAnswerAfterExpiry = "no-answer-after-expiry"
    /// Guardians honour expiry: none even tries to answer at or after the question's expiry.
    case guardiansHonourExpiry = "guardians-honour-expiry"
    /// No response reaches the app twice.
    case responseAtMostOnce = "response-at-most-once"
    /// A cancelled question never surfaces a response.
    case cancelledNeverResponds = "cancelled-never-responds"
    /// Every process exited with 0, or by the signal our own fault schedule sent.
    case processesExitCleanly = "processes-exit-cleanly"
    /// After every power cut the broker's journal passes `PRAGMA integrity_check` (checked when power cuts played).
    case journalSurvivesPowerCuts = "journal-survives-power-cuts"
}

/// A run's three-valued verdict, as Jepsen gives one: `valid` when every invariant held for every flow, `invalid`
/// when one was violated, `unknown` when none was but some flows' ends could not be decided (``UnknownFlows``).
public enum Verdict: String, Codable, Sendable {
    case valid, invalid, unknown
}

/// Flows of one interrupted process run whose end the run cannot tell: the process died with them in flight, so no
/// child recorded how they ended, and the broker's ledger (the witness) still had them open when it stopped, before
/// their deadline. In-flight flows whose ledger entry closed are decided by it (``InvariantResult/decidedByLedger``).
public struct UnknownFlows: Codable, Sendable, Hashable {
    /// The process whose run ended with them in flight (`child-1`).
    public var process: String
    /// Why they are unknown, in words.
    public var reason: String
    public var count: Int
    /// The first of their question ids (at most the checker's `maxIDs`).
    public var questions: [UUID]

    public init(process: String, reason: String, count: Int, questions: [UUID]) {
        self.process = process
        self.reason = reason
        self.count = count
        self.questions = questions
    }
}

/// One invariant's outcome: `holds`, `violated`, or `undecided` for some flows (and held for the rest).
public struct InvariantStatus: Codable, Sendable, Hashable {
    public enum Status: String, Codable, Sendable { case holds, violated, undecided }
    public var invariant: Invariant
    public var status: Status
    /// The flows it could not be decided for (0 unless `undecided`).
    public var undecidedFlows: Int

    public init(invariant: Invariant, status: Status, undecidedFlows: Int = 0) {
        self.invariant = invariant
        self.status = status
        self.undecidedFlows = undecidedFlows
    }
}

/// The checker's verdict.
public struct InvariantResult: Codable, Sendable {
    public var ok: Bool { violations.isEmpty }
    public var violations: [InvariantViolation]
    /// Invariants that were checked.
    public var checked: [Invariant]
    /// What was skipped, in words.
    public var notes: [String]
    /// Flows whose end could not be decided, per interrupted run.
    public var unknown: [UnknownFlows]
    /// Flows in flight in a process run our signal ended whose ends the broker's ledger decided: ledger state →
    /// count (their child records died with the process).
    public var decidedByLedger: [String: Int]

    /// How many flows' ends could not be decided.
    public var unknownCount: Int { unknown.reduce(0) { $0 + $1.count } }

    public var verdict: Verdict { !ok ? .invalid : unknownCount > 0 ? .unknown : .valid }

    /// Each checked invariant: violated, undecided for the unknown flows (only `ends-exactly-once` depends on how a
    /// flow ended), or holds.
    public var statuses: [InvariantStatus] {
        let violated = Set(violations.map(\.invariant))
        return checked.map { invariant in
            if violated.contains(invariant) { return InvariantStatus(invariant: invariant, status: .violated) }
            if invariant == .endsExactlyOnce && unknownCount > 0 {
                return InvariantStatus(invariant: invariant, status: .undecided, undecidedFlows: unknownCount)
            }
            return InvariantStatus(invariant: invariant, status: .holds)
        }
    }

    enum CodingKeys: String, CodingKey {
        case ok, verdict, violations, checked, statuses, notes, unknown
        case decidedByLedger = "decided_by_ledger"
    }

    public init(
        violations: [InvariantViolation],
        checked: [Invariant],
        notes: [String],
        unknown: [UnknownFlows] = [],
        decidedByLedger: [String: Int] = [:]
    ) {
        self.violations = violations
        self.checked = checked
        self.notes = notes
        self.unknown = unknown
        self.decidedByLedger = decidedByLedger
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        violations = try c.decode([InvariantViolation].self, forKey: .violations)
        checked = try c.decode([Invariant].self, forKey: .checked)
        notes = try c.decode([String].self, forKey: .notes)
        unknown = try c.decodeIfPresent([UnknownFlows].self, forKey: .unknown) ?? []
        decidedByLedger = try c.decodeIfPresent([String: Int].self, forKey: .decidedByLedger) ?? [:]
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(ok, forKey: .ok)
        try c.encode(verdict, forKey: .verdict)
        try c.encode(violations, forKey: .violations)
        try c.encode(checked, forKey: .checked)
        try c.encode(statuses, forKey: .statuses)
        try c.encode(notes, forKey: .notes)
        try c.encode(unknown, forKey: .unknown)
        try c.encode(decidedByLedger, forKey: .decidedByLedger)
    }
}

/// Checks a finished simulation's records. A pure function of its inputs, so tests feed it synthetic records.
public enum InvariantChecker {
    /// Violations are grouped per invariant and reason, each listing the questions involved (at most `maxIDs` ids
    /// per entry, with the count in the message).
    public static func check(_ inputs: InvariantInputs, maxIDs: Int = 20) -> InvariantResult {
        var found: [Key: [UUID]] = [:]
        var order: [Key] = []
        var notes: [String] = []
        func violate(_ invariant: Invariant, _ reason: String, _ id: UUID) {
            let key = Key(invariant: invariant, reason: reason)
            if found[key] == nil { order.append(key) }
            found[key, default: []].append(id)
        }

        let guardianByQuestion = Dictionary(grouping: inputs.guardianRecords, by: \.question)
        var childByQuestion: [UUID: [ChildFlowRecord]] = [:]
        for record in inputs.childRecords {
            if let id = record.question { childByQuestion[id, default: []].append(record) }
        }
        let ledgerByQuestion: [UUID: QuestionRecord]? = inputs.ledger.map { ledger in
            Dictionary(ledger.map { ($0.id.uuid, $0) }, uniquingKeysWith: { first, _ in first })
        }

        // ends-exactly-once. A child writes an extra line, with a higher responsesSurfaced, when a response surfaces
        // for a finished flow; two lines with the same count are two endings.
        var primary: [UUID: ChildFlowRecord] = [:]
        for (id, records) in childByQuestion {
            primary[id] = records.min { $0.responsesSurfaced < $1.responsesSurfaced }
            if Set(records.map(\.responsesSurfaced)).count < records.count {
                violate(
                    .endsExactlyOnce,
                    "question ended more than once in the child records (\(records.map(\.outcome.rawValue).joined(separator: ", ")))",
                    id
                )
            }
        }
        // Questions without a child record asked by a process run our signal ended: the ledger decides those it
        // closed; those it still had open when the broker stopped, before their deadline, are unknown.
        var decided: [InterruptedRun: [String: Int]] = [:]
        var undecided: [InterruptedRun: [UUID]] = [:]
        if let ledgerByQuestion {
            for (id, entry) in ledgerByQuestion {
                let interruption =
                    childByQuestion[id] == nil ? inputs.interruptedRuns.first { $0.owns(entry) } : nil
                if !entry.state.isClosed {
                    let deadlinePassed =
                        inputs.brokerStoppedAt.map {
                            $0.timeIntervalSince(entry.expiresAt) > ledgerTimerSlack
                        } ?? false
                    if let interruption, !deadlinePassed {
                        undecided[interruption, default: []].append(id)
                    } else {
                        violate(
                            .endsExactlyOnce,
                            "the broker's ledger still has the question open (state \(entry.state.rawValue))",
                            id
                        )
                    }
                } else if let interruption {
                    decided[interruption, default: [:]][entry.state.rawValue, default: 0] += 1
                }
                if childByQuestion[id] == nil && interruption == nil {
                    violate(
                        .endsExactlyOnce,
                        "the ledger has the question (state \(entry.state.rawValue)) but no child recorded how it ended",
                        id
                    )
                }
            }
            for (id, record) in primary {
                guard let entry = ledgerByQuestion[id] else {
                    // Refused before the broker recorded it (an invalid question), or never asked.
                    if record.outcome != .refused && record.outcome != .knownHandle {
                        violate(
                            .endsExactlyOnce,
                            "the child recorded '\(record.outcome.rawValue)' but the broker's ledger has no such question",
                            id
                        )
                    }
                    continue
                }
                if let problem = mismatch(record, entry) { violate(.endsExactlyOnce, problem, id) }
            }
        } else {
            notes.append("ledger checks skipped: the broker is external (--broker), its journal was not read")
        }
        var unknown: [UnknownFlows] = []
        var decidedByLedger: [String: Int] = [:]
        for run in inputs.interruptedRuns {
            let byState = decided[run] ?? [:]
            let open = undecided[run] ?? []
            guard !byState.isEmpty || !open.isEmpty else { continue }
            decidedByLedger.merge(byState, uniquingKeysWith: +)
            let decidedCount = byState.values.reduce(0, +)
            var line =
                "\(run.process) was \(run.cause) with \(decidedCount + open.count) question(s) in flight (no child "
                + "record: askrelay-child records finished flows only)"
            if decidedCount > 0 {
                let states = byState.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                line += "; the ledger decided \(decidedCount) (\(states))"
            }
            if !open.isEmpty { line += "; \(open.count) unknown" }
            notes.append(line)
            if !open.isEmpty {
                unknown.append(
                    UnknownFlows(
                        process: run.process,
                        reason: "\(run.cause) with them in flight; still open in the ledger when the broker stopped, "
                            + "before their deadline",
                        count: open.count,
                        questions: Array(open.sorted { $0.uuidString < $1.uuidString }.prefix(maxIDs))
                    )
                )
            }
        }

        // response-needs-accepted-answer, no-answer-after-expiry
        for (id, record) in primary {
            guard record.outcome == .approved || record.outcome == .denied else { continue }
            let accepted = (guardianByQuestion[id] ?? []).filter { $0.result == "accepted" }
            if let answer = accepted.first {
                if let choice = record.choiceID, choice != answer.choiceID {
                    violate(
                        .responseNeedsAcceptedAnswer,
                        "the response's choice differs from the accepted answer's",
                        id
                    )
                }
                continue
            }
            if let entry = ledgerByQuestion?[id], entry.state == .answered,
                inputs.interruptedParentRuns.contains(where: { $0.ownsAnswer(entry) }),
                entry.answerChoiceID == record.choiceID
            {
                continue  // the guardian's record died with its process; the ledger recorded the accepted answer
            }
            violate(.responseNeedsAcceptedAnswer, "a response surfaced but no guardian's answer was accepted", id)
        }
        for answer in inputs.guardianRecords where answer.result == "accepted" {
            if let expiry = answer.expiresAt ?? ledgerByQuestion?[answer.question]?.expiresAt,
                answer.answeredAt >= expiry
            {
                violate(.noAnswerAfterExpiry, "a guardian's answer at or after expiry was accepted", answer.question)
            }
        }
        for answer in inputs.guardianRecords {
            if let expiry = answer.expiresAt ?? ledgerByQuestion?[answer.question]?.expiresAt,
                answer.answeredAt >= expiry
            {
                violate(
                    .guardiansHonourExpiry,
                    "a guardian answered at or after the question's expiry (the broker said '\(answer.result)')",
                    answer.question
                )
            }
        }
        var acceptedCount: [UUID: Int] = [:]
        for answer in inputs.guardianRecords where answer.result == "accepted" {
            acceptedCount[answer.question, default: 0] += 1
        }
        for (id, count) in acceptedCount where count > 1 {
            violate(.responseNeedsAcceptedAnswer, "more than one guardian answer was accepted (\(count))", id)
        }
        if let ledgerByQuestion {
            for (id, entry) in ledgerByQuestion where entry.state == .answered {
                if let closedAt = entry.closedAt, closedAt >= entry.expiresAt {
                    violate(.noAnswerAfterExpiry, "the ledger accepted an answer at or after the question's expiry", id)
                }
            }
        }

        // response-at-most-once, cancelled-never-responds
        for record in inputs.childRecords {
            guard let id = record.question else { continue }
            if record.responsesSurfaced > 1 {
                violate(.responseAtMostOnce, "a response reached the app more than once", id)
            }
            if record.outcome == .cancelled && (record.responsesSurfaced > 0 || record.respondedAt != nil) {
                violate(.cancelledNeverResponds, "a cancelled question surfaced a response", id)
            }
        }

        var violations = order.map { key -> InvariantViolation in
            let ids = found[key] ?? []
            let unique = Array(Set(ids)).sorted { $0.uuidString < $1.uuidString }
            let shown = Array(unique.prefix(maxIDs))
            let more =
                unique.count > shown.count
                ? " (\(unique.count) questions, first \(shown.count) listed)"
                : unique.count > 1 ? " (\(unique.count) questions)" : ""
            return InvariantViolation(key.invariant, questions: shown, key.reason + more)
        }

        // processes-exit-cleanly
        for process in inputs.processes {
            let bad = process.runs.filter { !$0.isClean }
            if !bad.isEmpty {
                violations.append(
                    InvariantViolation(
                        .processesExitCleanly,
                        processes: [process.name],
                        "did not exit cleanly: \(bad.map(\.summary).joined(separator: ", "))"
                    )
                )
            }
        }
        if inputs.unreadableLines > 0 {
            notes.append("\(inputs.unreadableLines) records line(s) did not decode (a process killed mid-write)")
        }
        // journal-survives-power-cuts
        for cut in inputs.powerCuts where cut.integrity != ["ok"] {
            violations.append(
                InvariantViolation(
                    .journalSurvivesPowerCuts,
                    processes: [cut.process],
                    "the journal failed integrity_check after the power cut at \(cut.at): "
                        + cut.integrity.prefix(3).joined(separator: "; ")
                )
            )
        }
        if !inputs.powerCuts.isEmpty {
            let sound = inputs.powerCuts.filter { $0.integrity == ["ok"] }.count
            notes.append(
                "\(inputs.powerCuts.count) power cut(s); the journal passed integrity_check after \(sound) of them"
            )
        }
        var checked = Invariant.allCases
        if inputs.processes.isEmpty { checked.removeAll { $0 == .processesExitCleanly } }
        if inputs.powerCuts.isEmpty { checked.removeAll { $0 == .journalSurvivesPowerCuts } }
        return InvariantResult(
            violations: violations,
            checked: checked,
            notes: notes,
            unknown: unknown,
            decidedByLedger: decidedByLedger
        )
    }

    private struct Key: Hashable {
        var invariant: Invariant
        var reason: String
    }

    /// How a child's outcome must look in the ledger; `nil` when they agree.
    static func mismatch(_ record: ChildFlowRecord, _ entry: QuestionRecord) -> String? {
        let expected: [QuestionState]
        switch record.outcome {
        case .approved, .denied: expected = [.answered]
        case .cancelled: expected = [.cancelled]
        case .expired: expected = [.expired]
        case .abandoned: expected = [.abandoned, .expired]
        case .refused: expected = [.refused]
        case .knownHandle: expected = []
        }
        guard expected.contains(entry.state) else {
            return "the child recorded '\(record.outcome.rawValue)' but the ledger says '\(entry.state.rawValue)'"
        }
        if entry.state == .answered, let choice = record.choiceID, let answered = entry.answerChoiceID,
            choice != answered
        {
            return "the child's choice differs from the ledger's answer"
        }
        if record.outcome == .approved, let answered = entry.answerChoiceID, !entry.approvalChoiceIDs.contains(answered)
        {
            return "the child recorded 'approved' but the accepted choice is a denial"
        }
        if record.outcome == .denied, let answered = entry.answerChoiceID, entry.approvalChoiceIDs.contains(answered) {
            return "the child recorded 'denied' but the accepted choice is an approval"
        }
        return nil
    }
}
