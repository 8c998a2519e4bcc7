import AskBasics
import AskClient
import AskLogging
import AskProtocol
import Foundation

/// The parent worker's logic, on the connection thread: holds each question for its guardian's think time (and
/// offline period), then answers per policy, never at or after the question's expiry.
final class ParentWorkerHandler: WorkerHandler {
    struct Guardian {
        let setup: GuardianSetup
        /// Decisions and think times come from separate streams, so changing one does not shift the other.
        var decisions: SeededGenerator
        var thinking: SeededGenerator
    }

    struct HeldKey: Hashable {
        let guardian: String
        let question: UUID
    }

    struct Held {
        let question: GuardianQuestion
        let receivedAt: Date
        /// The context the answer carries: the question delivery's trace, its span as the parent.
        var trace: TraceContext? = nil
        /// When to decide; `nil` waits for a `closed` (only with `answerAfterExpiry` and no expiration date).
        var decideAt: ContinuousClock.Instant?
    }

    let configuration: ParentWorkerConfiguration
    let logger: AskLogger
    let onRegistered: @Sendable () -> Void
    let onEvent: @Sendable (ParentWorkerEvent) -> Void
    let records: JSONLinesWriter?
    let start: ContinuousClock.Instant
    var guardians: [String: Guardian] = [:]
    var held: [HeldKey: Held] = [:]
    /// When held questions are due; an entry whose instant no longer matches its question's `decideAt` is stale.
    var due = DeadlineHeap<ContinuousClock.Instant, HeldKey>()
    /// Answers sent and not yet accepted or refused, with their record (result still empty).
    var attempts: [MessageID: GuardianAnswerRecord] = [:]

    init(
        configuration: ParentWorkerConfiguration,
        logger: AskLogger,
        onRegistered: @escaping @Sendable () -> Void,
        onEvent: @escaping @Sendable (ParentWorkerEvent) -> Void
    ) {
        self.configuration = configuration
        start = configuration.clock.instant
        self.logger = logger
        self.onRegistered = onRegistered
        self.onEvent = onEvent
        do {
            records = try JSONLinesWriter(path: configuration.recordsPath)
        } catch {
            logger.error(
                "cannot open records file",
                metadata: ["path": "\(configuration.recordsPath ?? "")", "error": "\(error)"]
            )
            records = nil
        }
        for setup in configuration.guardians {
            guardians[setup.id] = Guardian(
                setup: setup,
                decisions: SeededGenerator(seed: configuration.seed, stream: "decide/\(setup.id)"),
                thinking: SeededGenerator(seed: configuration.seed, stream: "think/\(setup.id)")
            )
        }
    }

    func registered(_ connection: WorkerConnection, welcome: Welcome) {
        onRegistered()
    }

    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        guard delivery.to.hasPrefix("guardian/"), guardians[String(delivery.to.dropFirst("guardian/".count))] != nil
        else {
            return .refuse(WireError(.badAddress, "this worker does not host '\(delivery.to)'"))
        }
        let guardian = String(delivery.to.dropFirst("guardian/".count))
        switch delivery.kind {
        case GuardianQuestion.kind:
            guard let question = try? WireJSON.decode(GuardianQuestion.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable question body"))
            }
            receive(question, guardian: guardian, trace: delivery.causedTrace)
        case QuestionClosed.kind:
            guard let closed = try? WireJSON.decode(QuestionClosed.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable closed body"))
            }
            close(closed, guardian: guardian)
        default:
            logger.warning(
                "unexpected message for a guardian",
                metadata: ["kind": "\(delivery.kind)", "from": "\(delivery.from)", "to": "\(delivery.to)"]
            )
            return .refuse(WireError(.unknownKind, "a guardian handles question and closed, not '\(delivery.kind)'"))
        }
        return .ack
    }

    func accepted(_ id: MessageID, connection: WorkerConnection) {
        finish(id, result: "accepted")
    }

    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
        if attempts[id] != nil {
            logger.info("answer refused", metadata: ["code": "\(error.code.rawValue)", "reason": "\(error.reason)"])
        }
        finish(id, result: error.code.rawValue)
    }

    func tick(_ connection: WorkerConnection, now _: ContinuousClock.Instant) {
        let now = configuration.clock.instant
        while let top = due.peek, top.at <= now {
            due.pop()
            guard let item = held[top.payload], item.decideAt == top.at else { continue }
            decide(top.payload, item, now: now, connection: connection)
        }
    }

    // MARK: Flow

    private func receive(_ question: GuardianQuestion, guardian: String, trace: TraceContext?) {
        let key = HeldKey(guardian: guardian, question: question.question.id)
        guard held[key] == nil else { return }
        // The time is read before the event: a test that drives the clock on `.received` moves it after this.
        let now = configuration.clock.instant
        let date = configuration.clock.now
        onEvent(.received(guardian: guardian, question: key.question))
        if configuration.answerAfterExpiry {
            schedule(
                key,
                Held(
                    question: question,
                    receivedAt: date,
                    trace: trace,
                    decideAt: afterExpiry(question, now: now, date: date)
                )
            )
            return
        }
        if question.question.isExpired(at: date) {
            drop(key, why: "expired")
            return
        }
        schedule(
            key,
            Held(question: question, receivedAt: date, trace: trace, decideAt: whenToDecide(guardian, now: now))
        )
    }

    private func close(_ closed: QuestionClosed, guardian: String) {
        let key = HeldKey(guardian: guardian, question: closed.questionID)
        guard var item = held[key] else { return }
        if configuration.answerAfterExpiry && closed.reason == .expired {
            // Checker tests: answer now that the broker says it expired.
            item.decideAt = configuration.clock.instant
            schedule(key, item)
            return
        }
        drop(key, why: "closed-\(closed.reason.rawValue)")
    }

    private func decide(_ key: HeldKey, _ item: Held, now: ContinuousClock.Instant, connection: WorkerConnection) {
        guard var guardian = guardians[key.guardian] else { return }
        let date = configuration.clock.now
        let question = item.question.question
        var choice: PermissionChoice?
        let deadline = item.question.expiresAt ?? question.expirationDate
        if configuration.answerAfterExpiry {
            if let deadline, date < deadline {
                var later = item
                later.decideAt = afterExpiry(item.question, now: now, date: date)
                schedule(key, later)
                return
            }
            choice = guardian.setup.policy.choice(for: question, random: &guardian.decisions) ?? question.defaultChoice
        } else {
            if let offline = guardian.setup.offline, offline.offline(at: now - start) != nil {
                var later = item
                later.decideAt = whenToDecide(key.guardian, now: now)
                schedule(key, later)
                return
            }
            if let deadline, date >= deadline {
                drop(key, why: "expired")
                return
            }
            choice = guardian.setup.policy.choice(for: question, random: &guardian.decisions)
        }
        guardians[key.guardian] = guardian
        held[key] = nil
        guard let choice else {
            drop(key, why: "never")
            return
        }
        let id = connection.send(
            GuardianAnswer(questionID: key.question, choiceID: choice.id),
            from: "guardian/\(key.guardian)",
            to: "broker",
            trace: item.trace
        )
        attempts[id] = GuardianAnswerRecord(
            question: key.question,
            guardian: key.guardian,
            family: guardian.setup.family,
            choiceID: choice.id,
            receivedAt: item.receivedAt,
            answeredAt: date,
            result: "",
            expiresAt: deadline
        )
        logger.debug(
            "answered",
            metadata: ["guardian": "\(key.guardian)", "question": "\(key.question)", "choice": "\(choice.id)"]
        )
        onEvent(.answered(guardian: key.guardian, question: key.question, choiceID: choice.id))
    }

    /// After the think time, counted from when the guardian is back if it is offline now.
    private func whenToDecide(_ id: String, now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        guard var guardian = guardians[id] else { return now }
        var at = now
        if let offline = guardian.setup.offline, let left = offline.offline(at: now - start) { at = now + left }
        at += guardian.setup.think.sample(using: &guardian.thinking)
        guardians[id] = guardian
        return at
    }

    /// Just after the question's deadline (the broker's, else its expiration date); `nil` (wait for `closed`) when
    /// it has neither.
    private func afterExpiry(_ question: GuardianQuestion, now: ContinuousClock.Instant, date: Date) -> ContinuousClock
        .Instant?
    {
        guard let expiry = question.expiresAt ?? question.question.expirationDate else { return nil }
        let left = max(0, expiry.timeIntervalSince(date))
        return now + Duration(seconds: left, rounding: .towardZero) + .milliseconds(1)
    }

    private func schedule(_ key: HeldKey, _ item: Held) {
        held[key] = item
        if let at = item.decideAt { due.push(at, key) }
    }

    private func drop(_ key: HeldKey, why: String) {
        held[key] = nil
        logger.debug(
            "question dropped",
            metadata: ["guardian": "\(key.guardian)", "question": "\(key.question)", "why": "\(why)"]
        )
        onEvent(.dropped(guardian: key.guardian, question: key.question, why: why))
    }

    private func finish(_ id: MessageID, result: String) {
        guard var record = attempts.removeValue(forKey: id) else { return }
        record.result = result
        records?.write(record)
        onEvent(.answerResult(record))
    }
}
