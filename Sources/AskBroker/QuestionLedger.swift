import AskProtocol
import Foundation

/// One question the ledger follows: only what its rules read, packed (24 bytes, no heap storage of its own).
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

    subscript(number: UInt32) -> String { names[Int(number)] }

    var count: Int { names.count - 1 }
}

/// The question ledger: every question's state (docs/protocol.md, "Question lifecycle"), family rosters, deadlines.
///
/// It decides; the broker routes. Every transition is journaled by the broker in the same turn.
struct QuestionLedger {
    /// Kinds the broker must read even when they are addressed to a worker. Arrays, not sets: the hot path scans a
    /// few short strings instead of hashing each message's kind.
    static let watchedKinds: [String] = [MessageKind.ask.rawValue, MessageKind.askResult.rawValue, MessageKind.limitsAdmin.rawValue]
    /// Kinds only the broker may send.
    static let brokerOnlyKinds: [String] = [
        MessageKind.question.rawValue, MessageKind.response.rawValue, MessageKind.closed.rawValue,
        MessageKind.approval.rawValue,
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

    init(configuration: BrokerConfiguration) { self.configuration = configuration }

    /// Adds a guardian to a family's roster. - Returns: whether it is new.
    mutating func addGuardian(family: String, guardian: String) -> Bool {
        rosters[family, default: []].insert(guardian).inserted
    }

    /// Takes a guardian out of a roster again (its addition was rolled back with a failed turn).
    mutating func removeGuardian(family: String, guardian: String) {
        rosters[family]?.remove(guardian)
        if rosters[family]?.isEmpty == true { rosters[family] = nil }
    }

    func child(of entry: LedgerEntry) -> String { names[entry.child] }
    func family(of entry: LedgerEntry) -> String { names[entry.family] }
    func roster(of entry: LedgerEntry) -> Set<String> { rosters[names[entry.family]] ?? [] }

    /// A question found in the journal at restart (its admitter is not known any more). Closed ones must come in
    /// the order they closed (see ``QuestionLedger/recoverLedger()``), to be forgotten in that order.
    mutating func restore(_ stored: LedgerQuestion) {
        let entry = LedgerEntry(
            expiresAt: stored.expiresAt, child: names.number(stored.child), family: names.number(stored.family),
            admitter: NamePool.none, state: stored.state)
        if entry.state.isClosed {
            set(stored.id, entry, closedAt: stored.closedAt ?? stored.createdAt)
        } else {
            track(stored.id, entry)
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
        if entry.state.isClosed && old?.state.isClosed != true { closedOrder.append((closedAt ?? Date(), id)) }
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
            if let entry = entries[top.payload], !entry.state.isClosed, entry.expiresAt <= now { due.append(top.payload) }
        }
        return due
    }

    func countsByState() -> [String: Int] {
        var counts: [String: Int] = [:]
        for state in QuestionState.allCases where stateCounts[state.ordinal] > 0 { counts[state.rawValue] = stateCounts[state.ordinal] }
        return counts
    }

    /// The refusal for acting on a question in `state` when the action needs another state.
    static func refusal(for state: QuestionState, wanted: String) -> WireError {
        switch state {
        case .admitting where wanted != "answer": WireError(.notPresented, "the question is still being admitted; cannot \(wanted)")
        case .admitting, .presented: WireError(.notSent, "the question has not been sent (state \(state.rawValue)); cannot \(wanted)")
        case .refused: WireError(.notPresented, "the question was refused at admission; cannot \(wanted)")
        case .sent: WireError(.alreadySent, "the question was already sent; cannot \(wanted)")
        case .answered: WireError(.alreadyClosed, "the question was already answered; cannot \(wanted)")
        case .expired, .abandoned: WireError(.expired, "the question expired; cannot \(wanted)")
        case .cancelled: WireError(.cancelled, "the question was cancelled; cannot \(wanted)")
        }
    }
}

// MARK: - The broker's side of the flow

extension Broker {
    /// Handles a SEND the ledger must read: `ask`, `ask.result`, and everything addressed to `broker`.
    func ledgerSend(session: Session, parsed: ParsedFrames, id: MessageID, from: String, to: String, kind: String) throws(WireError) {
        let body = Array(input[parsed.bodyFrame])
        let now = Date()
        switch (to, kind) {
        case (_, MessageKind.ask.rawValue):
            try handleAsk(session: session, from: from, to: to, id: id, subject: parsed.subject, body: body, now: now)
        case (_, MessageKind.askResult.rawValue):
            try handleAskResult(session: session, from: from, to: to, id: id, subject: parsed.subject, body: body, now: now)
        case (_, MessageKind.limitsAdmin.rawValue):
            // Admin changes go to the limits worker that serves the child, not the one the sender hashes to.
            guard session.role == .observer else { throw WireError(.forbidden, "only an observer may change limits state") }
            let change = try decodeBody(LimitsAdminChange.self, body)
            guard to == "limits" || to.hasPrefix("limits/") else { throw WireError(.badAddress, "limits.admin goes to 'limits'") }
            try route(id: id, from: from, to: to, kind: kind, subject: parsed.subject, body: body, limitsKey: "child/\(change.child)")
        case ("broker", MessageKind.send.rawValue):
            let request = try decodeBody(SendQuestion.self, body)
            try Self.checkSubject(parsed.subject, request.questionID)
            try handleSendQuestion(session: session, from: from, questionID: MessageID(uuid: request.questionID), now: now)
        case ("broker", MessageKind.cancel.rawValue):
            let request = try decodeBody(CancelQuestion.self, body)
            try Self.checkSubject(parsed.subject, request.questionID)
            try handleCancel(session: session, from: from, questionID: MessageID(uuid: request.questionID), now: now)
        case ("broker", MessageKind.answer.rawValue):
            let answer = try decodeBody(GuardianAnswer.self, body)
            try Self.checkSubject(parsed.subject, answer.questionID)
            try handleAnswer(session: session, from: from, answer: answer, now: now)
        default:
            throw WireError(.unknownKind, "the broker handles send, cancel and answer; got '\(kind)'")
        }
    }

    /// Every kind about a question carries the question's id as its subject (docs/protocol.md §5.4): a missing or
    /// different subject is refused, so what the header says and what the ledger does cannot disagree.
    static func checkSubject(_ subject: MessageID?, _ questionID: UUID) throws(WireError) {
        guard let subject else {
            throw WireError(.badSubject, "the header has no subject; it must be the question id \(questionID)")
        }
        guard subject == MessageID(uuid: questionID) else {
            throw WireError(.badSubject, "the subject \(subject.uuid) is not the question id \(questionID)")
        }
    }

    func decodeBody<T: AppMessage>(_ type: T.Type, _ body: [UInt8]) throws(WireError) -> T {
        do {
            return try AppMessageRegistry.decode(T.self, from: body)
        } catch {
            switch error {
            case .invalidUTF8: throw WireError(.invalidUTF8, "the \(T.messageKind.rawValue) body is not valid UTF-8")
            case .invalidJSON(let why): throw WireError(.invalidJSON, "the \(T.messageKind.rawValue) body is not valid: \(why)")
            case .unknownKind(let kind): throw WireError(.unknownKind, "unknown kind '\(kind)'")
            }
        }
    }

    /// Notes how a ledger entry was before this turn first changed it, for ``withdrawTurn(_:)``.
    func noteLedgerUndo(_ id: MessageID) {
        if turnLedgerUndo.index(forKey: id) == nil { turnLedgerUndo[id] = .some(ledger.entries[id]) }
    }

    /// Journals a new question (its full record, question JSON included).
    func journalNewQuestion(_ record: QuestionRecord) throws(WireError) {
        noteLedgerUndo(record.id)
        guard journal.durability != .off else { return }
        do { try journal.saveQuestion(record) } catch {
            throw WireError(.storageFailed, "the journal refused the question: \(error)")
        }
    }

    /// Journals a transition to `entry.state` (an UPDATE of the state columns; the question JSON stays).
    func journalTransition(_ id: MessageID, _ entry: LedgerEntry, answeredBy: String? = nil, answerChoiceID: String? = nil, closedAt: Date? = nil) throws(WireError) {
        noteLedgerUndo(id)
        guard journal.durability != .off else { return }
        do {
            try journal.updateQuestion(id: id, state: entry.state, answeredBy: answeredBy, answerChoiceID: answerChoiceID, closedAt: closedAt)
        } catch {
            throw WireError(.storageFailed, "the journal refused the question: \(error)")
        }
    }

    /// The question JSON of a followed question: from memory without a journal, else one SELECT by id.
    func questionJSON(_ id: MessageID) throws(WireError) -> [UInt8] {
        if let bytes = ledger.questionInMemory(id) { return bytes }
        let stored: [UInt8]?
        do { stored = try journal.questionJSON(id: id) } catch {
            throw WireError(.storageFailed, "the journal could not read question \(id.uuid): \(error)")
        }
        guard let stored else { throw WireError(.storageFailed, "question \(id.uuid) is not in the journal") }
        return stored
    }

    /// `ask`, child → limits: record the question (admitting) and pass it to the child's limits worker.
    func handleAsk(session: Session, from: String, to: String, id: MessageID, subject: MessageID?, body: [UInt8], now: Date) throws(WireError) {
        guard session.role == .child, from.hasPrefix("child/"), let family = session.addresses[from] ?? nil else {
            throw WireError(.forbidden, "only a child may ask")
        }
        guard to == "limits" else { throw WireError(.badAddress, "an ask goes to 'limits', not '\(to)'") }
        let request = try decodeBody(AskRequest.self, body)
        let question = request.question
        let questionID = MessageID(uuid: question.id)
        try Self.checkSubject(subject, question.id)
        guard ledger.entries[questionID] == nil else {
            throw WireError(.duplicateQuestion, "question \(question.id) was already asked")
        }
        if let reason = question.firstViolation(now: now) { throw WireError.invalidQuestion(reason) }
        let window = configuration.scaledPendingWindow
        let pendingEnd = now.addingTimeInterval(window.seconds)
        let expiresAt = min(question.expirationDate ?? pendingEnd, pendingEnd)
        let encoded: [UInt8]
        do { encoded = try WireJSON.encode(question) } catch {
            // Unreachable for a decoded question; still the documented JSON reason, never free text.
            let reason = InvalidQuestionReason(field: "question", code: "unencodable", message: "\(error)")
            throw WireError.invalidQuestion(reason)
        }
        let child = String(from.dropFirst("child/".count))
        // Route first: a busy limits queue refuses the ask before anything about the question is written.
        try route(id: id, from: from, to: "limits", kind: MessageKind.ask.rawValue, subject: questionID, body: body)
        if journal.durability != .off {
            try journalNewQuestion(QuestionRecord(
                id: questionID, child: child, family: family, state: .admitting,
                createdAt: now, expiresAt: expiresAt, question: encoded, choiceIDs: question.choices.map(\.id),
                approvalChoiceIDs: question.choices.filter { $0.answer == .approval }.map(\.id)))
        } else {
            noteLedgerUndo(questionID)
        }
        let admitter = limitsTarget(for: from)
        let entry = LedgerEntry(
            expiresAt: expiresAt, child: ledger.names.number(child), family: ledger.names.number(family),
            admitter: admitter == "limits" ? NamePool.none : ledger.names.number(admitter), state: .admitting)
        ledger.track(questionID, entry, question: journal.durability == .off ? encoded : nil)
    }

    /// `ask.result`, limits → child: the question is presented or refused.
    func handleAskResult(session: Session, from: String, to: String, id: MessageID, subject: MessageID?, body: [UInt8], now: Date) throws(WireError) {
        guard session.role == .limits else { throw WireError(.forbidden, "only a limits worker may admit or refuse a question") }
        let result = try decodeBody(AskResult.self, body)
        try Self.checkSubject(subject, result.questionID)
        let questionID = MessageID(uuid: result.questionID)
        guard var entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(result.questionID)")
        }
        if entry.admitter != NamePool.none {
            let admitter = ledger.names[entry.admitter]
            if session.addresses[admitter] == nil, mailboxes[admitter]?.owner?.isAlive == true {
                throw WireError(.forbidden, "question \(result.questionID) was routed to \(admitter), not to this limits worker")
            }
        }
        guard Self.isAddress(to, role: "child/", id: ledger.child(of: entry)) else {
            throw WireError(.badAddress, "the result of question \(result.questionID) goes to child/\(ledger.child(of: entry))")
        }
        guard entry.state == .admitting else {
            // Too late: the question already closed (its deadline passed during admission, and the child was told).
            // Acknowledge the result and drop it, so the child sees exactly one outcome.
            stats.countRouted("ledger.late-ask-result")
            return
        }
        // Route first: a busy child queue refuses the result before the question changes, so the retry applies.
        try route(id: id, from: from, to: to, kind: MessageKind.askResult.rawValue, subject: questionID, body: body)
        switch result.outcome {
        case .presented:
            entry.state = .presented
            try journalTransition(questionID, entry)
        case .refused:
            entry.state = .refused
            try journalTransition(questionID, entry, closedAt: now)
        }
        ledger.update(questionID, entry)
    }

    /// Whether `address` is `role` + `id` (`child/` + `c1`), without building the string.
    static func isAddress(_ address: String, role: StaticString, id: String) -> Bool {
        let prefix = UnsafeRawBufferPointer(start: role.utf8Start, count: role.utf8CodeUnitCount)
        let utf8 = address.utf8
        return utf8.count == prefix.count + id.utf8.count && utf8.starts(with: prefix)
            && utf8.dropFirst(prefix.count).elementsEqual(id.utf8)
    }

    func ownEntry(_ questionID: MessageID, from: String) throws(WireError) -> LedgerEntry {
        guard let entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(questionID.uuid)")
        }
        guard Self.isAddress(from, role: "child/", id: ledger.child(of: entry)) else {
            throw WireError(.forbidden, "question \(questionID.uuid) belongs to another child")
        }
        return entry
    }

    /// `send`, child → broker: the child sent the sheet; every guardian of the family gets the question.
    func handleSendQuestion(session: Session, from: String, questionID: MessageID, now: Date) throws(WireError) {
        var entry = try ownEntry(questionID, from: from)
        guard entry.state == .presented else { throw QuestionLedger.refusal(for: entry.state, wanted: "send") }
        guard now < entry.expiresAt else { throw WireError(.expired, "the question expired at \(entry.expiresAt)") }
        let question = try questionJSON(questionID)
        let body = try LedgerBodies.guardianQuestion(
            question: question, child: ledger.child(of: entry), family: ledger.family(of: entry), sentAt: now,
            expiresAt: entry.expiresAt)
        entry.state = .sent
        try journalTransition(questionID, entry)
        for guardian in ledger.roster(of: entry).sorted() {
            try route(id: .random(), from: "broker", to: "guardian/\(guardian)", kind: MessageKind.question.rawValue, subject: questionID, body: body, expiresAt: entry.expiresAt)
        }
        ledger.update(questionID, entry)
    }

    /// `cancel`, child → broker: the sheet was dismissed; the question never gets a response.
    func handleCancel(session: Session, from: String, questionID: MessageID, now: Date) throws(WireError) {
        var entry = try ownEntry(questionID, from: from)
        guard entry.state == .presented || entry.state == .admitting else {
            throw QuestionLedger.refusal(for: entry.state, wanted: "cancel")
        }
        entry.state = .cancelled
        try journalTransition(questionID, entry, closedAt: now)
        ledger.update(questionID, entry)
    }

    /// `answer`, guardian → broker: the first valid answer wins.
    func handleAnswer(session: Session, from: String, answer: GuardianAnswer, now: Date) throws(WireError) {
        let questionID = MessageID(uuid: answer.questionID)
        guard session.role == .guardian, from.hasPrefix("guardian/") else { throw WireError(.forbidden, "only a guardian may answer") }
        let guardian = String(from.dropFirst("guardian/".count))
        guard var entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(answer.questionID)")
        }
        let family = ledger.family(of: entry)
        guard session.addresses[from] == family, ledger.rosters[family]?.contains(guardian) == true else {
            throw WireError(.notGuardian, "\(from) is not a guardian of the question's family")
        }
        if entry.state == .sent && now >= entry.expiresAt {
            try expire(questionID, now: now)
            entry = ledger.entries[questionID]!
        }
        guard entry.state == .sent else { throw QuestionLedger.refusal(for: entry.state, wanted: "answer") }
        let json = try questionJSON(questionID)
        let question: AnyPermissionQuestion
        do { question = try WireJSON.decode(AnyPermissionQuestion.self, from: json) } catch {
            throw WireError(.storageFailed, "the stored question \(answer.questionID) does not decode: \(describeDecoding(error))")
        }
        guard let choice = question.choice(withID: answer.choiceID) else {
            throw WireError(.invalidChoice, "'\(answer.choiceID)' is not one of the question's choices")
        }
        // Every body first: one that cannot be encoded refuses the answer before anything changed.
        let childID = ledger.child(of: entry)
        let child = "child/\(childID)"
        let response = try LedgerBodies.response(question: json, choice: choice)
        let closed = try WireJSON.encodeBody(
            QuestionClosed(questionID: answer.questionID, reason: .answered, answeredBy: guardian), code: .storageFailed)
        let notice =
            choice.answer == .approval
            ? try WireJSON.encodeBody(
                ApprovalNotice(child: childID, questionID: answer.questionID, handles: question.topic.handles),
                code: .storageFailed) : []
        entry.state = .answered
        try journalTransition(questionID, entry, answeredBy: guardian, answerChoiceID: choice.id, closedAt: now)
        try route(id: .random(), from: "broker", to: child, kind: MessageKind.response.rawValue, subject: questionID, body: response)
        for other in (ledger.rosters[family] ?? []).sorted() where other != guardian {
            try route(id: .random(), from: "broker", to: "guardian/\(other)", kind: MessageKind.closed.rawValue, subject: questionID, body: closed)
        }
        crashPoints.answerAccepted()
        if choice.answer == .approval {
            try route(id: .random(), from: "broker", to: "limits", kind: MessageKind.approval.rawValue, subject: questionID, body: notice, limitsKey: child)
        }
        ledger.update(questionID, entry)
    }

    /// Closes a question whose deadline passed: unsent ones are abandoned, sent ones expire and guardians are told,
    /// and one still waiting for admission is refused, the child being told in place of the limits worker.
    func expire(_ questionID: MessageID, now: Date) throws(WireError) {
        guard var entry = ledger.entries[questionID], !entry.state.isClosed else { return }
        if entry.state == .admitting {
            let refusal = AskResult(questionID: questionID.uuid, outcome: .refused(.systemError("the question expired before the limits service admitted it")))
            let body = try WireJSON.encodeBody(refusal, code: .storageFailed)
            entry.state = .refused
            try journalTransition(questionID, entry, closedAt: now)
            ledger.update(questionID, entry)
            stats.countRouted("ledger.admission-expired")
            try route(id: .random(), from: "broker", to: "child/\(ledger.child(of: entry))", kind: MessageKind.askResult.rawValue, subject: questionID, body: body)
            return
        }
        let wasSent = entry.state == .sent
        let closed = try WireJSON.encodeBody(
            QuestionClosed(questionID: questionID.uuid, reason: .expired), code: .storageFailed)
        entry.state = wasSent ? .expired : .abandoned
        try journalTransition(questionID, entry, closedAt: now)
        ledger.update(questionID, entry)
        stats.countRouted(wasSent ? "ledger.expired" : "ledger.abandoned")
        guard wasSent else { return }
        crashPoints.hit(.expiry)
        for guardian in ledger.roster(of: entry).sorted() {
            try route(id: .random(), from: "broker", to: "guardian/\(guardian)", kind: MessageKind.closed.rawValue, subject: questionID, body: closed)
        }
    }

    func expireQuestions() {
        let now = Date()
        for questionID in ledger.due(now: now) {
            turn.expired += 1
            do { try expire(questionID, now: now) } catch {
                logger.error("could not expire question", ["question": questionID.uuid, "error": "\(error)"])
            }
        }
    }
}

/// The bodies the ledger builds around a question's stored JSON: the JSON is spliced in as it is, never decoded
/// and encoded again. The stored JSON is canonical (``WireJSON``), so each body is byte for byte what encoding the
/// full message would give.
enum LedgerBodies {
    /// The `question` body (``GuardianQuestion``).
    /// - Throws: `storage-failed` when a date cannot be carried on the wire or the stored question does not decode.
    static func guardianQuestion(
        question: [UInt8], child: String, family: String, sentAt: Date, expiresAt: Date
    ) throws(WireError) -> [UInt8] {
        guard let sent = WireDate.format(sentAt), let expires = WireDate.format(expiresAt) else {
            // Dates the wire cannot carry: let the full encoder give its verdict (it fails, with the reason).
            let decoded: AnyPermissionQuestion
            do { decoded = try WireJSON.decode(AnyPermissionQuestion.self, from: question) } catch {
                throw WireError(.storageFailed, "the stored question does not decode: \(describeDecoding(error))")
            }
            return try WireJSON.encodeBody(
                GuardianQuestion(question: decoded, child: child, family: family, sentAt: sentAt, expiresAt: expiresAt),
                code: .storageFailed)
        }
        var out: [UInt8] = []
        out.reserveCapacity(question.count + child.utf8.count + family.utf8.count + 100)
        out.append(contentsOf: #"{"child":"#.utf8)
        WireJSON.appendQuoted(child, to: &out)
        out.append(contentsOf: #","expiresAt":""#.utf8)
        out.append(contentsOf: expires.utf8)
        out.append(contentsOf: #"","family":"#.utf8)
        WireJSON.appendQuoted(family, to: &out)
        out.append(contentsOf: #","question":"#.utf8)
        out.append(contentsOf: question)
        out.append(contentsOf: #","sentAt":""#.utf8)
        out.append(contentsOf: sent.utf8)
        out.append(contentsOf: #""}"#.utf8)
        return out
    }

    /// The `response` body (``AnyPermissionResponse``).
    /// - Throws: `storage-failed` if the choice cannot be encoded.
    static func response(question: [UInt8], choice: PermissionChoice) throws(WireError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(question.count + 100)
        out.append(contentsOf: #"{"choice":"#.utf8)
        out.append(contentsOf: try WireJSON.encodeBody(choice, code: .storageFailed))
        out.append(contentsOf: #","question":"#.utf8)
        out.append(contentsOf: question)
        out.append(UInt8(ascii: "}"))
        return out
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
