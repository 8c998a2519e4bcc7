import AskBasics
import AskKeys
import AskLogging
import AskMetrics
import AskProtocol
import AskTelemetry
import Foundation
import SQLite
import ZeroMQ

/// The AskRelay broker: one ROUTER socket, one thread, one loop.
///
/// Each loop turn reads a batch of messages, applies them to the in-memory state (sessions, mailboxes, the question
/// ledger) and to the journal's open transaction, commits the journal once, and only then acknowledges what it
/// accepted and delivers what is due. Bodies are never decoded on this path, except for the few kinds the ledger
/// must read.
///
/// One file per step of the turn, in the order ``run()`` calls them:
/// - `Broker.swift`: the stored state, `init`, and the loop (poll, read a batch, finish the turn, timers).
/// - `Broker+Input.swift`: each message read is parsed, validated and dispatched (HELLO, SEND, ACK) or refused.
/// - `Broker+Questions.swift`: the ledger's effects, for the SENDs the ledger must read (ask, answer, cancel,
///   expiry) and the bodies it builds; the ledger itself is `QuestionLedger.swift`.
/// - `Broker+Delivery.swift`: routing into mailboxes (journaled or spilled), pumping them to their owners, ACKs.
/// - `Broker+Turn.swift`: the end of the turn: one journal commit, then deliveries and ACKs; or its withdrawal.
/// - `Broker+Housekeeping.swift`: the timers after each turn: expiry, heartbeats and liveness, redelivery,
///   forgetting old ids and closed questions, stats.
/// - `Broker+Sessions.swift`: ending a session, the limits workers' affinity, forgiving a stall of the loop.
/// - `Broker+Recovery.swift`: rebuilding memory from the journal before the first turn, and the drain at the end.
/// - `Broker+Trace.swift`: the trace lines of `--trace-log` (docs/tracing.md, "Recording").
public final class Broker {
    public let configuration: BrokerConfiguration
    let logger: AskLogger
    let socket: ZMQSocket
    /// The endpoints actually bound (with OS-chosen ports resolved).
    public let boundEndpoints: [String]
    let journal: Journal
    /// This process's claims on the data directory and on every ipc socket path it binds, held for its life.
    let ownership: [OwnerLock]
    public let instanceID = MessageID.random().description.prefix(12).description

    var sessions: [PeerID: Session] = [:]
    /// Open sessions per role (kept as sessions open and end, so the metrics never walk `sessions`).
    var sessionsByRole: [SessionRole: Int] = [:]
    var mailboxes: [String: Mailbox] = [:]
    var inflightIndex: [MessageID: Mailbox] = [:]
    /// Mailboxes to pump at the end of the turn (each once: `Mailbox.isDirty`).
    var dirty: [Mailbox] = []
    /// The spare buffer `dirty` is swapped with while pumping, so neither is reallocated per turn.
    var pumping: [Mailbox] = []
    var sessionsWithAcks: [Session] = []
    var accepted = AcceptedIDs()
    var limitsAffinity: [String: String] = [:]
    var nextSerial = 0
    var nextSeq: Int64 = 1
    /// Messages held in memory, waiting or in flight.
    var totalQueued = 0
    /// Messages in the journal only (``Mailbox/spilled`` summed).
    var totalSpilled = 0
    var stopping = false
    public internal(set) var stats = BrokerStats()
    var ledger: QuestionLedger

    var input = Multipart()
    var output = Multipart()
    let wake: WakeSignal
    /// The time at the start of this loop turn: stamps on the hot path (last heard, last sent, delivered, accepted)
    /// use it instead of reading the clock once per message.
    var turnNow = ContinuousClock.now
    /// Wall-clock time at the start of this loop turn (message creation times, accepted ids): real time, like the
    /// transport's other stamps, also under a driven ``BrokerConfiguration/clock``.
    var turnDate = Date()
    /// Wakes the loop when a driven clock is advanced in this process (`nil` for the real clock).
    let clockWake: WakeSignal?
    /// The clock observer that signals `clockWake` (registered last in `init`, so a failed start leaves none).
    var clockObserver = 0
    var lastHousekeeping = ContinuousClock.now
    var lastAckScan = ContinuousClock.now
    var statsPublisher: StatsPublisher?
    /// The histograms and the HTTP endpoint of `--metrics-endpoint`, when configured.
    var metrics: BrokerMetrics?
    /// CURVE authentication, when configured.
    let authenticator: Authenticator?
    /// `--reached-log`, when configured, and what its situations need to remember (``Broker+Reached.swift``).
    var reached: ReachedCounter
    /// `--trace-log`, when configured (``Broker+Trace.swift``); `nil`: every trace point is one `nil` check.
    let trace: TraceLog?
    /// `--otlp-endpoint`: the trace lines' live export, sent what is held when the broker stops.
    let otlpExport: OTLPLiveExport?
    /// With a trace log and a journal: this turn's journaled envelopes, traced `journaled` once the turn commits.
    var turnTraced: [Envelope] = []
    /// The trace context of each open question's timer-driven messages (docs/protocol.md §5.5): its `send`'s (or,
    /// before the send, its `ask`'s) trace with that message's span as the parent. In memory only; dropped when the
    /// question closes.
    var questionTraces: [MessageID: TraceContext] = [:]
    /// The broker list and the families moving between brokers (``Broker+Moves.swift``).
    var moves = MovesState()
    /// `--admin-endpoint`: a REP socket for `askrelay rebalance`.
    let adminSocket: ZMQSocket?
    /// Test-only crash hooks (`--crash-at`); unarmed unless configured.
    var crashPoints: CrashPoints
    /// Refusal lines per peer (its routing id): a peer repeating bad input gets a few lines, then a count.
    var refusalLog = LogRateLimiter<[UInt8]>()
    /// This turn's journaled envelopes, SENDs accepted and ledger entries as they were before the turn: what
    /// ``withdrawTurn(_:)`` undoes when the commit fails.
    var turnEnvelopes: [Envelope] = []
    var turnAccepted: [(id: MessageID, session: Session)] = []
    var turnLedgerUndo: [MessageID: LedgerEntry?] = [:]
    /// Mailboxes that spilled a message this turn (once per message), undone when the commit fails.
    var turnSpills: [Mailbox] = []
    /// Guardians added to a family roster this turn, taken out of it again when the commit fails.
    var turnGuardians: [(family: String, guardian: String)] = []
    /// Guardians whose roster entry was withdrawn with a failed turn while their session lives on: added again
    /// (memory and journal) in the next turn.
    var rosterRetry: [(family: String, guardian: String)] = []
    /// Journaled copies acknowledged (or dropped) and not yet deleted from the journal. They ride on the next commit
    /// a turn makes anyway, and get a commit of their own only after a delay or at ``deleteBatch`` copies,
    /// so a turn that only read ACKs writes nothing (``BrokerConfiguration/ackedDeleteDelay``).
    var pendingDeletes: [Int64] = []
    /// When the oldest of `pendingDeletes` was collected.
    var pendingDeletesSince: ContinuousClock.Instant?
    /// `journal.writeFailures` when this turn began.
    var turnWriteFailures = 0
    /// Set when a journal write or commit failed with an I/O error: the loop ends with it after the turn.
    var journalIOFailure: JournalError?
    /// What this loop turn did and how long each part took, logged when the turn is slow.
    var turn = TurnProfile()
    /// Whether the loop spins after a turn that read input.
    var spinGovernor = SpinGovernor()

    /// Opens the journal, recovers its state and binds every endpoint. Call ``run()`` on the same thread next.
    /// - Throws: ``ZMQError`` for an endpoint that cannot be bound, or the journal's error.
    public init(configuration: BrokerConfiguration, logger: AskLogger, context: ZMQContext, wake: WakeSignal) throws {
        self.configuration = configuration
        self.logger = logger
        self.wake = wake
        clockWake = configuration.clock.isDriven ? try WakeSignal() : nil
        ownership = try Self.claimOwnership(configuration)
        journal = try Journal(directory: configuration.dataDirectory, durability: configuration.durability)
        ledger = QuestionLedger(configuration: configuration)
        reached = ReachedCounter(log: try configuration.reachedLog.map(ReachedLog.init(path:)))
        otlpExport = try configuration.otlpEndpoint.map {
            try OTLPLiveExport(endpoint: $0, service: configuration.otlpService)
        }
        trace =
            configuration.traceLog != nil || otlpExport != nil
            ? try TraceLog(path: configuration.traceLog, sink: otlpExport?.sink) : nil
        crashPoints = configuration.crashAt
        if crashPoints.isArmed { crashPoints.arm(dataDirectory: configuration.dataDirectory) }
        socket = try context.socket(.router)
        try socket.set(.linger, 0)
        try socket.set(.routerMandatory, true)
        try socket.set(.sendHighWaterMark, 0)
        try socket.set(.receiveHighWaterMark, 0)
        try socket.set(.maxMessageSize, Int64(configuration.limits.maxBody + 4096))
        if let secretFile = configuration.curveSecretFile, let principalsFile = configuration.principalsFile {
            let authenticator = try Authenticator(
                secretKeyFile: secretFile,
                principalsFile: principalsFile,
                context: context,
                logger: logger
            )
            try authenticator.secure(socket)
            self.authenticator = authenticator
        } else {
            authenticator = nil
        }
        var bound: [String] = []
        for endpoint in configuration.endpoints {
            bound.append(try socket.bind(endpoint))
        }
        boundEndpoints = bound
        if let adminEndpoint = configuration.adminEndpoint {
            let admin = try context.socket(.rep)
            try admin.set(.linger, 0)
            _ = try admin.bind(adminEndpoint)
            adminSocket = admin
        } else {
            adminSocket = nil
        }
        if let statsEndpoint = configuration.statsEndpoint {
            statsPublisher = try StatsPublisher(context: context, endpoint: statsEndpoint)
        }
        if let metricsEndpoint = configuration.metricsEndpoint {
            metrics = try BrokerMetrics(endpoint: metricsEndpoint, logger: logger)
        }
        try recover()
        // A scrape right after the ready line sees the recovered state, not an empty page.
        publishMetrics(now: .now)
        if let clockWake { clockObserver = configuration.clock.addAdvanceObserver { clockWake.signal() } }
    }

    deinit { configuration.clock.removeAdvanceObserver(clockObserver) }

    /// One broker per journal and per ipc path: a second broker on either is refused before it touches anything,
    /// with the pid of the one that holds it. (libzmq would otherwise unlink a served ipc socket and bind over it.)
    static func claimOwnership(_ configuration: BrokerConfiguration) throws(OwnerLockError) -> [OwnerLock] {
        var locks: [OwnerLock] = []
        if configuration.durability != .off {
            let what = "the broker's journal folder (--data-dir)"
            locks.append(try OwnerLock.claim(folder: configuration.dataDirectory, name: "broker.lock", what: what))
        }
        for endpoint in configuration.endpoints where endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            // `*` asks libzmq for a fresh unique path; `@` is Linux's abstract namespace, where bind itself refuses.
            guard !path.isEmpty, path != "*", !path.hasPrefix("@") else { continue }
            locks.append(try OwnerLock.claim(socketPath: path, what: "the ipc endpoint"))
        }
        return locks
    }

    // MARK: Loop

    /// Serves until ``WakeSignal/signal()`` is called, then drains: says BYE to every session, commits, returns.
    public func run() throws {
        var poller = ZMQPoller()
        let socketIndex = poller.add(socket)
        let wakeIndex = poller.add(fileDescriptor: wake.readDescriptor)
        let zapIndex = authenticator?.add(to: &poller)
        let clockIndex = clockWake.map { poller.add(fileDescriptor: $0.readDescriptor) }
        let adminIndex = adminSocket.map { poller.add($0) }
        logger.notice(
            "broker ready",
            metadata: [
                "endpoints": "\(boundEndpoints.joined(separator: ","))",
                "durability": "\(configuration.durability.rawValue)",
                "instance": "\(instanceID)", "curve": "\(authenticator != nil)",
            ]
        )
        // The stall check measures from the previous turn: recovery before the first one is not a stall.
        turnNow = .now
        while !stopping {
            let timeout = pollTimeout()
            var ready = 0
            // After a turn that read input, poll without sleeping for up to `spin`: the next message of a busy
            // peer is often microseconds away, and waking a sleeping thread costs more than that. Only while
            // spins pay (``SpinGovernor``): at moderate rates they would run out and burn their length.
            if timeout > 0 && turn.read > 0 && configuration.spin > .zero && spinGovernor.shouldSpin() {
                let until = ContinuousClock.now + configuration.spin
                repeat {
                    ready = try poller.poll(timeoutMilliseconds: 0)
                } while ready == 0 && ContinuousClock.now < until
                spinGovernor.record(caught: ready > 0)
            }
            if ready == 0 { try poller.poll(timeoutMilliseconds: timeout) }
            let previousTurn = turnNow
            turnNow = .now
            // Since the last turn began, more time passed than that turn and a full poll can explain only if the
            // loop did not run (SIGSTOP, a paused VM, CPU starvation) or the last turn was very slow: either way
            // the broker read nothing meanwhile, and silence it could not observe does not count against peers.
            let blind = turnNow - previousTurn - .milliseconds(timeout)
            if blind > configuration.heartbeatInterval { forgiveStall(blind) }
            turnDate = Date()
            turn = TurnProfile()
            if poller.isReady(wakeIndex) {
                wake.drain()
                stopping = true
            }
            // A driven clock was advanced: this turn's timers look at the new time.
            if let clockIndex, poller.isReady(clockIndex) { clockWake?.drain() }
            if let zapIndex, poller.isReady(zapIndex) {
                authenticator?.serve()
            }
            if poller.isReady(socketIndex) {
                try readBatch()
            }
            let handled = ContinuousClock.now
            turn.handling = handled - turnNow
            finishTurn()
            if let adminIndex, let adminSocket, poller.isReady(adminIndex) { try serveAdmin(adminSocket) }
            if let journalIOFailure { throw journalIOFailure }
            let finished = ContinuousClock.now
            turn.finishing = finished - handled
            try timers()
            let ended = ContinuousClock.now
            turn.timers = ended - finished
            if ended - turnNow >= TurnProfile.slowTurn { reportSlowTurn(ended - turnNow) }
        }
        shutdown()
    }

    func pollTimeout() -> Int {
        if !dirty.isEmpty { return 0 }
        // Held ACKs are due within `ackDelay`; the poll has millisecond resolution.
        var milliseconds = sessionsWithAcks.isEmpty ? 50 : max(1, configuration.ackDelay.milliseconds)
        if let since = pendingDeletesSince {
            milliseconds = min(milliseconds, max(0, (since + configuration.ackedDeleteDelay - .now).milliseconds + 1))
        }
        if let deadline = ledger.nextDeadline {
            let left = configuration.clock.now.distance(to: deadline)
            milliseconds = min(milliseconds, max(0, Int(left * 1000) + 1))
        }
        return milliseconds
    }

    func readBatch() throws {
        for _ in 0..<configuration.batchSize {
            guard try socket.receive(into: &input, .dontWait) else { return }
            turn.read += 1
            handleInput()
        }
        turn.inputLeft = true
    }

    /// A turn took longer than ``TurnProfile/slowTurn``: one warning saying what it did, so a stall can be told
    /// apart (a commit with a WAL checkpoint, a big journal delete, many expiries, a long batch).
    func reportSlowTurn(_ took: Duration) {
        logger.warning(
            "slow loop turn",
            metadata: [
                "ms": "\(took.milliseconds)", "read": "\(turn.read)", "handling_ms": "\(turn.handling.milliseconds)",
                "commit_ms": "\(turn.commit.milliseconds)", "finishing_ms": "\(turn.finishing.milliseconds)",
                "timers_ms": "\(turn.timers.milliseconds)", "expired": "\(turn.expired)",
                "expiry_ms": "\(turn.expiry.milliseconds)",
                "forgotten_ids": "\(turn.forgotten)", "forgotten_questions": "\(turn.forgottenQuestions)",
                "forget_ms": "\(turn.forget.milliseconds)", "redelivered": "\(turn.redelivered)",
                "sessions_ended": "\(turn.sessionsEnded)", "questions": "\(ledger.entries.count)",
                "queued": "\(totalQueued)",
            ]
        )
    }
}
