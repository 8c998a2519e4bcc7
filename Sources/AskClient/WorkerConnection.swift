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
    /// How soon a SEND refused with `moving` goes again.
    static let movingPause: Duration = .milliseconds(100)
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
        if root == nil { handler?.unregistered(self) }
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
    /// What the connection counted so far (its connections to the brokers of moved families included).
    public var counters: WorkerCounters { legs.reduce(ownCounters) { $0 + $1.ownCounters } }
    /// What the connection counted so far.
    private var ownCounters = WorkerCounters()
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
        /// The sending address: a SEND goes with its family when the family moves to another broker.
        var from: String
    }

    // MARK: Families that moved (docs/scaling.md, "Rebalancing")

    /// What this connection registers: its configuration's claims, less those of families that moved away, plus
    /// (on a leg) those of families that moved to its broker.
    private var claims: [EndpointClaim]
    /// The connection whose thread drives this one, on a leg; `nil` on the connection a runtime started.
    private weak var root: WorkerConnection?
    /// On the root: a connection to each broker that families moved to, driven by this connection's loop.
    private var legs: [WorkerConnection] = []
    /// On the root: where each moved family's addresses are registered now (absent: with the root).
    private var legOfFamily: [String: WorkerConnection] = [:]
    /// On the root: the family of each claimed address.
    private var familyOfAddress: [String: String] = [:]
    /// On the root: set when a leg was added or replaced its socket, so the loop polls the new one.
    private var legsChanged = false
    /// On the root: the broker list of the latest WELCOME that had one (a broker given a list by
    /// `askrelay rebalance`): where a connection whose broker stopped answering asks for its families.
    private var knownBrokers: [BrokerEntry] = []
    /// On the root: the next of `knownBrokers` to ask.
    private var nextFallback = 0
    /// Every family of this connection went to other brokers: its socket is disconnected, so it stops reconnecting
    /// (and resolving the host name of) a broker that may be gone for good, until a family comes back.
    private var dormant = false
    /// The number of the latest HELLO (its `attempt`). A WELCOME naming an earlier one registered that HELLO's
    /// claims, which may not be the current ones (a family followed elsewhere since): the latest one's answer
    /// decides.
    private var helloAttempt = 0
    /// This connection's libzmq I/O thread (an affinity mask), the next of the context's at its start and kept by
    /// every socket it makes: a connect resolves the broker's name on that thread, so a lookup that hangs stalls no
    /// connection to another broker, and a socket made again while one hangs queues behind it instead of taking
    /// (and blocking) another thread.
    let ioThread: UInt64

    init(configuration: WorkerConfiguration, logger: AskLogger, context: ZMQContext, inbox: WorkerInbox) throws {
        self.configuration = configuration
        self.logger = logger
        self.context = context
        ioThread = context.nextIOThread()
        self.inbox = inbox
        trace = configuration.traceLog
        seen = RecentSet(capacity: max(1, configuration.dedupCapacity))
        claims = configuration.endpoints
        for claim in configuration.endpoints {
            if let family = claim.family { familyOfAddress[claim.address] = family }
        }
        (socket, monitor) = try Self.makeSocket(configuration, context: context, ioThread: ioThread)
    }

    /// A socket for `configuration`'s broker, on the I/O thread `ioThread` (a ``SocketOption/affinity`` mask).
    static func makeSocket(_ configuration: WorkerConfiguration, context: ZMQContext, ioThread: UInt64) throws -> (
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
        try socket.set(.affinity, ioThread)
        if let curve = configuration.curve { try socket.makeCurveClient(curve.keys, serverKey: curve.serverKey) }
        try socket.connect(configuration.broker)
        return (socket, monitor)
    }

    /// Serves until stopped. Runs on the connection's own thread.
    func run(handler: any WorkerHandler) throws {
        self.handler = handler
        sendHello()
        var poller = ZMQPoller()
        var socketIndex = 0
        var wakeIndex = 0
        var monitorIndex = 0
        /// Each leg's socket and monitor index in `poller`.
        var legIndexes: [(socket: Int, monitor: Int)] = []
        socketReplaced = true
        while !stopping {
            if socketReplaced || legsChanged || legs.contains(where: \.socketReplaced) {
                socketReplaced = false
                legsChanged = false
                poller = ZMQPoller()
                socketIndex = poller.add(socket)
                wakeIndex = poller.add(fileDescriptor: inbox.wake.readDescriptor)
                monitorIndex = poller.add(monitor.socket)
                legIndexes = legs.map { leg in
                    leg.socketReplaced = false
                    return (poller.add(leg.socket), poller.add(leg.monitor.socket))
                }
            }
            try poller.poll(timeoutMilliseconds: inbox.hasWork ? 0 : 50)
            if poller.isReady(wakeIndex) { inbox.wake.drain() }
            inbox.run(self, handler)
            if poller.isReady(socketIndex) { try readAvailable() }
            if poller.isReady(monitorIndex) { try readMonitor() }
            for (leg, indexes) in zip(legs, legIndexes) {
                if poller.isReady(indexes.socket) { try leg.readAvailable() }
                if poller.isReady(indexes.monitor) { try leg.readMonitor() }
            }
            // Timers first: a handler's tick may send a reply that carries the ACK ids of this turn's deliveries.
            try timers()
            for leg in legs { try leg.timers() }
            flushAcks()
            for leg in legs { leg.flushAcks() }
            // After each batch: a killed worker loses at most the lines of the turn it was in.
            trace?.flush()
        }
        trace?.flush()
        if failure != nil { return }
        for connection in [self] + legs {
            connection.output.removeAll()
            WireEncoder.bye(reason: "worker stopping", into: &connection.output)
            _ = try? connection.socket.send(connection.output, .dontWait)
        }
    }

    /// Reads what the socket holds (at most 512 messages a turn).
    private func readAvailable() throws {
        for _ in 0..<512 {
            guard try socket.receive(into: &input, .dontWait) else { break }
            handleInput()
        }
    }

    /// Registers `family`'s addresses with `broker` (it moved there): they leave `connection`'s claims, with the
    /// SENDs from them that were not acknowledged, and join the root's or a leg's. Called on the root.
    private func follow(family: String, to broker: BrokerEntry, from connection: WorkerConnection) {
        let moving = connection.claims.filter { $0.family == family }
        guard !moving.isEmpty else { return }
        let addresses = Set(moving.map(\.address))
        connection.claims.removeAll { $0.family == family }
        var sends: [(MessageID, PendingSend)] = []
        for id in connection.outstandingOrder {
            guard let pending = connection.outstanding[id], addresses.contains(pending.from) else { continue }
            connection.outstanding[id] = nil
            sends.append((id, pending))
        }
        let target: WorkerConnection
        if broker.endpoint == configuration.broker {
            target = self
        } else if let leg = legs.first(where: { $0.configuration.broker == broker.endpoint }) {
            target = leg
        } else {
            var legConfiguration = configuration
            legConfiguration.broker = broker.endpoint
            legConfiguration.endpoints = []
            do {
                let leg = try WorkerConnection(
                    configuration: legConfiguration,
                    logger: logger,
                    context: context,
                    inbox: inbox
                )
                leg.root = self
                leg.handler = handler
                legs.append(leg)
                legsChanged = true
                target = leg
            } catch {
                logger.error(
                    "cannot connect to the broker a family moved to",
                    metadata: ["family": "\(family)", "broker": "\(broker)", "error": "\(error)"]
                )
                connection.claims += moving
                for (id, pending) in sends { connection.outstanding[id] = pending }
                return
            }
        }
        target.claims += moving
        // A full liveness window for the broker it goes to, before that one too counts as silent.
        target.lastHeard = .now
        for (id, pending) in sends {
            target.outstanding[id] = pending
            target.outstandingOrder.append(id)
        }
        legOfFamily[family] = target === self ? nil : target
        logger.notice(
            "family moved to another broker; following it",
            metadata: [
                "family": "\(family)", "broker": "\(broker)", "addresses": "\(moving.count)",
                "unacknowledged": "\(sends.count)",
            ]
        )
        // Both register again with their new claims (a live session is replaced by the broker, its deliveries
        // requeued); one left without claims says BYE and disconnects until a family comes back.
        for side in [connection, target] {
            side.loseRegistration()
            side.updateDormancy()
            side.sendHello(force: true)
        }
    }

    /// Disconnects a connection left without claims, and connects one that got claims again.
    private func updateDormancy() {
        if claims.isEmpty, !dormant {
            dormant = true
            output.removeAll()
            WireEncoder.bye(reason: "every family of this connection moved to another broker", into: &output)
            transmit(output)
            try? socket.disconnect(configuration.broker)
        } else if !claims.isEmpty, dormant {
            dormant = false
            try? socket.connect(configuration.broker)
            lastHeard = .now
        }
    }

    /// The next broker of the last known list other than `endpoint`, in turn; `nil` without a list.
    private func fallback(excluding endpoint: String) -> BrokerEntry? {
        let others = knownBrokers.filter { $0.endpoint != endpoint }
        guard !others.isEmpty else { return nil }
        nextFallback += 1
        return others[nextFallback % others.count]
    }

    /// The connection that registers `address` now: a leg when its family moved, else the root.
    private func owner(of address: String) -> WorkerConnection {
        let root = self.root ?? self
        guard !root.legOfFamily.isEmpty, let family = root.familyOfAddress[address],
            let leg = root.legOfFamily[family]
        else { return root }
        return leg
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
        let owner = owner(of: from)
        if owner !== self {
            return owner.send(from: from, to: to, kind: kind, subject: subject, trace: traceContext, body: body, id: id)
        }
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
        outstanding[id] = PendingSend(frames: frames, lastSent: .now, attempts: 1, from: from)
        outstandingOrder.append(id)
        ownCounters.sent += 1
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
        if let root {
            root.giveUp(error)
            return
        }
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
            ownCounters.malformed += 1
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
            // The answer to an earlier HELLO: the latest one's answer decides.
            if let attempt = welcome.attempt, attempt != helloAttempt { return }
            let first = self.welcome == nil
            isRegistered = true
            silenceBackoff = 1
            addressTakenSince = nil
            lastFailure = nil
            self.welcome = welcome
            if let text = welcome.brokers, let list = try? BrokerList(parsing: text) {
                (root ?? self).knownBrokers = list.entries
            }
            ownCounters.registrations += 1
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
            if root == nil { handler?.registered(self, welcome: welcome) }
        case .heartbeat:
            break
        case .deliver:
            guard let id = parsed.id else { return }
            // ACK ids of our SENDs may ride on a DELIVER (we say carriedAcks in HELLO).
            if parsed.carriesAcks { handleAcks(parsed) }
            if (root ?? self).seen.contains(id) {
                ownCounters.duplicates += 1
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
            ownCounters.delivered += 1
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
                ownCounters.held += 1
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
            if code == .moving, let id = parsed.id, var pending = outstanding[id] {
                // Its family is moving between brokers (docs/scaling.md, "Rebalancing"): sent again shortly, to
                // whichever broker has the family by then; the handler hears nothing of it.
                pending.lastSent = .now - configuration.retryInterval + Self.movingPause
                outstanding[id] = pending
                return
            }
            if let id = parsed.id, outstanding.removeValue(forKey: id) != nil {
                ownCounters.refused += 1
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
            ownCounters.malformed += 1
        }
    }

    /// A NACK while not registered answers our HELLO: a refusal that can never succeed ends the connection;
    /// `address-taken` is retried for ``WorkerConfiguration/addressTakenPatience``; anything else (`busy`, ...)
    /// is retried at the normal pace.
    private func helloRefused(code: ErrorCode?, text: String, reason: String) {
        lastHello = .now  // a refused HELLO is not retried at once
        let now = ContinuousClock.now
        if code == .moved, configuration.followsMoves, let moved = MovedReason.parse(reason) {
            (root ?? self).follow(family: moved.family, to: moved.broker, from: self)
            return
        }
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
            ownCounters.accepted += 1
            if trace != nil { tracedSends[id] = nil }
            handler?.accepted(id, connection: self)
        }
        compactOutstanding()
    }

    private func remember(_ id: MessageID) { (root ?? self).seen.insert(id) }

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
        guard force || now - lastHello >= .milliseconds(500), !claims.isEmpty else { return }
        lastHello = now
        helloAttempt += 1
        var hello = Hello(
            role: configuration.role,
            worker: configuration.worker,
            endpoints: claims,
            window: configuration.window,
            heartbeatMs: configuration.heartbeatInterval.milliseconds,
            carriedAcks: true
        )
        hello.attempt = helloAttempt
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
        if claims.isEmpty {
            // Every family of this connection moved to other brokers: nothing to register, nothing to watch.
            lastHeard = now
        } else if !isRegistered, now - lastHeard > interval * configuration.liveness * silenceBackoff,
            configuration.followsMoves, let fallback = (root ?? self).fallback(excluding: configuration.broker)
        {
            // No session, and the broker stopped answering: it may have been removed from the list (stopped after
            // its families moved). Another broker of the list says where each family is (it serves it, or answers
            // `moved` naming the one that does); the families come back here if it names this one.
            let families = Set(claims.compactMap(\.family)).sorted()
            logger.notice(
                "broker silent; asking another broker of the list where its families are",
                metadata: [
                    "endpoint": "\(configuration.broker)", "asking": "\(fallback)", "families": "\(families.count)",
                ]
            )
            for family in families { (root ?? self).follow(family: family, to: fallback, from: self) }
            lastHeard = now
        } else if now - lastHeard > interval * configuration.liveness * silenceBackoff {
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
            ownCounters.reconnects += 1
            loseRegistration()
            // This turn's ACK ids belong to the session that ended: the broker delivers those messages again, and
            // the dedup set acknowledges them without handling them twice.
            pendingAcks.removeAll()
            // On the same I/O thread: one still blocked in a lookup of this broker's name must not take another.
            (socket, monitor) = try Self.makeSocket(configuration, context: context, ioThread: ioThread)
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
                ownCounters.retries += 1
                transmit(pending.frames)
            }
        }
        if !unencodable.isEmpty {
            let refusals = unencodable
            unencodable.removeAll()
            for (id, error) in refusals {
                ownCounters.refused += 1
                trace?.record(.refused, id: id.uuid, code: error.code.rawValue)
                handler?.refused(id, error: error, connection: self)
            }
        }
        if root == nil { handler?.tick(self, now: now) }
    }
}
