import AskAgents
import AskCLI
import AskBroker
import AskProtocol
import Foundation

/// One fault of the schedule as the run played it, or why it did not play (``FaultRunner`` fills these).
public struct FaultPlay: Sendable, Equatable {
    /// Its index in the scenario's `faults`.
    public var index: Int
    public var fault: Scenario.Fault
    /// When it played, after the children started; `nil`: it did not play (`skipped` says why).
    public var playedAt: Duration?
    public var skipped: String?
    /// A message fault: the messages it matched and took on every link it was on, read when the play ended.
    public var messages: (matched: Int, taken: Int)?

    public init(index: Int, fault: Scenario.Fault, playedAt: Duration?, skipped: String? = nil) {
        self.index = index
        self.fault = fault
        self.playedAt = playedAt
        self.skipped = skipped
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.index == rhs.index && lhs.fault == rhs.fault && lhs.playedAt == rhs.playedAt && lhs.skipped == rhs.skipped
            && lhs.messages?.matched == rhs.messages?.matched && lhs.messages?.taken == rhs.messages?.taken
    }
}

/// What one fault touched: the questions in flight on the process it hit, at the moment it played, counted by state
/// from the run's records (docs/simulation.md, "Coverage"). A played fault that touched none is `vacuous`.
public struct FaultCoverage: Codable, Sendable, Equatable {
    /// Where a question in flight was when the fault played.
    public enum State: String, CaseIterable, Sendable {
        /// The child asked (`askedAt`); the broker and limits worker have not presented it yet (`presentedAt`).
        case asking
        /// Presented to the child, not sent to the guardians yet (`sentAt`).
        case presented
        /// Sent, no answer accepted yet.
        case sent
        /// A guardian's answer was accepted; the response has not closed the child's flow yet.
        case answered
        /// In the broker's ledger (created, not closed) with no child record: the child process ended with it, so
        /// its stage is not known.
        case unrecorded
    }

    /// Its index in the scenario's `faults`.
    public var fault: Int
    /// When it was scheduled (`at` of the scenario).
    public var at: String
    /// The process it hit; for `run`, the command.
    public var target: String
    public var action: String
    public var played: Bool
    /// Seconds after the children started when it played.
    public var playedAt: Double?
    /// The wall-clock moment it played: what the records' timestamps are compared with.
    public var time: Date?
    /// Which flows the target serves, in words.
    public var serves: String?
    /// Whether the flows it touched can be counted (`false` for `run`: the scenario does not say what it affects).
    public var measured: Bool
    /// Questions in flight on the target when it played, by ``State`` (every state listed, 0 included).
    public var flows: [String: Int]?
    /// The sum of `flows`.
    public var touched: Int?
    /// It played and touched no question in flight, or it did not play at all.
    public var vacuous: Bool
    /// Why it did not play, why it is not measured, or what the count cannot see.
    public var note: String?
    /// A message fault: the messages that matched it while it was in effect, and those it took (dropped, delayed
    /// or duplicated), counted by its links. Such a fault touched what it took: it is vacuous when it took none.
    public var messagesMatched: Int?
    public var messagesTaken: Int?

    /// One line of the summary table.
    var summaryLine: String {
        let name = "faults[\(fault)] \(action) \(target.isEmpty ? "" : target + " ")at \(at)"
        guard played else { return "\(name): not played (\(note ?? "")) — vacuous" }
        let when = String(format: "played %.2f s", playedAt ?? 0)
        guard measured else { return "\(name), \(when): not measured (\(note ?? ""))" }
        if let taken = messagesTaken {
            let took =
                "took \(taken) of \(messagesMatched ?? 0) matching message\((messagesMatched ?? 0) == 1 ? "" : "s")"
            return "\(name), \(when): \(took)\(taken == 0 ? " — vacuous" : "")"
        }
        guard let touched, touched > 0 else { return "\(name), \(when): no question in flight — vacuous" }
        let states = State.allCases.compactMap { state -> String? in
            guard let count = flows?[state.rawValue], count > 0 else { return nil }
            return "\(state.rawValue) \(count)"
        }
        return
            "\(name), \(when): \(touched) question\(touched == 1 ? "" : "s") in flight (\(states.joined(separator: ", ")))"
    }
}

extension FaultCoverage {
    enum CodingKeys: String, CodingKey {
        case fault, at, target, action, played, playedAt, time, serves, measured, flows, touched, vacuous, note
        case messagesMatched, messagesTaken
    }

    /// `time` to the microsecond (``RecordJSON``, as the records it is compared with): the report's ISO 8601 dates
    /// keep whole seconds only.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        fault = try c.decode(Int.self, forKey: .fault)
        at = try c.decode(String.self, forKey: .at)
        target = try c.decode(String.self, forKey: .target)
        action = try c.decode(String.self, forKey: .action)
        played = try c.decode(Bool.self, forKey: .played)
        playedAt = try c.decodeIfPresent(Double.self, forKey: .playedAt)
        if let text = try c.decodeIfPresent(String.self, forKey: .time) {
            guard let date = RecordJSON.parse(text) else {
                throw DecodingError.dataCorruptedError(forKey: .time, in: c, debugDescription: "not a date: \(text)")
            }
            time = date
        }
        serves = try c.decodeIfPresent(String.self, forKey: .serves)
        measured = try c.decode(Bool.self, forKey: .measured)
        flows = try c.decodeIfPresent([String: Int].self, forKey: .flows)
        touched = try c.decodeIfPresent(Int.self, forKey: .touched)
        vacuous = try c.decode(Bool.self, forKey: .vacuous)
        note = try c.decodeIfPresent(String.self, forKey: .note)
        messagesMatched = try c.decodeIfPresent(Int.self, forKey: .messagesMatched)
        messagesTaken = try c.decodeIfPresent(Int.self, forKey: .messagesTaken)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(fault, forKey: .fault)
        try c.encode(at, forKey: .at)
        try c.encode(target, forKey: .target)
        try c.encode(action, forKey: .action)
        try c.encode(played, forKey: .played)
        try c.encodeIfPresent(playedAt, forKey: .playedAt)
        try c.encodeIfPresent(time.flatMap(RecordJSON.format), forKey: .time)
        try c.encodeIfPresent(serves, forKey: .serves)
        try c.encode(measured, forKey: .measured)
        try c.encodeIfPresent(flows, forKey: .flows)
        try c.encodeIfPresent(touched, forKey: .touched)
        try c.encode(vacuous, forKey: .vacuous)
        try c.encodeIfPresent(note, forKey: .note)
        try c.encodeIfPresent(messagesMatched, forKey: .messagesMatched)
        try c.encodeIfPresent(messagesTaken, forKey: .messagesTaken)
    }

    /// The coverage of every fault of the schedule, played or not, in the schedule's order.
    /// - Parameters:
    ///   - plays: what ``FaultRunner`` played (and skipped).
    ///   - playStart: the wall-clock moment the children started (a fault's `playedAt` counts from it).
    ///   - brokers: the shards of a sharded run (`nil`: one broker).
    ///   - ledger: every shard's journal questions; `nil` when there is none (`durability: off`, `--broker`).
    public static func measure(
        plays: [FaultPlay],
        playStart: Date,
        scenario: Scenario,
        brokers: BrokerList?,
        childRecords: [ChildFlowRecord],
        guardianRecords: [GuardianAnswerRecord],
        ledger: [QuestionRecord]?
    ) -> [FaultCoverage] {
        recount(
            entries(plays: plays, playStart: playStart),
            scenario: scenario,
            brokers: brokers,
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            ledger: ledger
        )
    }

    /// Every fault as it played, uncounted (what run-facts.json keeps for ``recount(_:scenario:brokers:childRecords:guardianRecords:ledger:)``).
    public static func entries(plays: [FaultPlay], playStart: Date) -> [FaultCoverage] {
        plays.sorted { $0.index < $1.index }.map { play in
            let fault = play.fault
            return FaultCoverage(
                fault: play.index,
                at: fault.at.text,
                target: fault.action == .run ? (fault.command ?? []).joined(separator: " ") : fault.process,
                action: fault.action.rawValue,
                played: play.playedAt != nil,
                playedAt: play.playedAt?.seconds,
                time: play.playedAt.map { playStart.addingTimeInterval($0.seconds) },
                measured: false,
                vacuous: false,
                note: play.skipped,
                messagesMatched: play.messages?.matched,
                messagesTaken: play.messages?.taken
            )
        }
    }

    /// Counts again what each entry's fault touched, from its `target`, `action` and `time` and the run's records:
    /// what ``measure(plays:playStart:scenario:brokers:childRecords:guardianRecords:ledger:)`` does after the run,
    /// and what a later reading of the run folder (report.json's `coverage`, records, journal) can repeat.
    public static func recount(
        _ entries: [FaultCoverage],
        scenario: Scenario,
        brokers: BrokerList?,
        childRecords: [ChildFlowRecord],
        guardianRecords: [GuardianAnswerRecord],
        ledger: [QuestionRecord]?,
        brokerChanges: [BrokerListChange] = []
    ) -> [FaultCoverage] {
        let flights = Flight.all(childRecords: childRecords, guardianRecords: guardianRecords, ledger: ledger)
        return entries.map { entry in
            var entry = entry
            entry.serves = nil
            entry.flows = nil
            entry.touched = nil
            entry.measured = false
            guard entry.played, let time = entry.time else {
                entry.vacuous = true
                return entry
            }
            if let taken = entry.messagesTaken {
                // A message fault touched the messages it took, as its links counted them.
                entry.measured = true
                entry.serves = "the messages on its links"
                entry.touched = taken
                entry.vacuous = taken == 0
                return entry
            }
            guard entry.action != Scenario.Fault.Action.run.rawValue else {
                entry.vacuous = false
                entry.note = "a command: the scenario does not say which processes it affects"
                return entry
            }
            let fault = scenario.faults.indices.contains(entry.fault) ? scenario.faults[entry.fault] : nil
            // A broker change touches the flows of the families it moved, while it moved them.
            let change = brokerChanges.first { $0.action == entry.action && $0.broker == entry.target }
            let moved = Set(change?.moves.map(\.family) ?? [])
            guard
                var scope = fault?.action.changesBrokers == true
                    ? Scope(description: "the flows of the families it moved", serves: { moved.contains($0.family) })
                    : Scope(process: entry.target, scenario: scenario, brokers: brokers) ?? Scope(group: entry.target)
            else {
                entry.vacuous = false
                entry.note = "'\(entry.target)' is not a process whose flows are known"
                return entry
            }
            if let shard = fault?.shard, let brokers, fault?.action.isLink == true {
                // A link to one shard carries only the questions of that shard's families.
                let whole = scope
                scope = Scope(description: "\(whole.description), of shard \(shard)") {
                    whole.serves($0) && brokers.shard(family: $0.family).name == shard
                }
            }
            var counts = Dictionary(uniqueKeysWithValues: State.allCases.map { ($0.rawValue, 0) })
            // A lasting link fault touches every question in flight while it lasts, in the stage it was in when
            // the fault first reached it; any other fault what was in flight at the moment it played.
            var lasting = fault?.action.lasts ?? false
            var until = lasting ? fault?.healAfter.map { time.addingTimeInterval($0.seconds) } ?? .distantFuture : time
            if let change {
                lasting = true
                until = time.addingTimeInterval(Double(change.tookMs) / 1000)
            }
            for flight in flights where scope.serves(flight) {
                let at = lasting ? max(time, flight.start) : time
                guard at <= until, let state = flight.state(at: at) else { continue }
                counts[state.rawValue, default: 0] += 1
            }
            let touched = counts.values.reduce(0, +)
            entry.measured = true
            entry.serves = scope.description
            entry.flows = counts
            entry.touched = touched
            entry.vacuous = touched == 0
            entry.note =
                ledger == nil
                ? "no broker ledger (durability off, or --broker): a question whose child record was lost is not counted"
                : nil
            return entry
        }
    }
}

/// Which flows a process serves.
struct Scope {
    var description: String
    var serves: (Flight) -> Bool

    init(description: String, serves: @escaping (Flight) -> Bool) {
        self.description = description
        self.serves = serves
    }

    /// A group of worker processes a link fault may name: each serves every family, so together they serve every
    /// question. `nil` for any other name.
    init?(group: String) {
        guard Scenario.Fault.linkGroups.contains(group) else { return nil }
        description = "every question (\(group == "workers" ? "every worker process" : "all \(group)"))"
        serves = { _ in true }
    }

    /// `nil` for a name that is no process of the run's plan.
    init?(process: String, scenario: Scenario, brokers: BrokerList?) {
        let parts = process.split(separator: "-", maxSplits: 1).map(String.init)
        if brokers == nil, process == "broker" || process == "limits" {
            description = "every question (the only \(process == "broker" ? "broker" : "limits worker"))"
            serves = { _ in true }
            return
        }
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case "broker", "limits":
            guard let brokers, brokers.entries.contains(where: { $0.name == parts[1] }) else { return nil }
            let shard = parts[1]
            let families = Set(
                (1...scenario.families).map { "f\($0)" }.filter { brokers.shard(family: $0).name == shard }
            )
            description = "the questions of shard \(shard)'s \(families.count) families"
            serves = { families.contains($0.family) }
        case "child":
            guard let index = Int(parts[1]), (1...scenario.childProcesses).contains(index) else { return nil }
            let prefix = WorkerPlan.childPrefix(index)
            description = "the questions of its children (\(prefix)*)"
            serves = { $0.child.hasPrefix(prefix) }
        case "parent":
            guard let index = Int(parts[1]), (1...scenario.parentProcesses).contains(index) else { return nil }
            let plan = WorkerPlan(scenario: scenario, brokerEndpoint: "", runDirectory: "")
            let families = Set(plan.roster(index).map(\.family))
            description = "the questions of the \(families.count) families its guardians belong to"
            serves = { families.contains($0.family) }
        default:
            return nil
        }
    }
}

/// One question's life, as the records show it: from `start` to `end`, in the stages that began at their dates.
struct Flight {
    var child: String
    var family: String
    var start: Date
    var end: Date
    /// Stages in time order: each from its date to the next one's (the last to `end`).
    var stages: [(from: Date, state: FaultCoverage.State)]

    /// Its stage at `time`; `nil` when it was not in flight (`start ≤ time < end`).
    func state(at time: Date) -> FaultCoverage.State? {
        guard start <= time, time < end else { return nil }
        return stages.last { $0.from <= time }?.state
    }

    /// Every question asked: one per child record with a question and an `askedAt`, and, with a ledger, one per
    /// ledger question no child record has (its child process ended with it).
    static func all(
        childRecords: [ChildFlowRecord],
        guardianRecords: [GuardianAnswerRecord],
        ledger: [QuestionRecord]?
    ) -> [Flight] {
        var answered: [UUID: Date] = [:]
        for answer in guardianRecords where answer.result == "accepted" {
            answered[answer.question] = min(answered[answer.question] ?? answer.answeredAt, answer.answeredAt)
        }
        for question in ledger ?? [] where question.state == .answered {
            guard let closedAt = question.closedAt else { continue }
            let id = question.id.uuid
            answered[id] = min(answered[id] ?? closedAt, closedAt)
        }
        // A response reaching a finished flow gives a second record of its question: the first asked counts.
        var byQuestion: [UUID: ChildFlowRecord] = [:]
        for record in childRecords {
            guard let id = record.question, let askedAt = record.askedAt else { continue }
            if let seen = byQuestion[id], let seenAsked = seen.askedAt, seenAsked <= askedAt { continue }
            byQuestion[id] = record
        }
        var flights: [Flight] = []
        for (id, record) in byQuestion {
            guard let askedAt = record.askedAt else { continue }
            var stages: [(from: Date, state: FaultCoverage.State)] = [(askedAt, .asking)]
            if let presentedAt = record.presentedAt { stages.append((presentedAt, .presented)) }
            if let sentAt = record.sentAt {
                stages.append((sentAt, .sent))
                if let answer = answered[id], answer >= sentAt { stages.append((answer, .answered)) }
            }
            flights.append(
                Flight(child: record.child, family: record.family, start: askedAt, end: record.closedAt, stages: stages)
            )
        }
        for question in ledger ?? [] where byQuestion[question.id.uuid] == nil {
            flights.append(
                Flight(
                    child: question.child,
                    family: question.family,
                    start: question.createdAt,
                    end: question.closedAt ?? question.expiresAt,
                    stages: [(question.createdAt, .unrecorded)]
                )
            )
        }
        return flights
    }
}

extension SimulationReport {
    /// The faults that touched nothing (played on no question in flight, or not played).
    public var vacuousFaults: [FaultCoverage] { (coverage ?? []).filter(\.vacuous) }

    /// The one line `--require-coverage` fails a run with; `nil` when no fault is vacuous.
    public var coverageFailure: String? {
        let vacuous = vacuousFaults
        guard !vacuous.isEmpty else { return nil }
        let names = vacuous.map { entry in
            "faults[\(entry.fault)] (\(entry.action)\(entry.target.isEmpty ? "" : " " + entry.target) at \(entry.at)"
                + (entry.played ? ")" : ", not played)")
        }
        return "\(vacuous.count) vacuous fault\(vacuous.count == 1 ? "" : "s"), touching no question in flight: "
            + names.joined(separator: ", ")
    }
}

extension SimulationReport {
    /// `--require-coverage`'s exit when no invariant was violated but a fault was vacuous.
    public static let coverageFailure: Int32 = 2

    /// The run's exit, for `askrelay simulate` and `askrelay check` alike: 1 for a violated invariant; else 3 for
    /// more unknown flows than `maxUnknown`; else 2 (``coverageFailure``) for a situation of the scenario's
    /// `expect.reached` never reached or, with `requireCoverage`, a vacuous fault; else 0.
    public func exitCode(maxUnknown: Int?, requireCoverage: Bool) -> Int32 {
        let verdict = exitCode(maxUnknown: maxUnknown)
        guard verdict == 0 else { return verdict }
        if expectationFailure != nil || (requireCoverage && coverageFailure != nil) { return Self.coverageFailure }
        return verdict
    }

    /// The one line on stderr that says why ``exitCode(maxUnknown:requireCoverage:)`` is 3 or 2; `nil` otherwise
    /// (a violation is in the summary itself).
    public func exitReason(maxUnknown: Int?, requireCoverage: Bool) -> String? {
        switch exitCode(maxUnknown: maxUnknown, requireCoverage: requireCoverage) {
        case ExitCode.unknownVerdict:
            "\(invariants.unknownCount) flow(s) ended unknown, more than --max-unknown \(maxUnknown ?? 0) allows "
                + "(exit 3; docs/simulation.md, \"Verdicts\")"
        case Self.coverageFailure:
            [expectationFailure, requireCoverage ? coverageFailure.map { "--require-coverage: \($0)" } : nil]
                .compactMap { $0 }.joined(separator: "; ")
        default: nil
        }
    }
}
