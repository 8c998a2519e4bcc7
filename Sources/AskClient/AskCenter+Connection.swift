import AskBasics
import AskLogging
import AskProtocol
import Foundation

/// The ``AskCenter``'s side of the connection: waiters for `ask.result`, SEND acknowledgements and `limits.reply`,
/// and the response record. Lives on the connection thread; callers reach it through `WorkerRuntime.submit`.
final class AskCenterConnection: WorkerHandler {
    typealias Token = PendingCalls.Token

    struct PendingAsk {
        var child: String
        var question: AnyPermissionQuestion
        var token: Token
        var deadline: ContinuousClock.Instant
        var sendID: MessageID
    }

    struct PendingSheet {
        var token: Token
        var deadline: ContinuousClock.Instant
    }

    struct PendingQuery {
        var handles: [CommunicationHandle]
        var token: Token
        /// From the call, including any wait behind an earlier query of the same child.
        var deadline: ContinuousClock.Instant
        /// Set when the query is on the wire (the head of the child's queue).
        var sendID: MessageID?
    }

    /// What a SEND was for, so its ACK or NACK reaches the right waiter.
    enum SendPurpose {
        case ask(UUID)
        case sheet
        case query(child: String)
        case other
    }

    let options: AskCenter.Options
    let shared: AskCenterShared
    let logger: AskLogger
    let store: ResponseStore
    private var asks: [UUID: PendingAsk] = [:]
    private var sheets: [MessageID: PendingSheet] = [:]
    private var queries: [String: [PendingQuery]] = [:]
    private var purposes: [MessageID: SendPurpose] = [:]
    /// The trace context of each flow asked in this run (docs/protocol.md §5.5): the application's, or the flow's
    /// root. A question asked in an earlier run uses its root. Forgotten when the flow's sheet ends it.
    private var flowTraces: [UUID: TraceContext] = [:]
    private var counters = AskCenterCounters()
    private var lastSweep = ContinuousClock.now
    /// Set while surfaced marks fail: when to retry the waiting responses, and whether the log said it persists.
    private var markFailure: MarkFailure?

    struct MarkFailure {
        var since: ContinuousClock.Instant
        var tries: Int
        var delay: Duration
        var nextTry: ContinuousClock.Instant
        var reported = false

        init(since: ContinuousClock.Instant, tries: Int, delay: Duration) {
            self.since = since
            self.tries = tries
            self.delay = delay
            nextTry = since + delay
        }
    }

    /// Retries of a failed surfaced mark start this soon and back off to `longestRetryDelay`.
    static let firstRetryDelay = Duration.milliseconds(100)
    static let longestRetryDelay = Duration.seconds(2)
    /// Failing this long is logged as an error, once per run of failures.
    static let keepsFailingAfter = Duration.seconds(10)

    var calls: PendingCalls { shared.calls }

    init(storePath: String?, options: AskCenter.Options, shared: AskCenterShared, logger: AskLogger) {
        self.options = options
        self.shared = shared
        self.logger = logger
        do {
            store = try ResponseStore(path: storePath, durability: options.recordDurability)
        } catch {
            // The init opened the same file a moment ago; if it fails now, deduplicate in memory and say so.
            logger.error("response store unavailable; deduplicating in memory only", metadata: ["error": "\(error)"])
            store = try! ResponseStore(path: nil)
        }
    }

    /// The connection loop ended (stopped, or its socket failed) and released its handler: no job will run on this
    /// thread again, so every call still waiting ends now, and every later call at once; every response stream
    /// finishes (one still opening would otherwise wait for a job that never runs).
    deinit {
        calls.close(.connectionEnded)
        shared.hub.finishAll()
    }

    // MARK: Ending calls (each through `calls`, so exactly once)

    private func finishAsk(_ token: Token, _ result: Result<Void, AskError>) {
        guard case .ask(let continuation, _) = calls.take(token) else { return }
        continuation.resume(returning: result)
    }

    private func finishSheet(_ token: Token, _ result: Result<Void, SheetError>) {
        guard case .sheet(let continuation) = calls.take(token) else { return }
        continuation.resume(returning: result)
    }

    private func finishQuery(_ token: Token, _ result: Result<[CommunicationHandle], LimitsQueryError>) {
        guard case .query(let continuation) = calls.take(token) else { return }
        continuation.resume(returning: result)
    }

    // MARK: Operations

    func startAsk(
        _ question: AnyPermissionQuestion,
        child: String,
        trace: TraceContext?,
        token: Token,
        deadline: ContinuousClock.Instant,
        connection: WorkerConnection
    ) {
        // Ended meanwhile (stopped, timed out while the job waited in the inbox): nothing to send.
        guard calls.isPending(token) else { return }
        guard asks[question.id] == nil else {
            finishAsk(token, .failure(.systemError("question \(question.id) is already being asked")))
            return
        }
        let flow = trace ?? .root(question: question.id)
        flowTraces[question.id] = flow
        let sendID = connection.send(AskRequest(question: question), from: "child/\(child)", to: "limits", trace: flow)
        purposes[sendID] = .ask(question.id)
        asks[question.id] = PendingAsk(
            child: child,
            question: question,
            token: token,
            deadline: deadline,
            sendID: sendID
        )
    }

    func startSheet(
        _ action: SheetAction,
        questionID: UUID,
        child: String,
        token: Token,
        deadline: ContinuousClock.Instant,
        connection: WorkerConnection
    ) {
        guard calls.isPending(token) else { return }
        let sendID: MessageID
        // The sheet ends the flow's part on this side: its context is not needed after it.
        let flow = flowTraces.removeValue(forKey: questionID) ?? .root(question: questionID)
        switch action {
        case .send:
            sendID = connection.send(
                SendQuestion(questionID: questionID),
                from: "child/\(child)",
                to: "broker",
                trace: flow
            )
        case .cancel:
            sendID = connection.send(
                CancelQuestion(questionID: questionID),
                from: "child/\(child)",
                to: "broker",
                trace: flow
            )
        }
        purposes[sendID] = .sheet
        sheets[sendID] = PendingSheet(token: token, deadline: deadline)
    }

    func startQuery(
        _ handles: [CommunicationHandle],
        child: String,
        token: Token,
        deadline: ContinuousClock.Instant,
        connection: WorkerConnection
    ) {
        guard calls.isPending(token) else { return }
        queries[child, default: []].append(PendingQuery(handles: handles, token: token, deadline: deadline))
        if queries[child]?.count == 1 { transmitHeadQuery(child: child, connection: connection) }
    }

    private func transmitHeadQuery(child: String, connection: WorkerConnection) {
        // Queries that ended while waiting their turn (timed out, stopped) never go on the wire.
        while let head = queries[child]?.first, head.sendID == nil, !calls.isPending(head.token) {
            queries[child]!.removeFirst()
            if queries[child]!.isEmpty { queries[child] = nil }
        }
        guard var head = queries[child]?.first, head.sendID == nil else { return }
        let sendID = connection.send(
            KnownHandlesQuery(child: child, handles: head.handles),
            from: "child/\(child)",
            to: "limits"
        )
        head.sendID = sendID
        queries[child]![0] = head
        purposes[sendID] = .query(child: child)
    }

    /// Ends the head query of `child` with `result` and puts the next one on the wire.
    private func finishHeadQuery(
        child: String,
        _ result: Result<[CommunicationHandle], LimitsQueryError>,
        connection: WorkerConnection
    ) {
        guard var queue = queries[child], !queue.isEmpty else { return }
        let head = queue.removeFirst()
        queries[child] = queue.isEmpty ? nil : queue
        if let sendID = head.sendID { purposes.removeValue(forKey: sendID) }
        finishQuery(head.token, result)
        transmitHeadQuery(child: child, connection: connection)
    }

    /// Opens a stream subscribed on the hub: it takes the waiting responses it matches, each committed as surfaced
    /// first.
    func openStream(_ token: Int) {
        shared.hub.open(token) { try commitSurfaced($0) }
    }

    /// Commits `questions` as surfaced (called by the hub, under its lock, just before the streams get them).
    /// A failure is logged once per run of failures; the hub keeps the responses waiting and `tick` retries them.
    func commitSurfaced(_ questions: [UUID]) throws {
        do {
            try store.markSurfaced(questions)
        } catch {
            markFailed(error, count: questions.count)
            throw error
        }
        if let failure = markFailure {
            markFailure = nil
            logger.notice(
                "the record marks responses surfaced again; the waiting ones go to their streams",
                metadata: [
                    "record": "\(store.path ?? "memory")", "responses": "\(questions.count)",
                    "failed_tries": "\(failure.tries)",
                ]
            )
        }
    }

    private func markFailed(_ error: any Error, count: Int) {
        let now = ContinuousClock.now
        guard var failure = markFailure else {
            logger.warning(
                "could not mark responses surfaced; they wait and are retried",
                metadata: ["record": "\(store.path ?? "memory")", "responses": "\(count)", "error": "\(error)"]
            )
            markFailure = MarkFailure(since: now, tries: 1, delay: Self.firstRetryDelay)
            return
        }
        failure.tries += 1
        failure.delay = min(failure.delay * 2, Self.longestRetryDelay)
        failure.nextTry = now + failure.delay
        if !failure.reported, now - failure.since >= Self.keepsFailingAfter {
            failure.reported = true
            let message =
                "the response record keeps failing to mark responses surfaced: their streams get nothing until it "
                + "works again (then at once, each response once) or the next start; check the disk under the "
                + "record (free space, I/O errors in the kernel log)"
            logger.error(
                "\(message)",
                metadata: [
                    "record": "\(store.path ?? "memory")", "responses": "\(count)",
                    "failing_for": "\(now - failure.since)", "tries": "\(failure.tries)", "error": "\(error)",
                ]
            )
        }
        markFailure = failure
    }

    func counters(_ connection: WorkerConnection) -> AskCenterCounters {
        var counters = self.counters
        counters.connection = connection.counters
        return counters
    }

    // MARK: WorkerHandler

    func registered(_ connection: WorkerConnection, welcome: Welcome) {
        shared.registered()
    }

    func unregistered(_ connection: WorkerConnection) {
        shared.unregistered()
    }

    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition {
        guard delivery.to.hasPrefix("child/") else {
            return .refuse(WireError(.badAddress, "this worker hosts children only"))
        }
        let child = String(delivery.to.dropFirst("child/".count))
        switch delivery.kind {
        case MessageKind.response.rawValue:
            return deliverResponse(delivery, child: child)
        case MessageKind.askResult.rawValue:
            guard let result = try? AppMessageRegistry.decode(AskResult.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable ask.result"))
            }
            guard let ask = asks.removeValue(forKey: result.questionID) else {
                counters.lateAskResults += 1
                logger.info(
                    "ask.result nobody waits for",
                    metadata: ["question": "\(result.questionID)", "child": "\(child)"]
                )
                return .ack
            }
            purposes.removeValue(forKey: ask.sendID)
            switch result.outcome {
            case .presented: finishAsk(ask.token, .success(()))
            case .refused(let error): finishAsk(ask.token, .failure(error))
            }
            return .ack
        case MessageKind.limitsReply.rawValue:
            guard let reply = try? AppMessageRegistry.decode(KnownHandlesReply.self, from: delivery.body) else {
                return .refuse(WireError(.invalidJSON, "unreadable limits.reply"))
            }
            guard let head = queries[child]?.first, head.sendID != nil else {
                counters.staleReplies += 1
                logger.info("limits.reply with no query outstanding", metadata: ["child": "\(child)"])
                return .ack
            }
            let asked = Set(head.handles.map(\.normalized))
            guard reply.known.allSatisfy({ asked.contains($0.normalized) }) else {
                counters.staleReplies += 1
                logger.info(
                    "limits.reply names handles not asked about; ignored as stale",
                    metadata: ["child": "\(child)"]
                )
                return .ack
            }
            // Answer in the caller's spelling.
            let known = Set(reply.known.map(\.normalized))
            finishHeadQuery(
                child: child,
                .success(head.handles.filter { known.contains($0.normalized) }),
                connection: connection
            )
            return .ack
        default:
            logger.debug("ignoring delivery", metadata: ["kind": "\(delivery.kind)", "to": "\(delivery.to)"])
            return .ack
        }
    }

    private func deliverResponse(_ delivery: Delivery, child: String) -> DeliveryDisposition {
        guard let response = try? AppMessageRegistry.decode(AnyPermissionResponse.self, from: delivery.body) else {
            return .refuse(WireError(.invalidJSON, "unreadable response"))
        }
        let delivered = DeliveredResponse(child: child, response: response)
        let isNew: Bool
        do {
            isNew = try store.record(delivered, body: delivery.body, now: Date())
        } catch {
            // Not recorded, so not acknowledged: the broker delivers it again later.
            logger.error(
                "could not record a response; holding it",
                metadata: ["question": "\(response.question.id)", "error": "\(error)"]
            )
            return .hold
        }
        guard isNew else {
            counters.responsesDuplicate += 1
            logger.debug(
                "duplicate response dropped",
                metadata: ["question": "\(response.question.id)", "child": "\(child)"]
            )
            return .ack
        }
        counters.responsesSurfaced += 1
        // Marked surfaced (committed) before a stream sees it, not after.
        shared.hub.publish(delivered) { try commitSurfaced($0) }
        return .ack
    }

    func accepted(_ id: MessageID, connection: WorkerConnection) {
        guard let purpose = purposes.removeValue(forKey: id) else { return }
        if case .sheet = purpose, let sheet = sheets.removeValue(forKey: id) {
            finishSheet(sheet.token, .success(()))
        }
    }

    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) {
        guard let purpose = purposes.removeValue(forKey: id) else { return }
        switch purpose {
        case .ask(let questionID):
            guard let ask = asks.removeValue(forKey: questionID) else { return }
            let askError: AskError =
                error.code == .invalidQuestion
                ? .invalidQuestion(Self.invalidReason(error))
                : .systemError("\(error.code.rawValue): \(error.reason)")
            finishAsk(ask.token, .failure(askError))
        case .sheet:
            if let sheet = sheets.removeValue(forKey: id) {
                finishSheet(sheet.token, .failure(.refused(code: error.code, reason: error.reason)))
            }
        case .query(let child):
            guard queries[child]?.first?.sendID == id else { return }
            finishHeadQuery(
                child: child,
                .failure(.refused(code: error.code, reason: error.reason)),
                connection: connection
            )
        case .other:
            break
        }
    }

    func tick(_ connection: WorkerConnection, now: ContinuousClock.Instant) {
        guard now - lastSweep >= .milliseconds(50) else { return }
        lastSweep = now
        if let failure = markFailure, now >= failure.nextTry {
            // Nothing waits for a stream any more (its stream closed): nothing to retry.
            if shared.hub.retry(commit: { try commitSurfaced($0) }) == .nothing { markFailure = nil }
        }
        if connection.isRegistered {
            let silence = now - connection.lastHeard
            shared.heardFromBroker(at: Date().addingTimeInterval(-silence.seconds))
        }
        // The watchdog of `calls` ends a call at its deadline even if this thread is busy or gone; here the
        // connection forgets what timed out (whichever side ended it), and cancels a timed-out ask at the broker.
        for (questionID, ask) in asks where ask.deadline <= now || !calls.isPending(ask.token) {
            asks.removeValue(forKey: questionID)
            purposes.removeValue(forKey: ask.sendID)
            // The limits service may still present it later; cancel so it cannot linger presented.
            let flow = flowTraces.removeValue(forKey: questionID) ?? .root(question: questionID)
            purposes[
                connection.send(
                    CancelQuestion(questionID: questionID),
                    from: "child/\(ask.child)",
                    to: "broker",
                    trace: flow
                )
            ] = .other
            let message = "ask timed out after \(options.askTimeout) without an ask.result"
            finishAsk(ask.token, .failure(.systemError(message)))
        }
        for (id, sheet) in sheets where sheet.deadline <= now || !calls.isPending(sheet.token) {
            sheets.removeValue(forKey: id)
            purposes.removeValue(forKey: id)
            finishSheet(sheet.token, .failure(.timedOut))
        }
        for (child, queue) in queries {
            if let head = queue.first, head.deadline <= now || !calls.isPending(head.token) {
                finishHeadQuery(child: child, .failure(.timedOut), connection: connection)
            }
            // Queries still waiting their turn that timed out are dropped when they reach the head.
        }
    }

    /// The structured reason of a broker `invalid-question` refusal: its reason frame is the reason's JSON
    /// (docs/protocol.md §7.2). A reason frame that is not that JSON (a broker that breaks the rule) is kept whole
    /// as the message of a `refused-by-broker` reason, never parsed as text.
    static func invalidReason(_ error: WireError) -> InvalidQuestionReason {
        error.invalidQuestionReason
            ?? InvalidQuestionReason(field: "question", code: "refused-by-broker", message: error.reason)
    }
}
