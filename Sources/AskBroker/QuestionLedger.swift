import AskProtocol
import Foundation

/// One question the ledger follows: only what its rules read, packed (32 bytes, no heap storage of its own).
///
/// The question itself (its JSON, choices and handles) is not here: with a journal it is read back from the
/// journal's question table when a body needs it (the guardians' `question` at send, the child's `response` and
/// the `approval` notice at answer); without one the ledger keeps the JSON of open questions beside the entries.
struct LedgerEntry: Sendable, Hashable {
    /// When the pending state ends: the earlier of the question's expiry and the end of the pending window.
    var expiresAt: Date
    /// The child's id (`<id>` of `child/<id>`), as a ``NamePool`` number.
    let child: UInt32
    /// The child's family, as a ``NamePool`` number.
    let family: UInt32
    /// The limits address the ask was routed to (only that worker may admit or refuse it), as a ``NamePool``
    /// number; ``NamePool/none`` when any limits worker may (after a restart, or while the ask waits at `limits`).
    var admitter: UInt32
    var state: QuestionState
    /// The question's row in the journal's question table (0 without a journal): the journal reads and updates the
    /// question by it, having no index on the random question id (schema 6).
    var seq: Int64 = 0
}

/// Strings the ledger refers to many times (child and family ids, limits addresses), each stored once and named
/// by a number, so a million entries of a hundred thousand children hold a hundred thousand strings, not a million.
struct NamePool {
    /// The number that stands for no name.
    static let none: UInt32 = 0
    private var numbers: [String: UInt32] = [:]
    private var names: [String] = [""]

    /// The number of `name`, adding it if it is new.
    mutating func number(_ name: String) -> UInt32 {
        if let number = numbers[name] { return number }
        let number = UInt32(names.count)
        names.append(name)
        numbers[name] = number
        return number
    }

    /// The number of `name` if it has one.
    func existingNumber(_ name: String) -> UInt32? { numbers[name] }

    subscript(number: UInt32) -> String { names[Int(number)] }

    var count: Int { names.count - 1 }
}

/// The question ledger: every question's state (docs/protocol.md, "Question lifecycle"), family rosters, deadlines.
///
/// It decides; the broker routes. Every transition is journaled by the broker in the same turn.
struct QuestionLedger {
    /// Kinds the broker must read even when they are addressed to a worker. Arrays, not sets: the hot path scans a
    /// few short strings instead of hashing each message's kind.
    static let watchedKinds: [String] = [
        MessageKind.ask.rawValue, MessageKind.askResult.rawValue, MessageKind.limitsAdmin.rawValue,
    ]
    /// Kinds only the broker may send.
    static let brokerOnlyKinds: [String] = [
        MessageKind.question.rawValue, MessageKind.response.rawValue, MessageKind.closed.rawValue,
        MessageKind.approval.rawValue, MessageKind.limitsRead.rawValue, MessageKind.limitsWrite.rawValue,
    ]

    let configuration: BrokerConfiguration
    private(set) var entries: [MessageID: LedgerEntry] = [:]
    var rosters: [String: Set<String>] = [:]
    var names = NamePool()
    /// Without a journal only: the question JSON of each open question (dropped when it closes).
    private(set) var questions: [MessageID: [UInt8]] = [:]
    private var deadlines = DeadlineHeap<Date, MessageID>()
    /// Entries per state, by ``QuestionState/ordinal``, kept as entries change so a statistics snapshot does not
    /// walk every entry.
    private var stateCounts = [Int](repeating: 0, count: QuestionState.allCases.count)
    /// Closed questions in the order they closed, with when, from `closedHead` on: forgotten after the retention.
    private var closedOrder: [(at: Date, id: MessageID)] = []
    private var closedHead = 0
    /// Closed questions forgotten so far (``forgetClosed(before:)``).
    private(set) var forgotten = 0
    /// Questions sent while their family's roster was empty, by family number: every guardian that joins the roster
    /// while one is still `sent` gets it (``questionsAwaitingGuardians(family:)``). Rare, so a list per family;
    /// closed ones are dropped when the family is next looked at.
    private var awaitingGuardians: [UInt32: [MessageID]] = [:]

    init(configuration: BrokerConfiguration) { self.configuration = configuration }

    /// Makes room for `count` entries (a restart knows how many questions it will read).
    mutating func reserveCapacity(_ count: Int) { entries.reserveCapacity(count) }

    /// Adds a guardian to a family's roster. - Returns: whether it is new.
    mutating func addGuardian(family: String, guardian: String) -> Bool {
        rosters[family, default: []].insert(guardian).inserted
    }

    /// Takes a guardian out of a roster again (its addition was rolled back with a failed turn).
    mutating func removeGuardian(family: String, guardian: String) {
        rosters[family]?.remove(guardian)
        if rosters[family]?.isEmpty == true { rosters[family] = nil }
    }

    /// Notes a question sent while its family had no guardian, for the guardians that join later.
    mutating func awaitGuardians(_ id: MessageID, family: UInt32) { awaitingGuardians[family, default: []].append(id) }

    /// The questions of `family` sent while it had no guardian that are still `sent`, in the order they were sent.
    mutating func questionsAwaitingGuardians(family: String) -> [MessageID] {
        guard !awaitingGuardians.isEmpty, let number = names.existingNumber(family),
            let waiting = awaitingGuardians[number]
        else { return [] }
        let open = waiting.filter { entries[$0]?.state == .sent }
        awaitingGuardians[number] = open.isEmpty ? nil : open
        return open
    }

    func child(of entry: LedgerEntry) -> String { names[entry.child] }
    func family(of entry: LedgerEntry) -> String { names[entry.family] }
    func roster(of entry: LedgerEntry) -> Set<String> { rosters[names[entry.family]] ?? [] }

    /// Restores every question of the journal's question table (restart): open ones are followed again (their
    /// admitter is not known any more), closed ones are remembered in the order they closed, to be forgotten in
    /// that order.
    /// - Returns: how many open and closed questions were restored.
    mutating func restore(from journal: Journal) throws -> (open: Int, closed: Int) {
        var closed: [(at: Date, id: MessageID, entry: LedgerEntry)] = []
        // The open questions' deadlines, made a heap once at the end.
        var due: [(at: Date, payload: MessageID)] = []
        due.reserveCapacity(entries.capacity - entries.count)
        try journal.forEachLedgerQuestion { question in
            let entry = LedgerEntry(
                expiresAt: question.expiresAt,
                child: names.number(question.child),
                family: names.number(question.family),
                admitter: NamePool.none,
                state: question.state,
                seq: question.seq
            )
            if question.closedAt != nil || entry.state.isClosed {
                closed.append((question.closedAt ?? question.createdAt, question.id, entry))
            } else {
                set(question.id, entry)
                due.append((entry.expiresAt, question.id))
                if entry.state == .sent, rosters[question.family]?.isEmpty ?? true {
                    awaitGuardians(question.id, family: entry.family)
                }
            }
        }
        deadlines.push(contentsOf: due)
        closed.sort { $0.at < $1.at }
        for question in closed {
            if question.entry.state.isClosed {
                set(question.id, question.entry, closedAt: question.at)
            } else {
                track(question.id, question.entry)
            }
        }
        return (due.count, closed.count)
    }

    /// Follows a question that came with its family from another broker (docs/scaling.md, "Rebalancing"), as a
    /// restart follows a question of the journal: open ones again (any limits worker may admit them), closed ones
    /// until the retention ends.
    mutating func adopt(_ question: LedgerQuestion) {
        let entry = LedgerEntry(
            expiresAt: question.expiresAt,
            child: names.number(question.child),
            family: names.number(question.family),
            admitter: NamePool.none,
            state: question.state,
            seq: question.seq
        )
        if entry.state.isClosed {
            set(question.id, entry, closedAt: question.closedAt ?? question.createdAt)
        } else {
            track(question.id, entry)
            if entry.state == .sent, rosters[question.family]?.isEmpty ?? true {
                awaitGuardians(question.id, family: entry.family)
            }
        }
    }

    /// Starts following a new question; `question` is its JSON, kept only when there is no journal to read it from.
    mutating func track(_ id: MessageID, _ entry: LedgerEntry, question: [UInt8]? = nil) {
        set(id, entry)
        if let question, !entry.state.isClosed { questions[id] = question }
        if !entry.state.isClosed { deadlines.push(entry.expiresAt, id) }
    }

    /// Records a transition of a followed question.
    mutating func update(_ id: MessageID, _ entry: LedgerEntry) {
        set(id, entry)
        if entry.state.isClosed, !questions.isEmpty { questions.removeValue(forKey: id) }
    }

    /// Forgets a question whose ask a failed turn withdrew.
    mutating func remove(_ id: MessageID) {
        if let old = entries.removeValue(forKey: id) { stateCounts[old.state.ordinal] -= 1 }
        questions.removeValue(forKey: id)
    }

    /// - Parameter closedAt: when a question that closes now closed (default: now).
    private mutating func set(_ id: MessageID, _ entry: LedgerEntry, closedAt: Date? = nil) {
        let old = entries.updateValue(entry, forKey: id)
        if let old { stateCounts[old.state.ordinal] -= 1 }
        stateCounts[entry.state.ordinal] += 1
        if entry.state.isClosed && old?.state.isClosed != true {
            closedOrder.append((closedAt ?? configuration.clock.now, id))
        }
    }

    /// Forgets the questions that closed before `horizon`: their entries leave memory (the broker deletes their
    /// journal rows by the same horizon). - Returns: how many were forgotten.
    mutating func forgetClosed(before horizon: Date) -> Int {
        var count = 0
        while closedHead < closedOrder.count, closedOrder[closedHead].at < horizon {
            let id = closedOrder[closedHead].id
            closedHead += 1
            // A turn that failed may have put the entry back open; it is listed again when it closes again.
            guard let entry = entries[id], entry.state.isClosed else { continue }
            entries.removeValue(forKey: id)
            stateCounts[entry.state.ordinal] -= 1
            count += 1
        }
        if closedHead > 4096 && closedHead * 2 > closedOrder.count {
            closedOrder.removeFirst(closedHead)
            closedHead = 0
        }
        forgotten += count
        return count
    }

    /// Puts back an entry a failed turn had changed; its deadline comes again no sooner than `notBefore`, so an
    /// expiry that cannot be written (disk full) is retried without spinning.
    mutating func putBack(_ id: MessageID, _ entry: LedgerEntry, notBefore: Date) {
        set(id, entry)
        if !entry.state.isClosed { deadlines.push(max(entry.expiresAt, notBefore), id) }
    }

    /// The question JSON kept in memory (no journal), if the question is open.
    func questionInMemory(_ id: MessageID) -> [UInt8]? { questions[id] }

    var nextDeadline: Date? {
        mutating get {
            while let top = deadlines.peek {
                if let entry = entries[top.payload], !entry.state.isClosed, top.at >= entry.expiresAt { return top.at }
                deadlines.pop()
            }
            return nil
        }
    }

    /// Open questions whose deadline has passed, removed from the deadline heap.
    mutating func due(now: Date) -> [MessageID] {
        var due: [MessageID] = []
        while let top = deadlines.peek, top.at <= now {
            deadlines.pop()
            if let entry = entries[top.payload], !entry.state.isClosed, entry.expiresAt <= now {
                due.append(top.payload)
            }
        }
        return due
    }

    func countsByState() -> [String: Int] {
        var counts: [String: Int] = [:]
        for state in QuestionState.allCases where stateCounts[state.ordinal] > 0 {
            counts[state.rawValue] = stateCounts[state.ordinal]
        }
        return counts
    }

    /// The refusal for acting on a question in `state` when the action needs another state.
    static func refusal(for state: QuestionState, wanted: String) -> WireError {
        switch state {
        case .admitting where wanted != "answer":
            WireError(.notPresented, "the question is still being admitted; cannot \(wanted)")
        case .admitting, .presented:
            WireError(.notSent, "the question has not been sent (state \(state.rawValue)); cannot \(wanted)")
        case .refused: WireError(.notPresented, "the question was refused at admission; cannot \(wanted)")
        case .sent: WireError(.alreadySent, "the question was already sent; cannot \(wanted)")
        case .answered: WireError(.alreadyClosed, "the question was already answered; cannot \(wanted)")
        case .expired, .abandoned: WireError(.expired, "the question expired; cannot \(wanted)")
        case .cancelled: WireError(.cancelled, "the question was cancelled; cannot \(wanted)")
        }
    }
}

extension QuestionState {
    /// The position in `allCases`, for per-state counters.
    var ordinal: Int {
        switch self {
        case .admitting: 0
        case .presented: 1
        case .refused: 2
        case .sent: 3
        case .answered: 4
        case .expired: 5
        case .cancelled: 6
        case .abandoned: 7
        }
    }
}
