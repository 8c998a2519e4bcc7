import AskProtocol
import ZeroMQ

/// A ROUTER peer identity, packed into integers so the hot path hashes without allocating.
/// libzmq's generated identities are 5 bytes; identities up to 16 bytes stay inline.
struct PeerID: Hashable, Sendable {
    private let high: UInt64
    private let low: UInt64
    private let length: UInt8
    private let overflow: [UInt8]?

    init(_ bytes: UnsafeRawBufferPointer) {
        if bytes.count <= 16 {
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<bytes.count {
                if index < 8 {
                    high |= UInt64(bytes[index]) << (8 * UInt64(index))
                } else {
                    low |= UInt64(bytes[index]) << (8 * UInt64(index - 8))
                }
            }
            self.high = high
            self.low = low
            self.overflow = nil
        } else {
            self.high = 0
            self.low = 0
            self.overflow = Array(bytes.bindMemory(to: UInt8.self))
        }
        self.length = UInt8(truncatingIfNeeded: bytes.count)
    }
}

/// One registered connection: who it is, what it serves, when it was last heard.
final class Session {
    let peer: PeerID
    /// The ROUTER identity, to address frames to this peer.
    let identity: [UInt8]
    let serial: Int
    let role: SessionRole
    let worker: String
    /// Addresses served, with each one's family (for child and guardian addresses).
    var addresses: [String: String?] = [:]
    var window: Int
    var lastHeard: ContinuousClock.Instant
    var lastSent: ContinuousClock.Instant
    /// Ids accepted and not yet acknowledged to the peer: sent after the journal commit, carried by the next
    /// DELIVER to this peer when it reads carried ACK ids, or in one ACK at the end of the turn (held up to
    /// `ackDelay` first for such a peer).
    var pendingAcks: [MessageID] = []
    /// When the oldest of `pendingAcks` was queued.
    var acksSince: ContinuousClock.Instant
    /// In the broker's list of sessions with pending acks.
    var isInAckList = false
    /// The peer reads ACK ids carried by DELIVER (HELLO `carriedAcks`).
    let carriedAcks: Bool
    var isAlive = true
    /// The CURVE key the session authenticated with (nil without CURVE).
    var principalKey: String?

    init(peer: PeerID, identity: [UInt8], serial: Int, hello: Hello, window: Int, now: ContinuousClock.Instant) {
        self.peer = peer
        self.identity = identity
        self.serial = serial
        self.role = hello.role
        self.worker = hello.worker
        self.window = window
        self.lastHeard = now
        self.lastSent = now
        self.acksSince = now
        self.carriedAcks = hello.carriedAcks ?? false
    }
}

/// One message copy on its way to one address.
///
/// It keeps the DELIVER's packed header and the body back to back in one array (`packed`), so delivering is two
/// appends and a routed SEND costs one copy: the header bytes the sender wrote are forwarded unchanged.
final class Envelope {
    let seq: Int64
    let id: MessageID
    let from: String
    /// The address as the sender wrote it (`limits` for the service).
    let to: String
    let kind: String
    let subject: MessageID?
    /// The packed header (`id flags [subject] [trace] from to kind`) followed by the body.
    let packed: [UInt8]
    /// How many bytes of `packed` are the header.
    let headerCount: Int
    let createdAt: Double
    /// Written to the journal (and so deleted from it when acked).
    let persistent: Bool
    var deliveredAt: ContinuousClock.Instant?
    /// Seconds since 1970 after which the message is dropped undelivered (a question past its deadline).
    var expiresAt: Double?
    /// Set when the turn that accepted it failed to commit: never deliver.
    var withdrawn = false

    /// An envelope from header + body bytes already packed (a routed SEND's own header).
    init(
        seq: Int64,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        packed: [UInt8],
        headerCount: Int,
        createdAt: Double,
        persistent: Bool
    ) {
        self.seq = seq
        self.id = id
        self.from = from
        self.to = to
        self.kind = kind
        self.subject = subject
        self.packed = packed
        self.headerCount = headerCount
        self.createdAt = createdAt
        self.persistent = persistent
    }

    /// An envelope whose header is encoded from the fields.
    convenience init(
        seq: Int64,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        trace: TraceContext? = nil,
        body: [UInt8],
        createdAt: Double,
        persistent: Bool
    ) {
        var packed = WireEncoder.headerBytes(id: id, subject: subject, trace: trace, from: from, to: to, kind: kind)
        let headerCount = packed.count
        packed.append(contentsOf: body)
        self.init(
            seq: seq,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            packed: packed,
            headerCount: headerCount,
            createdAt: createdAt,
            persistent: persistent
        )
    }

    /// A copy read back from the journal (restart, spill), with the trace context it was journaled with.
    convenience init(stored: StoredMessage) {
        self.init(
            seq: stored.seq,
            id: stored.id,
            from: stored.from,
            to: stored.to,
            kind: stored.kind,
            subject: stored.subject,
            trace: stored.trace,
            body: stored.body,
            createdAt: stored.createdAt.timeIntervalSince1970,
            persistent: true
        )
        expiresAt = stored.expiresAt?.timeIntervalSince1970
    }

    /// The trace context its header carries (docs/protocol.md §5.5), read from the header bytes: only trace lines
    /// ask, so no queued message stores it twice.
    var trace: TraceContext? {
        packed.withUnsafeBytes { TraceContext.inHeader(UnsafeRawBufferPointer(rebasing: $0[..<headerCount])) }
    }

    /// A copy of the body (journal and ledger paths only).
    var body: [UInt8] { Array(packed[headerCount...]) }

    /// Appends the DELIVER of this envelope to `out`, carrying `acks` when there are any.
    func appendDeliver(acks: ArraySlice<MessageID> = [], to out: inout Multipart) {
        packed.withUnsafeBytes { bytes in
            WireEncoder.deliver(
                header: UnsafeRawBufferPointer(rebasing: bytes[..<headerCount]),
                acks: acks,
                body: UnsafeRawBufferPointer(rebasing: bytes[headerCount...]),
                into: &out
            )
        }
    }
}

/// The queue of one logical address: waiting messages in order, and those delivered but not yet acked.
final class Mailbox {
    let address: String
    var owner: Session?
    /// Queued in the broker's `dirty` list for this turn (replaces a set of object identifiers: no hashing).
    var isDirty = false
    /// Waiting messages from `head` on. A slot before `head` is emptied as its message leaves, so the queue never
    /// keeps a delivered message alive (a mailbox that got ten messages would otherwise hold all ten until it got
    /// a thousand more).
    private var waiting: [Envelope?] = []
    private var head = 0
    var inflight: [MessageID: Envelope] = [:]
    /// Messages for this address that are in the journal only ("spilled": the owner is away, or the in-memory
    /// queue is full). They all come after every message in memory, in `seq` order from ``spillCursor``.
    var spilled = 0
    /// The lowest `seq` that may be spilled (meaningful while `spilled > 0`): every journaled copy for this
    /// address with `seq >= spillCursor` is journal-only, every one below it is in memory.
    var spillCursor: Int64 = 0

    init(address: String) { self.address = address }

    var waitingCount: Int { waiting.count - head }
    /// Messages held in memory (waiting and in flight).
    var memoryCount: Int { waitingCount + inflight.count }
    var isEmpty: Bool { waitingCount == 0 && inflight.isEmpty && spilled == 0 }

    /// Records one more journal-only message (stored with `seq`).
    func noteSpilled(seq: Int64) {
        if spilled == 0 { spillCursor = seq }
        spilled += 1
    }

    /// Drops every waiting message from memory, leaving it in the journal only (the owner went away). Only for a
    /// mailbox whose messages are all journaled and addressed to it directly; call after ``requeueInflight()``.
    /// - Returns: how many were dropped from memory, and the dropped ones that are in the journal (oldest first),
    ///   which the journal must hold in its message table from now on (``Journal/moveToTable(_:)``).
    func spillWaiting() -> (dropped: Int, journaled: [Envelope]) {
        let dropped = waitingCount
        guard dropped > 0 else { return (0, []) }
        // Withdrawn envelopes (their turn failed to commit) are not in the journal: they are simply dropped.
        let journaled = waiting[head...].compactMap { $0 }.filter { !$0.withdrawn }
        if let first = journaled.first {
            // Memory holds only seqs below the cursor, so the lowest dropped seq becomes the new cursor.
            spillCursor = first.seq
            spilled += journaled.count
        }
        waiting.removeAll()
        head = 0
        return (dropped, journaled)
    }

    func enqueue(_ envelope: Envelope) { waiting.append(envelope) }

    func dequeue() -> Envelope? {
        guard head < waiting.count else { return nil }
        let envelope = waiting[head]
        waiting[head] = nil
        head += 1
        if head == waiting.count {
            // Empty: start over, keeping the storage for the next message.
            waiting.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024 && head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
        return envelope
    }

    /// Puts a message that could not be sent back at the head of the queue.
    func pushFront(_ envelope: Envelope) {
        if head > 0 {
            head -= 1
            waiting[head] = envelope
        } else {
            waiting.insert(envelope, at: 0)
        }
    }

    /// Puts unacked deliveries back at the front, oldest first, for redelivery to the next owner.
    func requeueInflight() {
        guard !inflight.isEmpty else { return }
        let back = inflight.values.sorted { $0.seq < $1.seq }
        inflight.removeAll()
        for envelope in back { envelope.deliveredAt = nil }
        waiting = back as [Envelope?] + waiting[head...]
        head = 0
    }

    /// Every message not yet acked, oldest first, left where it is (a family's export).
    func snapshot() -> [Envelope] {
        inflight.values.sorted { $0.seq < $1.seq } + waiting[head...].compactMap { $0 }
    }

    /// Every message not yet acked, oldest first (for re-routing when a service worker goes away).
    func drainAll() -> [Envelope] {
        let all = inflight.values.sorted { $0.seq < $1.seq } + waiting[head...].compactMap { $0 }
        inflight.removeAll()
        waiting.removeAll()
        head = 0
        for envelope in all { envelope.deliveredAt = nil }
        return all
    }
}
