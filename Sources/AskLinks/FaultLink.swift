import AskBasics
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Which way bytes go through a link: from the process to its broker, from the broker to the process, or both.
public enum LinkDirection: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case toBroker
    case fromBroker
    case both

    /// Whether this direction includes `one` (`.both` includes either).
    public func includes(_ one: LinkDirection) -> Bool { self == .both || self == one }

    public var description: String { rawValue }
}

/// A lasting fault of a ``FaultLink``, in effect from ``FaultLink/apply(_:for:)`` until ``FaultLink/heal()`` (or
/// its duration). ``FaultLink/reset()`` is the one instant fault and is not a case here.
public enum LinkFault: Sendable, Hashable, CustomStringConvertible {
    /// Bytes in `direction` are held in the link, not delivered, until the fault ends; then they flow in order.
    /// Bytes the link holds when the fault starts are held too. A connection accepted meanwhile gets no upstream
    /// connection until the fault ends (a SYN, or its SYN-ACK, that a partition loses). The link keeps reading, so
    /// the senders' writes go on succeeding, as TCP's do while it retransmits.
    case partition(LinkDirection)
    /// Every chunk in `direction` is delivered no earlier than its arrival at the link + `delay` + a random part
    /// of `jitter` (uniform, drawn per chunk), and never before a chunk that arrived earlier.
    case delay(Duration, jitter: Duration, LinkDirection)
    /// The link stops reading from either side and delivers nothing: the peers' socket buffers fill and TCP flow
    /// control stops their writes (a zero window), as a hung middlebox or a peer that stopped reading does. New
    /// connections are accepted and connected upstream; nothing moves on them either.
    case stall
    /// Bytes in `direction` leave the link at `bytesPerSecond` at most, in order, none lost: a byte is delivered
    /// no earlier than the time the bytes waiting before it, and it, take at that rate since they were ready (a
    /// serial line of that speed). With several limits in one direction the smallest applies. It acts after a
    /// delay: a delayed chunk waits for its turn on the line once it is due.
    case bandwidth(bytesPerSecond: Int, LinkDirection)
    /// Drop, delay or duplicate whole AskRelay messages of a kind (``LinkMessageFault``). Messages the link reads
    /// once it is applied are judged; bytes it held already are not. Needs the peers to run without CURVE.
    case message(LinkMessageFault)

    /// ``delay(_:jitter:_:)`` without jitter.
    public static func delay(_ delay: Duration, _ direction: LinkDirection = .both) -> LinkFault {
        .delay(delay, jitter: .zero, direction)
    }

    public var description: String {
        switch self {
        case .partition(let direction): "partition \(direction)"
        case .delay(let delay, let jitter, let direction):
            "delay \(linkDurationText(delay))\(jitter == .zero ? "" : " jitter \(linkDurationText(jitter))") \(direction)"
        case .stall: "stall"
        case .bandwidth(let rate, let direction): "bandwidth \(rate) B/s \(direction)"
        case .message(let fault): fault.description
        }
    }
}

/// `250ms`, `2s`, `1.5s`: whole milliseconds below a second, seconds from there.
func linkDurationText(_ duration: Duration) -> String {
    let milliseconds = duration.milliseconds
    if milliseconds < 1000 { return "\(milliseconds)ms" }
    if milliseconds % 1000 == 0 { return "\(milliseconds / 1000)s" }
    return "\(Double(milliseconds) / 1000)s"
}

/// What a ``FaultLink`` did so far.
public struct LinkCounters: Sendable, Equatable, CustomStringConvertible {
    /// Bytes read from the process's side (the link holds them until delivered).
    public var readToBroker = 0
    /// Bytes delivered to the broker.
    public var bytesToBroker = 0
    /// Bytes read from the broker's side.
    public var readFromBroker = 0
    /// Bytes delivered to the process.
    public var bytesFromBroker = 0
    /// Connections accepted from processes.
    public var accepted = 0
    /// Connections open now (accepted, not yet closed).
    public var open = 0
    /// Connections closed by ``FaultLink/reset()``.
    public var resets = 0
    /// Upstream connections the broker refused (it was down): the process's connection was reset.
    public var refused = 0
    /// Bytes of the messages a message fault dropped, to the broker and from it.
    public var droppedToBroker = 0
    public var droppedFromBroker = 0
    /// Bytes of the copies a message fault added (duplicates), to the broker and from it.
    public var duplicatedToBroker = 0
    public var duplicatedFromBroker = 0
    /// Connections whose messages the link cannot read: a greeting named CURVE (or another mechanism than NULL).
    public var unreadable = 0
    /// What the message faults did, all together.
    public var messages = LinkMessageCounters()
    /// What each message fault did, by fault (summed over the times an equal fault was applied).
    public var messageFaults: [LinkMessageFault: LinkMessageCounters] = [:]

    public init() {}

    /// Bytes the link holds now, to the broker and from it (a delayed message's too).
    public var heldToBroker: Int { readToBroker + duplicatedToBroker - droppedToBroker - bytesToBroker }
    public var heldFromBroker: Int { readFromBroker + duplicatedFromBroker - droppedFromBroker - bytesFromBroker }

    /// What `fault` did so far (zeros when it never matched).
    public subscript(fault: LinkMessageFault) -> LinkMessageCounters { messageFaults[fault] ?? LinkMessageCounters() }

    public var description: String {
        "to broker \(bytesToBroker)/\(readToBroker) B, from broker \(bytesFromBroker)/\(readFromBroker) B, "
            + "accepted \(accepted), open \(open), resets \(resets), refused \(refused)"
            + (messageFaults.isEmpty && unreadable == 0 ? "" : "; messages: \(messages), unreadable \(unreadable)")
    }
}

/// A userspace TCP relay between a process and its broker, with faults a test turns on and off: the process
/// connects to ``endpoint`` (or ``ipcEndpoint``) instead of the broker, and each connection it opens gets one
/// connection of its own to ``upstream``. Without a fault it is invisible: every byte is forwarded at once, in
/// order, both ways, and a FIN or a reset on one side is passed to the other.
///
/// ```swift
/// let link = try FaultLink(name: "limits", upstream: cluster.endpoint)
/// defer { link.stop() }
/// link.partition(.fromBroker)      // the broker's bytes are held in the link
/// link.heal()                      // they flow again, in order
/// link.delay(.milliseconds(100))   // every chunk waits 100 ms in each direction
/// link.reset()                     // RST to both sides of every connection; new ones are accepted again
/// link.bandwidth(20_000, direction: .fromBroker)  // the broker's bytes at 20 kB/s at most
/// link.apply(LinkMessageFault(.drop, .toBroker, kind: "answer", count: 1))  // the first answer is lost
/// ```
///
/// Contracts:
/// - One thread (`askrelay-link-<name>`) polls every socket of the link; it sleeps until a socket is ready, a
///   delayed chunk is due, a fault's duration ends, or a call changes something. No busy loop.
/// - A fault call returns once the link's thread applied it: a byte the thread had not written yet when
///   ``apply(_:for:)`` returned is subject to the fault (a message fault: a message the thread had not read yet).
///   ``reset()`` returns once every connection is closed.
/// - Message faults read ZMTP 3 with the NULL mechanism only: on a CURVE connection they are refused, logged
///   (`message fault refused: CURVE`) and counted; ``LinkFault/refusal(curve:)`` says so beforehand.
/// - Faults add up (``heal()`` ends them all, ``heal(_:)`` one); with several delays in one direction the largest
///   applies. Each fault's start and end is given to `log`.
/// - The link holds at most 16 MiB per direction of a connection; beyond that it stops reading that side, so TCP
///   flow control pushes back on the sender.
/// - ``stop()`` closes everything and joins the thread (also in `deinit`).
public final class FaultLink: Sendable {
    /// The name the link's log lines and thread carry (`limits`, `askcenter-1`, ...).
    public let name: String
    /// Where the process connects: `tcp://127.0.0.1:<port>`, a port the OS picked.
    public let endpoint: String
    /// Where the process may connect instead, when the link was given an ipc path: `ipc://PATH`.
    public let ipcEndpoint: String?
    /// The broker endpoint the link connects to.
    public let upstream: String

    let loop: LinkLoop
    private let done = DispatchSemaphore(value: 0)
    private let stopped = Mutex(false)

    /// Starts a link on `tcp://127.0.0.1:*` (and `ipc://ipcPath` when given) to `upstream` (`tcp://HOST:PORT` or
    /// `ipc://PATH`).
    /// - Parameter log: a fault's start and end, and what the link refused; called on any thread.
    /// - Throws: ``LinkError`` when an endpoint is malformed or a socket cannot be made.
    public init(
        name: String,
        upstream: String,
        ipcPath: String? = nil,
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) throws {
        self.name = name
        self.upstream = upstream
        let target = try LinkAddress(upstream)
        var listeners: [Int32] = []
        var ipcFile: String?
        do {
            let (tcp, bound) = try LinkSockets.listen(.tcp(host: "127.0.0.1", port: 0))
            listeners.append(tcp)
            endpoint = bound
            if let ipcPath {
                let (ipc, boundIPC) = try LinkSockets.listen(.ipc(path: ipcPath))
                listeners.append(ipc)
                ipcFile = ipcPath
                ipcEndpoint = boundIPC
            } else {
                ipcEndpoint = nil
            }
            loop = try LinkLoop(name: name, upstream: target, listeners: listeners, ipcPath: ipcFile, log: log)
        } catch {
            for fd in listeners { close(fd) }
            throw error
        }
        let loop = self.loop
        let done = self.done
        startThread(name: "askrelay-link-\(name)") {
            loop.run()
            done.signal()
        }
    }

    deinit { stop() }

    // MARK: Faults

    /// Starts `fault`; it lasts until ``heal()`` or ``heal(_:)``, or for `duration` when given.
    public func apply(_ fault: LinkFault, for duration: Duration? = nil) {
        loop.perform(.apply(fault, duration))
    }

    /// ``LinkFault/partition(_:)``: bytes in `direction` are held until healed.
    public func partition(_ direction: LinkDirection = .both, for duration: Duration? = nil) {
        apply(.partition(direction), for: duration)
    }

    /// ``LinkFault/delay(_:jitter:_:)``: every chunk in `direction` waits `delay` (plus up to `jitter`).
    public func delay(
        _ delay: Duration,
        jitter: Duration = .zero,
        direction: LinkDirection = .both,
        for duration: Duration? = nil
    ) {
        apply(.delay(delay, jitter: jitter, direction), for: duration)
    }

    /// ``LinkFault/bandwidth(bytesPerSecond:_:)``: bytes in `direction` leave the link at `bytesPerSecond` at most.
    public func bandwidth(_ bytesPerSecond: Int, direction: LinkDirection = .both, for duration: Duration? = nil) {
        apply(.bandwidth(bytesPerSecond: bytesPerSecond, direction), for: duration)
    }

    /// ``LinkFault/message(_:)``: drops, delays or duplicates the messages `fault` matches.
    public func apply(_ fault: LinkMessageFault, for duration: Duration? = nil) {
        apply(.message(fault), for: duration)
    }

    /// Why `fault` would do nothing on this link now: a message fault while a connection of the link is one it
    /// cannot read (CURVE), as ``LinkFault/refusal(curve:)`` words it; `nil` otherwise. Before any connection
    /// exists only the supervisor knows: ask ``LinkFault/refusal(curve:)``.
    public func refusal(of fault: LinkFault) -> String? {
        fault.refusal(curve: loop.published.withLock { $0.unreadableOpen > 0 })
    }

    /// ``LinkFault/stall``: nothing is read or delivered, new connections are accepted.
    public func stall(for duration: Duration? = nil) { apply(.stall, for: duration) }

    /// Closes both sides of every current connection abruptly (SO_LINGER 0: the kernel sends RST and drops what
    /// was unsent), as a crashed peer or a middlebox that lost its state would; what the link held is dropped.
    /// New connections are accepted again at once. Returns once they are closed.
    /// - Returns: how many connections it reset.
    @discardableResult
    public func reset() -> Int {
        let before = counters.resets
        loop.perform(.reset)
        return counters.resets - before
    }

    /// Ends every fault: held bytes flow, in order, and delayed ones are due at once.
    public func heal() { loop.perform(.heal(nil)) }

    /// Ends the faults equal to `fault`.
    public func heal(_ fault: LinkFault) { loop.perform(.heal(fault)) }

    /// The faults in effect now.
    public var faults: [LinkFault] { loop.published.withLock { $0.faults } }

    // MARK: Observing

    /// What the link did so far.
    public var counters: LinkCounters { loop.published.withLock { $0.counters } }

    /// Blocks until `condition` holds for the counters (woken by every change), or `timeout` passed.
    /// - Returns: whether it held.
    @discardableResult
    public func waitUntil(timeout: Duration = .seconds(15), _ condition: (LinkCounters) -> Bool) -> Bool {
        loop.waitUntil(timeout: timeout, condition)
    }

    /// ``waitUntil(timeout:_:)`` on a thread of its own, off the cooperative pool.
    public func wait(
        timeout: Duration = .seconds(15),
        until condition: @escaping @Sendable (LinkCounters) -> Bool
    ) async -> Bool {
        await onDedicatedThread(name: "askrelay-link-wait") { self.waitUntil(timeout: timeout, condition) }
    }

    // MARK: Stopping

    /// Closes every connection and the listening sockets, and joins the link's thread. Idempotent.
    public func stop() {
        let first = stopped.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
        loop.perform(.stop)
        done.wait()
    }
}
