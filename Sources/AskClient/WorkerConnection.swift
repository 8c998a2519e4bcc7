import AskBasics
import AskLogging
import AskProtocol
import Foundation
import Synchronization
internal import ZeroMQ

/// The worker side of the protocol over one DEALER socket, on one thread: registration, heartbeats, reconnects,
/// SEND retries until acknowledged, deduplicated deliveries, batched ACKs.
///
/// Not thread-safe: it lives on its thread, and other threads reach it only through ``WorkerRuntime`` (`submit`,
/// `stop`). Deliveries reach the handler at most once per message id within ``WorkerConfiguration/dedupCapacity``
/// ids (the broker redelivers what was not acknowledged); a SEND is retried with its id until the broker answers.
public final class WorkerConnection {
    /// What it was started with.
    public let configuration: WorkerConfiguration
    let logger: AskLogger
    let context: ZMQContext
    private var socket: ZMQSocket
    /// The socket's monitor, read for why a connection gets no session (``HandshakeDiagnosis``).
    private var monitor: SocketMonitor
    private var diagnosis = HandshakeDiagnosis()
    /// The latest handshake failure of the current socket, and which causes the log has explained.
    private var lastFailure: HandshakeFailure?
    private var explainer = HandshakeExplainer()
    /// Multiplies the silence that makes the connection start over on a fresh socket: doubled at each fresh
    /// socket that got no session, back to 1 at WELCOME.
    private var silenceBackoff = 1
    static let maxSilenceBackoff = 8
    /// When the broker first answered `address-taken` to this round of HELLOs.
    private var addressTakenSince: ContinuousClock.Instant?
    /// Set when the connection gives up; `run` returns and the handler hears ``WorkerHandler/ended(_:failure:)``.
    public private(set) var failure: WorkerConnectionError?
    private var handler: (any WorkerHandler)?
    private let inbox: WorkerInbox

    /// Whether the connection holds a session (after WELCOME, until it is lost).
    public private(set) var isRegistered = false

    /// Marks the session lost and tells the handler once.
    private func loseRegistration() {
        guard isRegistered else { return }
        isRegistered = false
        handler?.unregistered(self)
    }
    /// The broker's latest WELCOME.
    public private(set) var welcome: Welcome?
    /// When the broker was last heard from (any message, heartbeats included).
    public private(set) var lastHeard = ContinuousClock.now
    private var lastSent = ContinuousClock.now
    private var lastHello = ContinuousClock.now - .seconds(3600)
    private var outstanding: [MessageID: PendingSend] = [:]
    private var outstandingOrder: [MessageID] = []
    private var pendingAcks: [MessageID] = []
    private var seen: RecentSet<MessageID>
    private var input = Multipart()
    private var output = Multipart()
    private var stopping = false
    private var socketReplaced = false
    /// SENDs whose body could not be encoded, refused to the handler at the next turn.
    private var unencodable: [(MessageID, WireError)] = []
    /// What the connection counted so far.
    public private(set) var counters = WorkerCounters()
    /// ``WorkerConfiguration/traceLog``: `nil` makes every trace point one `nil` check.
    private let trace: TraceLog?
    /// With a trace log: what each outstanding SEND is, for the `refused` line of a NACK.
    private var tracedSends: [MessageID: TracedSend] = [:]

    struct TracedSend {
        var kind: String
        var subject: MessageID?
        var from: String
        var to: String
        var trace: TraceContext?
    }

    struct PendingSend {
        var frames: Multipart
        var lastSent: ContinuousClock.Instant
        var attempts: Int
    }

    init(configuration: WorkerConfiguration, logger: AskLogger, context: ZMQContext, inbox: WorkerInbox) throws {
        self.configuration = configuration
        self.logger = logger
        self.context = context
        self.inbox = inbox
        trace = configuration.traceLog
        seen = RecentSet(capacity: max(1, configuration.dedupCapacity))
        (socket, monitor) = try Self.makeSocket(configuration, context: context)
    }

    static func makeSocket(_ configuration: WorkerConfiguration, context: ZMQContext) throws -> (
        ZMQSocket, SocketMonitor
    ) {
        let socket = try context.socket(.dealer)
        // Before connect, so the first attempt is reported too.
        let monitor = try socket.monitor(HandshakeDiagnosis.events)
        try socket.set(.linger, 0)
        try socket.set(.sendHighWaterMark, 0)
        try socket.set(.receiveHighWaterMark, 0)
        try socket.set(.reconnectInterval, 100)
        try socket.set(.reconnectIntervalMax, 1000)
        if let curve = configuration.curve { try socket.makeCurveClient(curve.keys, serverKey: curve.serverKey) }
        try socket.connect(configuration.broker)
        return (socket, monitor)
    }

    /// Serves until stopped. Runs on the connection's own thread.
    func run(handler: any WorkerHandler) throws {
        self.handler = handler
        sendHello()
        var poller = ZMQPoller()
        var socketIndex = poller.add(socket)
        var wakeIndex = poller.add(fileDescriptor: inbox.wake.readDescriptor)
        var monitorIndex = poller.add(monitor.socket)
        while !stopping {
            if socketReplaced {
                socketReplaced = false
                poller = ZMQPoller()
                socketIndex = poller.add(socket)
                wakeIndex = poller.add(fileDescriptor: inbox.wake.readDescriptor)
                monitorIndex = poller.add(monitor.socket)
            }
            try poller.poll(timeoutMilliseconds: inbox.hasWork ? 0 : 50)
            if poller.isReady(wakeIndex) { inbox.wake.drain() }
            inbox.run(self, handler)
            if poller.isReady(socketIndex) {
                for _ in 0..<512 {
                    guard try socket.receive(into: &input, .dontWait) else { break }
                    handleInput()
                }
            }
            if poller.isReady(monitorIndex) { try readMonitor() }
            // Timers first: a handler's tick may send a reply that carries the ACK ids of this turn's deliveries.
            try timers()
            flushAcks()
            // After each batch: a killed worker loses at most the lines of the turn it was in.
            trace?.flush()
        }
        trace?.flush()
        if failure != nil { return }
        output.removeAll()
        WireEncoder.bye(reason: "worker stopping", into: &output)
        _ = try? socket.send(output, .dontWait)
    }

    // MARK: API for the handler (connection thread only)

    /// Sends an application message; it is retried with the same id until the broker acknowledges or refuses it.
    /// - Returns: the message id.
    @discardableResult
    public func send(
        from: String,
        to: String,
        kind: String,
        subject: MessageID? = nil,
        trace traceContext: TraceContext? = nil,
        body: [UInt8],
        id: MessageID = .random()
    ) -> MessageID {
        var frames = Multipart()
        WireEncoder.message(
            .send,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            trace: traceContext,
            body: body,
            into: &frames
        )
        outstanding[id] = PendingSend(frames: frames, lastSent: .now, attempts: 1)
        outstandingOrder.append(id)
        counters.sent += 1
        if let trace {
            trace.record(
                .sent,
                kind: kind,
                question: subject?.uuid,
                id: id.uuid,
                from: from,
                to: to,
                trace: traceContext
            )
            tracedSends[id] = TracedSend(kind: kind, subject: subject, from: from, to: to, trace: traceContext)
        }
        guard isRegistered else { return id }
        if pendingAcks.isEmpty || welcome?.carriedAcks != true {
            transmit(frames)
        } else {
            // The first transmission acknowledges the deliveries handled so far (retries carry no ACK ids).
            let carried = min(pendingAcks.count, Wire.Limits.standard.maxAckIDs)
            output.removeAll()
            WireEncoder.message(
                .send,
                id: id,
                from: from,
                to: to,
                kind: kind,
                subject: subject,
                trace: traceContext,
                acks: pendingAcks[..<carried],
                body: body,
                into: &output
            )
            transmit(output)
            pendingAcks.removeFirst(carried)
        }
        return id
    }

    /// Sends an application message body. One that cannot be encoded is never sent (an empty body would be refused
    /// by the peer): it is logged, and refused to the handler (``WorkerHandler/refused(_:error:connection:)``,
    /// `invalid-json`) at the next loop turn, as a broker refusal would be.
    @discardableResult
    public func send<M: AppMessage>(_ message: M, from: String, to: String, trace: TraceContext? = nil) -> MessageID {
        let body: [UInt8]
        do { body = try WireJSON.encodeBody(message, code: .invalidJSON) } catch {
            let id = MessageID.random()
            logger.error(
                "message not sent: its body cannot be encoded",
                metadata: ["kind": "\(M.kind)", "to": "\(to)", "error": "\(error.reason)"]
            )
            unencodable.append((id, error))
            return id
        }
        return send(
            from: from,
            to: to,
            kind: M.kind,
            subject: message.subject.map { MessageID(uuid: $0) },
            trace: trace,
            body: body
        )
    }

    /// SENDs not yet acknowledged or refused.
    public var outstandingCount: Int { outstanding.count }

    /// Ends the loop at its next turn (it says BYE first).
    public func stop() { stopping = true }

    /// Ends the connection for good (logged once, as an error).
    private func giveUp(_ error: WorkerConnectionError) {
        guard failure == nil else { return }
        logger.error("connection refused for good; not retrying", metadata: ["reason": "\(error.message)"])
        failure = error
        stopping = true
    }

    // MARK: Monitor

    private func readMonitor() throws {
        while let event = try monitor.next(timeoutMilliseconds: 0) {
            guard let found = diagnosis.read(event) else {
                if event.event == .handshakeSucceeded { lastFailure = nil }
                continue
            }
            lastFailure = found
            if found.kind == .keyRefused {
                let key = configuration.curve.map { " (public key \($0.keys.publicKey))" } ?? ""
                giveUp(
                    WorkerConnectionError(
                        code: nil,
                        "the broker at \(configuration.broker) refused this worker's CURVE key\(key) at the handshake: "
                            + "it is not in the broker's principals file, or it is revoked; check --curve-key, and add the key "
                            + "with 'askrelay keys add' (or give a key that is listed)"
                    )
                )
            }
        }
    }

    /// What to check for a handshake failure, in one sentence.
    func explanation(_ failure: HandshakeFailure) -> String {
        let broker = configuration.broker
        let curve = configuration.curve != nil
        switch failure.kind {
        case .unreachable:
            return "nothing accepts connections at \(broker): check that the broker runs and that --broker is its "
                + "endpoint"
        case .keyRefused:
            return "the broker at \(broker) refused this worker's CURVE key: check --curve-key and the principals file"
        case .mechanismMismatch:
            return curve
                ? "the broker at \(broker) does not run CURVE but this worker does: drop --curve-key and --broker-key, "
                    + "or start the broker with --curve-secret-file and --principals"
                : "the broker at \(broker) runs CURVE: give this worker --curve-key and --broker-key "
                    + "(askrelay keys generate)"
        case .noHandshake:
            return curve
                ? "the broker at \(broker) drops the CURVE handshake: --broker-key is probably not its public key "
                    + "(compare it with broker.public of the broker's keys)"
                : "\(broker) accepts connections but drops them before the handshake: is it an AskRelay broker?"
        case .protocolError:
            return "the handshake with \(broker) failed (\(failure)): check that both sides run the same AskRelay "
                + "and libzmq"
        }
    }

    // MARK: Input

    private func handleInput() {
        let parsed: ParsedFrames
        do {
            parsed = try WireParser.parse(input, base: 0)
        } catch {
            counters.malformed += 1
            logger.warning(
                "malformed message from broker",
                metadata: ["code": "\(error.code.rawValue)", "reason": "\(error.reason)"]
            )
            return
        }
        lastHeard = .now
        switch parsed.command {
        case .welcome:
            guard
                let welcome = try? input.withFrame(
                    parsed.bodyFrame,
                    { try SessionJSON.decode(Welcome.self, from: $0.bindMemory(to: UInt8.self)) }
                )
            else {
                logger.warning("unreadable WELCOME")
                return
            }
            let first = self.welcome == nil
            isRegistered = true
            silenceBackoff = 1
            addressTakenSince = nil
            lastFailure = nil
            self.welcome = welcome
            counters.registrations += 1
            logger.log(
                level: first ? .info : .notice,
                "registered",
                metadata: ["session": "\(welcome.session)", "broker": "\(welcome.broker)"]
            )
            // Everything not yet acknowledged goes again, in order, with the same ids.
            for id in outstandingOrder {
                guard var pending = outstanding[id] else { continue }
                pending.lastSent = .now
                outstanding[id] = pending
                transmit(pending.frames)
            }
            handler?.registered(self, welcome: welcome)
        case .heartbeat:
            break
        case .deliver:
            guard let id = parsed.id else { return }
            // ACK ids of our SENDs may ride on a DELIVER (we say carriedAcks in HELLO).
            if parsed.carriesAcks { handleAcks(parsed) }
            if seen.contains(id) {
                counters.duplicates += 1
                pendingAcks.append(id)
                return
            }
            let delivery = Delivery(
                id: id,
                from: input.from(parsed),
                to: input.to(parsed),
                kind: input.kind(parsed),
                subject: parsed.subject,
                trace: parsed.trace,
                body: Array(input[parsed.bodyFrame])
            )
            counters.delivered += 1
            if trace != nil { traceDelivery(.received, delivery) }
            switch handler?.deliver(delivery, connection: self) ?? .ack {
            case .ack:
                remember(id)
                pendingAcks.append(id)
                if trace != nil { traceDelivery(.acked, delivery) }
            case .refuse(let error):
                remember(id)
                output.removeAll()
                WireEncoder.nack(id: id, error, into: &output)
                transmit(output)
                if trace != nil { traceDelivery(.refused, delivery, code: error.code.rawValue) }
            case .hold:
                counters.held += 1
            }
        case .ack:
            handleAcks(parsed)
        case .nack:
            let code = ErrorCode(rawValue: input.string(parsed.codeFrame))
            let reason = input.string(parsed.reasonFrame)
            if code == .notRegistered {
                loseRegistration()
                sendHello(force: false)
                return
            }
            if let id = parsed.id, outstanding.removeValue(forKey: id) != nil {
                counters.refused += 1
                if let trace {
                    let send = tracedSends.removeValue(forKey: id)
                    trace.record(
                        .refused,
                        kind: send?.kind,
                        question: send?.subject?.uuid,
                        id: id.uuid,
                        from: send?.from,
                        to: send?.to,
                        code: input.string(parsed.codeFrame),
                        trace: send?.trace
                    )
                }
                handler?.refused(id, error: WireError(code ?? .unknownCommand, reason), connection: self)
                compactOutstanding()
            } else if !isRegistered {
                helloRefused(code: code, text: input.string(parsed.codeFrame), reason: reason)
            } else if parsed.id == nil {
                logger.warning(
                    "broker refused",
                    metadata: ["code": "\(input.string(parsed.codeFrame))", "reason": "\(reason)"]
                )
            }
        case .bye:
            logger.notice("broker said bye; registering again")
            loseRegistration()
            sendHello(force: true)
        case .hello, .send:
            counters.malformed += 1
        }
    }

    /// A NACK while not registered answers our HELLO: a refusal that can never succeed ends the connection;
    /// `address-taken` is retried for ``WorkerConfiguration/addressTakenPatience``; anything else (`busy`, ...)
    /// is retried at the normal pace.
    private func helloRefused(code: ErrorCode?, text: String, reason: String) {
        lastHello = .now  // a refused HELLO is not retried at once
        let now = ContinuousClock.now
        if let code, WorkerConnectionError.permanentHelloRefusals.contains(code) {
            giveUp(
                WorkerConnectionError(
                    code: code,
                    "the broker at \(configuration.broker) refused this worker's HELLO (\(code.rawValue): \(reason)); "
                        + "retrying cannot change that: check what this worker serves against its key and the broker's "
                        + "principals"
                )
            )
            return
        }
        if code == .addressTaken {
            let since = addressTakenSince ?? now
            addressTakenSince = since
            if now - since >= configuration.addressTakenPatience {
                giveUp(
                    WorkerConnectionError(
                        code: code,
                        "the broker at \(configuration.broker) still refuses this worker after "
                            + "\(configuration.addressTakenPatience) (address-taken: \(reason)): another live worker serves these addresses; stop it, or give "
                            + "this one other ids"
                    )
                )
                return
            }
            if since == now {
                logger.notice(
                    "addresses served by another session; retrying while it may be ending",
                    metadata: ["reason": "\(reason)", "patience": "\(configuration.addressTakenPatience)"]
                )
            }
            return
        }
        logger.warning("broker refused", metadata: ["code": "\(text)", "reason": "\(reason)"])
    }

    /// The broker accepted these SENDs (an ACK, or the ids a DELIVER carries).
    private func handleAcks(_ parsed: ParsedFrames) {
        for id in input.ackIDs(parsed) {
            guard outstanding.removeValue(forKey: id) != nil else { continue }
            counters.accepted += 1
            if trace != nil { tracedSends[id] = nil }
            handler?.accepted(id, connection: self)
        }
        compactOutstanding()
    }

    private func remember(_ id: MessageID) { seen.insert(id) }

    /// A trace line about a delivery: `received`, `acked` (its ACK goes out this turn) or `refused` (its NACK).
    private func traceDelivery(_ event: TraceEvent, _ delivery: Delivery, code: String? = nil) {
        trace?.record(
            event,
            kind: delivery.kind,
            question: delivery.subject?.uuid,
            id: delivery.id.uuid,
            from: delivery.from,
            to: delivery.to,
            code: code,
            trace: delivery.trace
        )
    }

    private func compactOutstanding() {
        if outstandingOrder.count > 1024 && outstandingOrder.count > outstanding.count * 2 {
            outstandingOrder.removeAll { outstanding[$0] == nil }
        }
    }

    // MARK: Output and timers

    private func transmit(_ frames: Multipart) {
        do {
            if try socket.send(frames, .dontWait) { lastSent = .now }
        } catch {
            logger.error("send to broker failed", metadata: ["error": "\(error)"])
        }
    }

    private func sendHello(force: Bool = true) {
        let now = ContinuousClock.now
        guard force || now - lastHello >= .milliseconds(500) else { return }
        lastHello = now
        let hello = Hello(
            role: configuration.role,
            worker: configuration.worker,
            endpoints: configuration.endpoints,
            window: configuration.window,
            heartbeatMs: configuration.heartbeatInterval.milliseconds,
            carriedAcks: true
        )
        output.removeAll()
        WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &output)
        transmit(output)
    }

    /// Sends the ACK ids that no SEND of this turn carried, at the end of the turn.
    private func flushAcks() {
        guard !pendingAcks.isEmpty else { return }
        var start = 0
        while start < pendingAcks.count {
            let end = min(start + Wire.Limits.standard.maxAckIDs, pendingAcks.count)
            output.removeAll()
            WireEncoder.ack(pendingAcks[start..<end], into: &output)
            transmit(output)
            start = end
        }
        pendingAcks.removeAll(keepingCapacity: true)
    }

    private func timers() throws {
        let now = ContinuousClock.now
        let interval = configuration.heartbeatInterval
        if now - lastHeard > interval * configuration.liveness * silenceBackoff {
            // The broker went silent: start over on a fresh socket (a restarted broker forgot us anyway).
            // While no session comes, each fresh socket gets twice as long as the last (up to 8 windows): a
            // handshake that takes longer than one window (a busy broker, a starved machine) must not be cut
            // off and begun again forever. HELLO still goes every 500 ms on the current socket.
            if !isRegistered, explainer.shouldExplain(lastFailure), let failure = lastFailure {
                // Said once per cause, with what to check; the reconnect lines below carry the kind.
                logger.warning(
                    "no session with the broker",
                    metadata: ["cause": "\(failure.kind.rawValue)", "check": "\(explanation(failure))"]
                )
            }
            if !isRegistered { silenceBackoff = min(silenceBackoff * 2, Self.maxSilenceBackoff) }
            logger.notice(
                "broker silent; reconnecting",
                metadata: [
                    "endpoint": "\(configuration.broker)", "cause": "\(lastFailure?.kind.rawValue ?? "none seen")",
                    "next_wait": "\(interval * configuration.liveness * silenceBackoff)",
                ]
            )
            counters.reconnects += 1
            loseRegistration()
            // This turn's ACK ids belong to the session that ended: the broker delivers those messages again, and
            // the dedup set acknowledges them without handling them twice.
            pendingAcks.removeAll()
            (socket, monitor) = try Self.makeSocket(configuration, context: context)
            diagnosis.socketReplaced()
            socketReplaced = true
            lastHeard = now
            sendHello(force: true)
        } else if !isRegistered {
            sendHello(force: false)
        } else if now - lastSent >= interval {
            output.removeAll()
            WireEncoder.heartbeat(into: &output)
            transmit(output)
        }
        if isRegistered {
            for id in outstandingOrder {
                guard var pending = outstanding[id], now - pending.lastSent >= configuration.retryInterval else {
                    continue
                }
                pending.lastSent = now
                pending.attempts += 1
                outstanding[id] = pending
                counters.retries += 1
                transmit(pending.frames)
            }
        }
        if !unencodable.isEmpty {
            let refusals = unencodable
            unencodable.removeAll()
            for (id, error) in refusals {
                counters.refused += 1
                trace?.record(.refused, id: id.uuid, code: error.code.rawValue)
                handler?.refused(id, error: error, connection: self)
            }
        }
        handler?.tick(self, now: now)
    }
}
