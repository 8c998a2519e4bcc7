import AskBasics
import AskProtocol
import Foundation

// The ledger's effects: the SENDs the broker reads (ask, ask.result, and those addressed to `broker`), their
// journal writes and the bodies it builds for guardians and children, and question expiry.
extension Broker {
    /// Handles a SEND the ledger must read: `ask`, `ask.result`, and everything addressed to `broker`.
    func ledgerSend(session: Session, parsed: ParsedFrames, id: MessageID, from: String, to: String, kind: String)
        throws(WireError)
    {
        let body = Array(input[parsed.bodyFrame])
        let now = configuration.clock.now
        switch (to, kind) {
        case (_, MessageKind.ask.rawValue):
            try handleAsk(
                session: session,
                from: from,
                to: to,
                id: id,
                subject: parsed.subject,
                trace: parsed.trace,
                body: body,
                now: now
            )
        case (_, MessageKind.askResult.rawValue):
            try handleAskResult(
                session: session,
                from: from,
                to: to,
                id: id,
                subject: parsed.subject,
                trace: parsed.trace,
                body: body,
                now: now
            )
        case (_, MessageKind.limitsAdmin.rawValue):
            // Admin changes go to the limits worker that serves the child, not the one the sender hashes to.
            guard session.role == .observer else {
                throw WireError(.forbidden, "only an observer may change limits state")
            }
            let change = try decodeBody(LimitsAdminChange.self, body)
            guard to == "limits" || to.hasPrefix("limits/") else {
                throw WireError(.badAddress, "limits.admin goes to 'limits'")
            }
            if moves.limitsAsked.contains(change.child) {
                throw WireError(
                    .moving,
                    "child '\(change.child)' is moving to another broker with its family: retry shortly"
                )
            }
            try route(
                id: id,
                from: from,
                to: to,
                kind: kind,
                subject: parsed.subject,
                trace: parsed.trace,
                body: body,
                limitsKey: "child/\(change.child)"
            )
        case ("broker", MessageKind.send.rawValue):
            let request = try decodeBody(SendQuestion.self, body)
            try Self.checkSubject(parsed.subject, request.questionID)
            try handleSendQuestion(
                session: session,
                from: from,
                questionID: MessageID(uuid: request.questionID),
                cause: parsed.trace?.child(of: id),
                now: now
            )
        case ("broker", MessageKind.cancel.rawValue):
            let request = try decodeBody(CancelQuestion.self, body)
            try Self.checkSubject(parsed.subject, request.questionID)
            try handleCancel(session: session, from: from, questionID: MessageID(uuid: request.questionID), now: now)
        case ("broker", MessageKind.answer.rawValue):
            let answer = try decodeBody(GuardianAnswer.self, body)
            try Self.checkSubject(parsed.subject, answer.questionID)
            try handleAnswer(session: session, from: from, answer: answer, cause: parsed.trace?.child(of: id), now: now)
        case ("broker", MessageKind.limitsState.rawValue):
            try takeLimitsState(session: session, body: body)
        case ("broker", ClockAdvance.kind):
            try advanceClock(session: session, body: body)
        default:
            throw WireError(.unknownKind, "the broker handles send, cancel, answer and limits.state; got '\(kind)'")
        }
    }

    /// `clock.advance` (tests only): moves a driven clock forward and runs the expiry pass at the new time in this
    /// turn, so the `closed` notices of what expired go out with the observer's ACK.
    func advanceClock(session: Session, body: [UInt8]) throws(WireError) {
        guard session.role == .observer else {
            throw WireError(.forbidden, "only an observer may advance the broker's clock")
        }
        guard let clock = configuration.clock as? DrivenClock else {
            throw WireError(
                .forbidden,
                "this broker keeps real time: clock.advance needs a broker started with --driven-clock (tests only)"
            )
        }
        let advance: ClockAdvance
        do { advance = try JSONDecoder().decode(ClockAdvance.self, from: Data(body)) } catch {
            throw WireError(.invalidJSON, "clock.advance takes {\"milliseconds\": N}: \(describeDecoding(error))")
        }
        guard advance.milliseconds >= 0 else {
            throw WireError(.invalidJSON, "clock.advance moves forward only: milliseconds must be 0 or more")
        }
        clock.advance(by: .milliseconds(advance.milliseconds))
        if ledger.nextDeadline.map({ $0 <= clock.now }) ?? false { expireQuestions() }
        logger.info("clock advanced", metadata: ["ms": "\(advance.milliseconds)", "now": "\(clock.now)"])
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
            case .invalidJSON(let why):
                throw WireError(.invalidJSON, "the \(T.messageKind.rawValue) body is not valid: \(why)")
            case .unknownKind(let kind): throw WireError(.unknownKind, "unknown kind '\(kind)'")
            }
        }
    }

    /// Notes how a ledger entry was before this turn first changed it, for ``withdrawTurn(_:)``.
    func noteLedgerUndo(_ id: MessageID) {
        if turnLedgerUndo.index(forKey: id) == nil { turnLedgerUndo[id] = .some(ledger.entries[id]) }
    }

    /// Journals a new question (its full record, question JSON included). - Returns: its row's `seq`.
    func journalNewQuestion(_ record: QuestionRecord) throws(WireError) -> Int64 {
        noteLedgerUndo(record.id)
        guard journal.durability != .off else { return 0 }
        do { return try journal.saveQuestion(record) } catch {
            throw WireError(.storageFailed, "the journal refused the question: \(error)")
        }
    }

    /// Journals a transition to `entry.state` (an UPDATE of the state columns; the question JSON stays).
    func journalTransition(
        _ id: MessageID,
        _ entry: LedgerEntry,
        answeredBy: String? = nil,
        answerChoiceID: String? = nil,
        closedAt: Date? = nil,
        trace: TraceContext? = nil
    ) throws(WireError) {
        noteLedgerUndo(id)
        guard journal.durability != .off else { return }
        do {
            try journal.updateQuestion(
                seq: entry.seq,
                id: id,
                state: entry.state,
                answeredBy: answeredBy,
                answerChoiceID: answerChoiceID,
                closedAt: closedAt,
                trace: trace
            )
        } catch {
            throw WireError(.storageFailed, "the journal refused the question: \(error)")
        }
    }

    /// The trace context of the messages the broker makes for a question: held in memory from its ask on, and read
    /// from its journal row (then held again) for a question the broker recovered at a restart.
    func questionTrace(_ questionID: MessageID) -> TraceContext? {
        if let held = questionTraces[questionID] { return held }
        guard journal.durability != .off, let entry = ledger.entries[questionID],
            let stored = try? journal.questionTrace(seq: entry.seq, id: questionID)
        else { return nil }
        questionTraces[questionID] = stored
        return stored
    }

    /// The question JSON of a followed question: from memory without a journal, else one SELECT by its row.
    func questionJSON(_ id: MessageID, _ entry: LedgerEntry) throws(WireError) -> [UInt8] {
        if let bytes = ledger.questionInMemory(id) { return bytes }
        let stored: [UInt8]?
        do { stored = try journal.questionJSON(seq: entry.seq, id: id) } catch {
            throw WireError(.storageFailed, "the journal could not read question \(id.uuid): \(error)")
        }
        guard let stored else { throw WireError(.storageFailed, "question \(id.uuid) is not in the journal") }
        return stored
    }

    /// `ask`, child → limits: record the question (admitting) and pass it to the child's limits worker.
    func handleAsk(
        session: Session,
        from: String,
        to: String,
        id: MessageID,
        subject: MessageID?,
        trace: TraceContext?,
        body: [UInt8],
        now: Date
    ) throws(WireError) {
        guard session.role == .child, from.hasPrefix("child/"), let family = session.addresses[from] ?? nil else {
            throw WireError(.forbidden, "only a child may ask")
        }
        guard to == "limits" else { throw WireError(.badAddress, "an ask goes to 'limits', not '\(to)'") }
        let request = try decodeBody(AskRequest.self, body)
        let question = request.question
        let questionID = MessageID(uuid: question.id)
        try Self.checkSubject(subject, question.id)
        if let entry = ledger.entries[questionID] {
            // The old broker's accepted ask, sent again here after the family moved: acknowledged, nothing changes.
            if isMovedRetry(questionID), Self.isAddress(from, role: "child/", id: ledger.child(of: entry)) {
                stats.duplicates += 1
                return
            }
            throw WireError(.duplicateQuestion, "question \(question.id) was already asked")
        }
        if let reason = question.firstViolation(now: now) { throw WireError.invalidQuestion(reason) }
        let expiresAt = Self.deadline(
            now: now,
            expirationDate: question.expirationDate,
            window: configuration.scaledPendingWindow
        )
        let encoded: [UInt8]
        do { encoded = try WireJSON.encode(question) } catch {
            // Unreachable for a decoded question; still the documented JSON reason, never free text.
            let reason = InvalidQuestionReason(field: "question", code: "unencodable", message: "\(error)")
            throw WireError.invalidQuestion(reason)
        }
        let child = String(from.dropFirst("child/".count))
        // Route first: a busy limits queue refuses the ask before anything about the question is written.
        try route(
            id: id,
            from: from,
            to: "limits",
            kind: MessageKind.ask.rawValue,
            subject: questionID,
            trace: trace,
            body: body
        )
        var seq: Int64 = 0
        if journal.durability != .off {
            seq = try journalNewQuestion(
                QuestionRecord(
                    id: questionID,
                    child: child,
                    family: family,
                    state: .admitting,
                    createdAt: now,
                    expiresAt: expiresAt,
                    question: encoded,
                    choiceIDs: question.choices.map(\.id),
                    approvalChoiceIDs: question.choices.filter { $0.answer == .approval }.map(\.id),
                    trace: trace?.child(of: id)
                )
            )
        } else {
            noteLedgerUndo(questionID)
        }
        let admitter = limitsTarget(for: from)
        let entry = LedgerEntry(
            expiresAt: expiresAt,
            child: ledger.names.number(child),
            family: ledger.names.number(family),
            admitter: admitter == "limits" ? NamePool.none : ledger.names.number(admitter),
            state: .admitting,
            seq: seq
        )
        ledger.track(questionID, entry, question: journal.durability == .off ? encoded : nil)
        if let trace { questionTraces[questionID] = trace.child(of: id) }
    }

    /// `ask.result`, limits → child: the question is presented or refused.
    func handleAskResult(
        session: Session,
        from: String,
        to: String,
        id: MessageID,
        subject: MessageID?,
        trace: TraceContext?,
        body: [UInt8],
        now: Date
    ) throws(WireError) {
        guard session.role == .limits else {
            throw WireError(.forbidden, "only a limits worker may admit or refuse a question")
        }
        let result = try decodeBody(AskResult.self, body)
        try Self.checkSubject(subject, result.questionID)
        let questionID = MessageID(uuid: result.questionID)
        guard var entry = ledger.entries[questionID] else {
            throw WireError(.unknownQuestion, "no question \(result.questionID)")
        }
        if entry.admitter != NamePool.none {
            let admitter = ledger.names[entry.admitter]
            if session.addresses[admitter] == nil, mailboxes[admitter]?.owner?.isAlive == true {
                throw WireError(
                    .forbidden,
                    "question \(result.questionID) was routed to \(admitter), not to this limits worker"
                )
            }
        }
        guard Self.isAddress(to, role: "child/", id: ledger.child(of: entry)) else {
            throw WireError(
                .badAddress,
                "the result of question \(result.questionID) goes to child/\(ledger.child(of: entry))"
            )
        }
        guard entry.state == .admitting else {
            // Too late: the question already closed (its deadline passed during admission, and the child was told).
            // Acknowledge the result and drop it, so the child sees exactly one outcome.
            stats.countRouted("ledger.late-ask-result")
            return
        }
        // Route first: a busy child queue refuses the result before the question changes, so the retry applies.
        try route(
            id: id,
            from: from,
            to: to,
            kind: MessageKind.askResult.rawValue,
            subject: questionID,
            trace: trace,
            body: body
        )
        switch result.outcome {
        case .presented:
            entry.state = .presented
            try journalTransition(questionID, entry)
        case .refused:
            entry.state = .refused
            try journalTransition(questionID, entry, closedAt: now)
            traceClosed(questionID, entry, reason: "refused")
            questionTraces[questionID] = nil
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
    func handleSendQuestion(
        session: Session,
        from: String,
        questionID: MessageID,
        cause: TraceContext?,
        now: Date
    ) throws(WireError) {
        let now = now.truncatedToWireMilliseconds  // as an answer's: whole milliseconds against the deadline
        var entry = try ownEntry(questionID, from: from)
        guard entry.state == .presented else {
            // The old broker's accepted send, sent again here after the family moved: acknowledged, nothing changes.
            if entry.state == .sent || entry.state == .answered || entry.state == .expired, isMovedRetry(questionID) {
                stats.duplicates += 1
                return
            }
            if entry.state == .cancelled { reached.note(.sendRacingCancel, questionID) }
            throw QuestionLedger.refusal(for: entry.state, wanted: "send")
        }
        guard now < entry.expiresAt else { throw WireError(.expired, "the question expired at \(entry.expiresAt)") }
        let body = try guardianQuestionBody(questionID, entry, sentAt: now)
        entry.state = .sent
        try journalTransition(questionID, entry, trace: cause)
        if let cause { questionTraces[questionID] = cause }
        let roster = ledger.roster(of: entry)
        // No guardian of the family has registered yet: the first ones to do so get it (``addToRoster``).
        if roster.isEmpty { ledger.awaitGuardians(questionID, family: entry.family) }
        for guardian in roster.sorted() {
            try routeQuestion(questionID, body: body, expiresAt: entry.expiresAt, to: guardian)
        }
        ledger.update(questionID, entry)
    }

    /// The `question` body of a followed question, as its guardians get it.
    func guardianQuestionBody(_ questionID: MessageID, _ entry: LedgerEntry, sentAt: Date) throws(WireError)
        -> [UInt8]
    {
        try LedgerBodies.guardianQuestion(
            question: try questionJSON(questionID, entry),
            child: ledger.child(of: entry),
            family: ledger.family(of: entry),
            sentAt: sentAt,
            expiresAt: entry.expiresAt
        )
    }

    /// Routes a `question` message to `guardian`, in the question's trace (its `send`'s span as the parent).
    func routeQuestion(_ questionID: MessageID, body: [UInt8], expiresAt: Date, to guardian: String) throws(WireError) {
        try route(
            id: .random(),
            from: "broker",
            to: "guardian/\(guardian)",
            kind: MessageKind.question.rawValue,
            subject: questionID,
            trace: questionTrace(questionID),
            body: body,
            expiresAt: expiresAt
        )
    }

    /// `cancel`, child → broker: the sheet was dismissed; the question never gets a response.
    func handleCancel(session: Session, from: String, questionID: MessageID, now: Date) throws(WireError) {
        var entry = try ownEntry(questionID, from: from)
        guard entry.state == .presented || entry.state == .admitting else {
            // The old broker's accepted cancel, sent again here after the family moved: acknowledged again.
            if entry.state == .cancelled, isMovedRetry(questionID) {
                stats.duplicates += 1
                return
            }
            if entry.state == .sent { reached.note(.sendRacingCancel, questionID) }
            throw QuestionLedger.refusal(for: entry.state, wanted: "cancel")
        }
        entry.state = .cancelled
        try journalTransition(questionID, entry, closedAt: now)
        traceClosed(questionID, entry, reason: "cancelled")
        questionTraces[questionID] = nil
        ledger.update(questionID, entry)
    }

    /// `answer`, guardian → broker: the first valid answer wins.
    func handleAnswer(
        session: Session,
        from: String,
        answer: GuardianAnswer,
        cause: TraceContext?,
        now: Date
    ) throws(WireError) {
        // Decided and recorded at the spec's precision, whole milliseconds: the time the journal keeps for the
        // answer is the time the deadline was checked against, so nobody reading the journal judges it otherwise.
        let now = now.truncatedToWireMilliseconds
        let questionID = MessageID(uuid: answer.questionID)
        guard session.role == .guardian, from.hasPrefix("guardian/") else {
            throw WireError(.forbidden, "only a guardian may answer")
        }
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
        guard entry.state == .sent else {
            // The winning answer again, under another id (its ACK lost, then sent again to the broker the family
            // moved to, or after the accepted-id horizon): acknowledged again, nothing changes.
            if entry.state == .answered, let won = try? journal.answer(seq: entry.seq, id: questionID),
                won.guardian == guardian, won.choice == answer.choiceID
            {
                stats.duplicates += 1
                return
            }
            if entry.state == .answered { reached.noteLateAnswer(questionID, now: now) }
            throw QuestionLedger.refusal(for: entry.state, wanted: "answer")
        }
        let json = try questionJSON(questionID, entry)
        let question: AnyPermissionQuestion
        do { question = try WireJSON.decode(AnyPermissionQuestion.self, from: json) } catch {
            throw WireError(
                .storageFailed,
                "the stored question \(answer.questionID) does not decode: \(describeDecoding(error))"
            )
        }
        guard let choice = question.choice(withID: answer.choiceID) else {
            throw WireError(.invalidChoice, "'\(answer.choiceID)' is not one of the question's choices")
        }
        // Every body first: one that cannot be encoded refuses the answer before anything changed.
        let childID = ledger.child(of: entry)
        let child = "child/\(childID)"
        let response = try LedgerBodies.response(question: json, choice: choice)
        let closed = try WireJSON.encodeBody(
            QuestionClosed(questionID: answer.questionID, reason: .answered, answeredBy: guardian),
            code: .storageFailed
        )
        let notice =
            choice.answer == .approval
            ? try WireJSON.encodeBody(
                ApprovalNotice(child: childID, questionID: answer.questionID, handles: question.topic.handles),
                code: .storageFailed
            ) : []
        entry.state = .answered
        try journalTransition(questionID, entry, answeredBy: guardian, answerChoiceID: choice.id, closedAt: now)
        // The answer's messages are in its trace, its span their parent.
        let trace = cause ?? questionTrace(questionID)
        try route(
            id: .random(),
            from: "broker",
            to: child,
            kind: MessageKind.response.rawValue,
            subject: questionID,
            trace: trace,
            body: response
        )
        for other in (ledger.rosters[family] ?? []).sorted() where other != guardian {
            try route(
                id: .random(),
                from: "broker",
                to: "guardian/\(other)",
                kind: MessageKind.closed.rawValue,
                subject: questionID,
                trace: trace,
                body: closed
            )
        }
        traceClosed(questionID, entry, reason: "answered")
        questionTraces[questionID] = nil
        reached.noteAccepted(
            questionID,
            now: now,
            expiresAt: entry.expiresAt,
            childAway: mailboxes[child]?.owner == nil
        )
        crashPoints.answerAccepted()
        if choice.answer == .approval {
            try route(
                id: .random(),
                from: "broker",
                to: "limits",
                kind: MessageKind.approval.rawValue,
                subject: questionID,
                trace: trace,
                body: notice,
                limitsKey: child
            )
        }
        ledger.update(questionID, entry)
    }

    /// Closes a question whose deadline passed: unsent ones are abandoned, sent ones expire and guardians are told,
    /// and one still waiting for admission is refused, the child being told in place of the limits worker.
    func expire(_ questionID: MessageID, now: Date) throws(WireError) {
        guard var entry = ledger.entries[questionID], !entry.state.isClosed else { return }
        if entry.state == .admitting {
            let refusal = AskResult(
                questionID: questionID.uuid,
                outcome: .refused(.systemError("the question expired before the limits service admitted it"))
            )
            let body = try WireJSON.encodeBody(refusal, code: .storageFailed)
            entry.state = .refused
            try journalTransition(questionID, entry, closedAt: now)
            ledger.update(questionID, entry)
            let cause = questionTrace(questionID)
            questionTraces[questionID] = nil
            if let trace {
                trace.record(.expired, question: questionID.uuid, from: "broker", code: "admitting", trace: cause)
                trace.record(
                    .closed,
                    question: questionID.uuid,
                    from: "broker",
                    to: "child/\(ledger.child(of: entry))",
                    code: "refused",
                    trace: cause
                )
            }
            stats.countRouted("ledger.admission-expired")
            try route(
                id: .random(),
                from: "broker",
                to: "child/\(ledger.child(of: entry))",
                kind: MessageKind.askResult.rawValue,
                subject: questionID,
                trace: cause,
                body: body
            )
            return
        }
        let wasSent = entry.state == .sent
        let closed = try WireJSON.encodeBody(
            QuestionClosed(questionID: questionID.uuid, reason: .expired),
            code: .storageFailed
        )
        entry.state = wasSent ? .expired : .abandoned
        try journalTransition(questionID, entry, closedAt: now)
        ledger.update(questionID, entry)
        let cause = questionTrace(questionID)
        questionTraces[questionID] = nil
        if let trace {
            trace.record(
                .expired,
                question: questionID.uuid,
                from: "broker",
                code: wasSent ? "sent" : "presented",
                trace: cause
            )
            trace.record(
                .closed,
                question: questionID.uuid,
                from: "broker",
                to: "child/\(ledger.child(of: entry))",
                code: wasSent ? "expired" : "abandoned",
                trace: cause
            )
        }
        stats.countRouted(wasSent ? "ledger.expired" : "ledger.abandoned")
        guard wasSent else { return }
        crashPoints.hit(.expiry)
        for guardian in ledger.roster(of: entry).sorted() {
            try route(
                id: .random(),
                from: "broker",
                to: "guardian/\(guardian)",
                kind: MessageKind.closed.rawValue,
                subject: questionID,
                trace: cause,
                body: closed
            )
        }
    }

    func expireQuestions() {
        let now = configuration.clock.now
        for questionID in ledger.due(now: now) {
            if moves.isActive, let entry = ledger.entries[questionID], isHeld(entry) {
                ledger.putBack(questionID, entry, notBefore: now.addingTimeInterval(1))
                continue
            }
            turn.expired += 1
            do { try expire(questionID, now: now) } catch {
                logger.error(
                    "could not expire question",
                    metadata: ["question": "\(questionID.uuid)", "error": "\(error)"]
                )
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
        question: [UInt8],
        child: String,
        family: String,
        sentAt: Date,
        expiresAt: Date
    ) throws(WireError) -> [UInt8] {
        guard let sent = WireDate.format(sentAt), let expires = WireDate.format(expiresAt) else {
            // Dates the wire cannot carry: let the full encoder give its verdict (it fails, with the reason).
            let decoded: AnyPermissionQuestion
            do { decoded = try WireJSON.decode(AnyPermissionQuestion.self, from: question) } catch {
                throw WireError(.storageFailed, "the stored question does not decode: \(describeDecoding(error))")
            }
            return try WireJSON.encodeBody(
                GuardianQuestion(question: decoded, child: child, family: family, sentAt: sentAt, expiresAt: expiresAt),
                code: .storageFailed
            )
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

extension Broker {
    /// A question's deadline: `min(expirationDate, now + pending window)`, truncated to whole milliseconds like
    /// every date the spec names (an `expirationDate` already is). An answer is accepted while its time, truncated
    /// to whole milliseconds too, is before the deadline: the journal's `closed_ms` and the checker, which compare
    /// whole milliseconds, agree with the broker at the boundary.
    static func deadline(now: Date, expirationDate: Date?, window: Duration) -> Date {
        let pendingEnd = now.addingTimeInterval(window.seconds).truncatedToWireMilliseconds
        return min(expirationDate?.truncatedToWireMilliseconds ?? pendingEnd, pendingEnd)
    }
}
