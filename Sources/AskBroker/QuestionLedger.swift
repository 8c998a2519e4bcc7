import AskProtocol
import Foundation

/// One question the ledger follows, with its decoded form kept for building guardian and response bodies.
struct LedgerEntry {
    var record: QuestionRecord
    let question: AnyPermissionQuestion
    /// The limits address the ask was routed to; only that worker may admit or refuse it (unknown after a restart).
    var admitter: String? = nil
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
    var entries: [MessageID: LedgerEntry] = [:]
    var rosters: [String: Set<String>] = [:]
    private var deadlines = DeadlineHeap<Date, MessageID>()

    init(configuration: BrokerConfiguration) { self.configuration = configuration }

    /// Adds a guardian to a family's roster. - Returns: whether it is new.
    mutating func addGuardian(family: String, guardian: String) -> Bool {
        rosters[family, default: []].insert(guardian).inserted
    }

    mutating func restore(_ record: QuestionRecord) {
        guard let question = try? WireJSON.decode(AnyPermissionQuestion.self, from: record.question) else { return }
        entries[record.id] = LedgerEntry(record: record, question: question)
        if !record.state.isClosed { deadlines.push(record.expiresAt, record.id) }
    }

    mutating func track(_ entry: LedgerEntry) {
        entries[entry.record.id] = entry
        deadlines.push(entry.record.expiresAt, entry.record.id)
    }

    /// Puts back an entry a failed turn had changed; its deadline comes again no sooner than `notBefore`, so an
    /// expiry that cannot be written (disk full) is retried without spinning.
    mutating func putBack(_ entry: LedgerEntry, notBefore: Date) {
        entries[entry.record.id] = entry
        if !entry.record.state.isClosed { deadlines.push(max(entry.record.expiresAt, notBefore), entry.record.id) }
    }

    var nextDeadline: Date? {
        mutating get {
            while let top = deadlines.peek {
                if let entry = entries[top.payload], !entry.record.state.isClosed, top.at >= entry.record.expiresAt { return top.at }
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
            if let entry = entries[top.payload], !entry.record.state.isClosed, entry.record.expiresAt <= now { due.append(top.payload) }
        }
        return due
    }

    func countsByState() -> [String: Int] {
        var counts: [String: Int] = [:]
        for entry in entries.values { counts[entry.record.state.rawValue, default: 0] += 1 }
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
            try handleSendQuestion(session: session, from: from, questionID: MessageID(uuid: request.questionID), now: now)
        case ("broker", MessageKind.cancel.rawValue):
            let request = try decodeBody(CancelQuestion.self, body)
            try handleCancel(session: session, from: from, questionID: MessageID(uuid: request.questionID), now: now)
        case ("broker", MessageKind.answer.rawValue):
            let answer = try decodeBody(GuardianAnswer.self, body)
            try handleAnswer(session: session, from: from, answer: answer, now: now)
        default:
            throw WireError(.unknownKind, "the broker handles send, cancel and answer; got '\(kind)'")
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

    func save(_ record: QuestionRecord) throws(WireError) {
        if turnLedgerUndo.index(forKey: record.id) == nil { turnLedgerUndo[record.id] = .some(ledger.entries[record.id]) }
        do { try journal.saveQuestion(record) } catch {
            throw WireError(.storageFailed, "the journal refused the question: \(error)")
        }
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
        if let subject, subject != questionID {
            throw WireError(.badSubject, "the subject must be the question id \(question.id)")
        }
        guard ledger.entries[questionID] == nil else {
            throw WireError(.duplicateQuestion, "question \(question.id) was already asked")
        }
        do { try question.validate(now: now) } catch {
            throw WireError(.invalidQuestion, "\(error)")
        }
        let window = configuration.scaledPendingWindow
        let pendingEnd = now.addingTimeInterval(window.seconds)
        let expiresAt = min(question.expirationDate ?? pendingEnd, pendingEnd)
        let encoded = (try? WireJSON.encode(question)) ?? body
        let record = QuestionRecord(
            id: questionID, child: String(from.dropFirst("child/".count)), family: family, state: .admitting,
            createdAt: now, expiresAt: expiresAt, question: encoded, choiceIDs: question.choices.map(\.id),
            approvalChoiceIDs: question.choices.filter { $0.answer == .approval }.map(\.id),
            answeredBy: nil, answerChoiceID: nil, closedAt: nil)
        try save(record)
        try route(id: id, from: from, to: "limits", kind: MessageKind.ask.rawValue, subject: questionID, body: body)
        let admitter = limitsTarget(for: from)
        ledger.track(LedgerEntry(record: record, question: question, admitter: admitter == "limits" ? nil : admitter))
    }

    /// `ask.result`, limits → child: the question is presented or refused.
    func handleAskResult(session: Session, from: String, to: String, id: MessageID, subject: MessageID?, body: [UInt8], now: Date) throws(WireError) {
        guard session.role == .limits else { throw WireError(.forbidden, "only a limits worker may admit or refuse a question") }
        let result = try decodeBody(AskResult.self, body)
        let questionID = MessageID(uuid: result.questionID)
        guard var entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(result.questionID)")
        }
        if let admitter = entry.admitter, session.addresses[admitter] == nil, mailboxes[admitter]?.owner?.isAlive == true {
            throw WireError(.forbidden, "question \(result.questionID) was routed to \(admitter), not to this limits worker")
        }
        guard to == "child/\(entry.record.child)" else {
            throw WireError(.badAddress, "the result of question \(result.questionID) goes to child/\(entry.record.child)")
        }
        guard entry.record.state == .admitting else {
            // Too late: the question already closed (its deadline passed during admission, and the child was told).
            // Acknowledge the result and drop it, so the child sees exactly one outcome.
            stats.countRouted("ledger.late-ask-result")
            return
        }
        switch result.outcome {
        case .presented: entry.record.state = .presented
        case .refused:
            entry.record.state = .refused
            entry.record.closedAt = now
        }
        try save(entry.record)
        ledger.entries[questionID] = entry
        try route(id: id, from: from, to: to, kind: MessageKind.askResult.rawValue, subject: questionID, body: body)
    }

    func ownEntry(_ questionID: MessageID, from: String) throws(WireError) -> LedgerEntry {
        guard let entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(questionID.uuid)")
        }
        guard from == "child/\(entry.record.child)" else {
            throw WireError(.forbidden, "question \(questionID.uuid) belongs to another child")
        }
        return entry
    }

    /// `send`, child → broker: the child sent the sheet; every guardian of the family gets the question.
    func handleSendQuestion(session: Session, from: String, questionID: MessageID, now: Date) throws(WireError) {
        var entry = try ownEntry(questionID, from: from)
        guard entry.record.state == .presented else { throw QuestionLedger.refusal(for: entry.record.state, wanted: "send") }
        guard now < entry.record.expiresAt else { throw WireError(.expired, "the question expired at \(entry.record.expiresAt)") }
        entry.record.state = .sent
        try save(entry.record)
        let body = (try? WireJSON.encode(GuardianQuestion(question: entry.question, child: entry.record.child, family: entry.record.family, sentAt: now, expiresAt: entry.record.expiresAt))) ?? []
        for guardian in (ledger.rosters[entry.record.family] ?? []).sorted() {
            try route(id: .random(), from: "broker", to: "guardian/\(guardian)", kind: MessageKind.question.rawValue, subject: questionID, body: body, expiresAt: entry.record.expiresAt)
        }
        ledger.entries[questionID] = entry
    }

    /// `cancel`, child → broker: the sheet was dismissed; the question never gets a response.
    func handleCancel(session: Session, from: String, questionID: MessageID, now: Date) throws(WireError) {
        var entry = try ownEntry(questionID, from: from)
        guard entry.record.state == .presented || entry.record.state == .admitting else {
            throw QuestionLedger.refusal(for: entry.record.state, wanted: "cancel")
        }
        entry.record.state = .cancelled
        entry.record.closedAt = now
        try save(entry.record)
        ledger.entries[questionID] = entry
    }

    /// `answer`, guardian → broker: the first valid answer wins.
    func handleAnswer(session: Session, from: String, answer: GuardianAnswer, now: Date) throws(WireError) {
        let questionID = MessageID(uuid: answer.questionID)
        guard session.role == .guardian, from.hasPrefix("guardian/") else { throw WireError(.forbidden, "only a guardian may answer") }
        let guardian = String(from.dropFirst("guardian/".count))
        guard var entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(answer.questionID)")
        }
        guard session.addresses[from] == entry.record.family, ledger.rosters[entry.record.family]?.contains(guardian) == true else {
            throw WireError(.notGuardian, "\(from) is not a guardian of the question's family")
        }
        if entry.record.state == .sent && now >= entry.record.expiresAt {
            try expire(questionID, now: now)
            entry = ledger.entries[questionID]!
        }
        guard entry.record.state == .sent else { throw QuestionLedger.refusal(for: entry.record.state, wanted: "answer") }
        guard let choice = entry.question.choice(withID: answer.choiceID) else {
            throw WireError(.invalidChoice, "'\(answer.choiceID)' is not one of the question's choices")
        }
        entry.record.state = .answered
        entry.record.answeredBy = guardian
        entry.record.answerChoiceID = choice.id
        entry.record.closedAt = now
        try save(entry.record)
        let child = "child/\(entry.record.child)"
        let response = (try? WireJSON.encode(AnyPermissionResponse(question: entry.question, choice: choice))) ?? []
        try route(id: .random(), from: "broker", to: child, kind: MessageKind.response.rawValue, subject: questionID, body: response)
        let closed = (try? WireJSON.encode(QuestionClosed(questionID: answer.questionID, reason: .answered, answeredBy: guardian))) ?? []
        for other in (ledger.rosters[entry.record.family] ?? []).sorted() where other != guardian {
            try route(id: .random(), from: "broker", to: "guardian/\(other)", kind: MessageKind.closed.rawValue, subject: questionID, body: closed)
        }
        crashPoints.answerAccepted()
        if choice.answer == .approval {
            let notice = (try? WireJSON.encode(ApprovalNotice(child: entry.record.child, questionID: answer.questionID, handles: entry.question.topic.handles))) ?? []
            try route(id: .random(), from: "broker", to: "limits", kind: MessageKind.approval.rawValue, subject: questionID, body: notice, limitsKey: child)
        }
        ledger.entries[questionID] = entry
    }

    /// Closes a question whose deadline passed: unsent ones are abandoned, sent ones expire and guardians are told,
    /// and one still waiting for admission is refused, the child being told in place of the limits worker.
    func expire(_ questionID: MessageID, now: Date) throws(WireError) {
        guard var entry = ledger.entries[questionID], !entry.record.state.isClosed else { return }
        if entry.record.state == .admitting {
            entry.record.state = .refused
            entry.record.closedAt = now
            try save(entry.record)
            ledger.entries[questionID] = entry
            stats.countRouted("ledger.admission-expired")
            let refusal = AskResult(questionID: questionID.uuid, outcome: .refused(.systemError("the question expired before the limits service admitted it")))
            let body = (try? WireJSON.encode(refusal)) ?? []
            try route(id: .random(), from: "broker", to: "child/\(entry.record.child)", kind: MessageKind.askResult.rawValue, subject: questionID, body: body)
            return
        }
        let wasSent = entry.record.state == .sent
        entry.record.state = wasSent ? .expired : .abandoned
        entry.record.closedAt = now
        try save(entry.record)
        ledger.entries[questionID] = entry
        stats.countRouted(wasSent ? "ledger.expired" : "ledger.abandoned")
        guard wasSent else { return }
        crashPoints.hit(.expiry)
        let closed = (try? WireJSON.encode(QuestionClosed(questionID: questionID.uuid, reason: .expired))) ?? []
        for guardian in (ledger.rosters[entry.record.family] ?? []).sorted() {
            try route(id: .random(), from: "broker", to: "guardian/\(guardian)", kind: MessageKind.closed.rawValue, subject: questionID, body: closed)
        }
    }

    func expireQuestions() {
        let now = Date()
        for questionID in ledger.due(now: now) {
            do { try expire(questionID, now: now) } catch {
                logger.error("could not expire question", ["question": questionID.uuid, "error": "\(error)"])
            }
        }
    }
}
