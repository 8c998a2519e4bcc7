import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The link's thread: every socket, every held byte and the fault state live here; other threads post commands.
final class LinkLoop: @unchecked Sendable {  // @unchecked: its mutable state is touched by the link's thread only.
    enum Command: Sendable {
        case apply(LinkFault, Duration?)
        case heal(LinkFault?)
        case reset
        case stop
    }

    struct Published: Sendable {
        var counters = LinkCounters()
        var faults: [LinkFault] = []
    }

    /// Counters and faults as the thread last published them, for any thread.
    let published = Mutex(Published())
    private let changed = NSCondition()
    private let inbox = Mutex<(commands: [(Command, DispatchSemaphore)], finished: Bool)>(([], false))
    private let wakeRead: Int32
    private let wakeWrite: Int32

    private let name: String
    private let upstream: LinkAddress
    private let listeners: [Int32]
    private let ipcPath: String?
    private let log: @Sendable (String) -> Void
    private var connections: [LinkConnection] = []
    private var active: [(fault: LinkFault, until: ContinuousClock.Instant?)] = []
    private var counters = LinkCounters()
    private var running = true

    static let capacity = 16 << 20
    static let chunkSize = 64 << 10

    init(
        name: String,
        upstream: LinkAddress,
        listeners: [Int32],
        ipcPath: String?,
        log: @escaping @Sendable (String) -> Void
    ) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw LinkError.system("pipe") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            try LinkSockets.setNonBlocking(fd)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        self.name = name
        self.upstream = upstream
        self.listeners = listeners
        self.ipcPath = ipcPath
        self.log = log
    }

    // MARK: Other threads

    /// Posts `command` and returns once the thread carried it out (at once when the thread has ended).
    func perform(_ command: Command) {
        let semaphore = DispatchSemaphore(value: 0)
        let posted = inbox.withLock { inbox -> Bool in
            if inbox.finished { return false }
            inbox.commands.append((command, semaphore))
            return true
        }
        guard posted else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        semaphore.wait()
    }

    func waitUntil(timeout: Duration, _ condition: (LinkCounters) -> Bool) -> Bool {
        let deadline = Date() + timeout / .seconds(1)
        changed.lock()
        defer { changed.unlock() }
        while true {
            if condition(published.withLock { $0.counters }) { return true }
            guard changed.wait(until: deadline) else { return condition(published.withLock { $0.counters }) }
        }
    }

    // MARK: The link's thread

    func run() {
        while running {
            runCommands()
            guard running else { break }
            expireFaults(now: .now)
            let policy = currentPolicy()
            startUpstreams(policy)
            for connection in connections { deliver(connection, policy: policy, now: .now) }
            closeFinished()
            publish()

            var fds: [pollfd] = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            for listener in listeners { fds.append(pollfd(fd: listener, events: Int16(POLLIN), revents: 0)) }
            var slots: [(LinkConnection, Bool)] = []  // (connection, upstream side) per pollfd after the listeners
            for connection in connections {
                let (down, up) = interest(connection, policy: policy)
                if down != 0 {
                    fds.append(pollfd(fd: connection.down, events: down, revents: 0))
                    slots.append((connection, false))
                }
                if up != 0 {
                    fds.append(pollfd(fd: connection.up, events: up, revents: 0))
                    slots.append((connection, true))
                }
            }
            let timeout = pollTimeout(policy: policy, now: .now)
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                log("link \(name): poll failed: \(String(cString: strerror(errno))); the link stops")
                break
            }
            if fds[0].revents != 0 { drainWake() }
            for (index, listener) in listeners.enumerated() where fds[index + 1].revents != 0 {
                acceptAll(listener)
            }
            let offset = 1 + listeners.count
            for (index, (connection, upSide)) in slots.enumerated() {
                let revents = fds[offset + index].revents
                guard revents != 0, !connection.closed else { continue }
                handle(connection, upSide: upSide, revents: revents, policy: policy)
            }
        }
        shutDown()
    }

    private func drainWake() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }

    private func runCommands() {
        let commands = inbox.withLock { inbox in
            defer { inbox.commands.removeAll() }
            return inbox.commands
        }
        for (command, semaphore) in commands {
            switch command {
            case .apply(let fault, let duration):
                active.append((fault, duration.map { ContinuousClock.now + $0 }))
                log(
                    "link \(name): \(fault) starts"
                        + (duration.map { " for \(linkDurationText($0))" } ?? " until healed")
                )
                refreshDue()
            case .heal(let only):
                let ending = active.filter { only == nil || $0.fault == only }
                active.removeAll { only == nil || $0.fault == only }
                for entry in ending { log("link \(name): \(entry.fault) ends (healed)") }
                refreshDue()
            case .reset:
                var count = 0
                for connection in connections where !connection.closed {
                    connection.abort()
                    count += 1
                }
                counters.resets += count
                log("link \(name): reset \(count) connection\(count == 1 ? "" : "s") (RST both sides)")
                closeFinished()
            case .stop:
                running = false
            }
            publish()
            semaphore.signal()
        }
    }

    private func expireFaults(now: ContinuousClock.Instant) {
        let ending = active.filter { $0.until.map { $0 <= now } ?? false }
        guard !ending.isEmpty else { return }
        active.removeAll { $0.until.map { $0 <= now } ?? false }
        for entry in ending { log("link \(name): \(entry.fault) ends (its duration passed)") }
        refreshDue()
    }

    /// What the faults in effect mean for the sockets.
    struct Policy {
        var holdToBroker = false
        var holdFromBroker = false
        var stalled = false
        var partitioned = false
        var delayToBroker: (Duration, Duration) = (.zero, .zero)
        var delayFromBroker: (Duration, Duration) = (.zero, .zero)

        func holds(_ toBroker: Bool) -> Bool { toBroker ? holdToBroker : holdFromBroker }
        func delay(_ toBroker: Bool) -> (Duration, Duration) { toBroker ? delayToBroker : delayFromBroker }
    }

    private func currentPolicy() -> Policy {
        var policy = Policy()
        for (fault, _) in active {
            switch fault {
            case .partition(let direction):
                policy.partitioned = true
                if direction.includes(.toBroker) { policy.holdToBroker = true }
                if direction.includes(.fromBroker) { policy.holdFromBroker = true }
            case .stall:
                policy.stalled = true
                policy.holdToBroker = true
                policy.holdFromBroker = true
            case .delay(let delay, let jitter, let direction):
                if direction.includes(.toBroker), delay + jitter > policy.delayToBroker.0 + policy.delayToBroker.1 {
                    policy.delayToBroker = (delay, jitter)
                }
                if direction.includes(.fromBroker),
                    delay + jitter > policy.delayFromBroker.0 + policy.delayFromBroker.1
                {
                    policy.delayFromBroker = (delay, jitter)
                }
            }
        }
        return policy
    }

    /// Recomputes when each held chunk is due after the delays changed (a chunk keeps its arrival and its draw).
    private func refreshDue() {
        let policy = currentPolicy()
        for connection in connections {
            connection.toBroker.refresh(delay: policy.delayToBroker)
            connection.fromBroker.refresh(delay: policy.delayFromBroker)
        }
    }

    private func acceptAll(_ listener: Int32) {
        while let fd = LinkSockets.accept(listener) {
            connections.append(LinkConnection(down: fd))
            counters.accepted += 1
        }
    }

    /// Connects the connections that have no upstream yet, unless a partition holds their SYN.
    private func startUpstreams(_ policy: Policy) {
        guard !policy.partitioned else { return }
        for connection in connections where connection.upState == .none && !connection.closed {
            do {
                let (fd, connected) = try LinkSockets.connect(upstream)
                connection.up = fd
                connection.upState = connected ? .connected : .connecting
            } catch {
                refuse(connection, "\(error)")
            }
        }
    }

    private func refuse(_ connection: LinkConnection, _ why: String) {
        counters.refused += 1
        log("link \(name): the broker refused a connection (\(why)); the process's connection is reset")
        connection.abort()
    }

    /// The poll events each side of `connection` waits for.
    private func interest(_ connection: LinkConnection, policy: Policy) -> (Int16, Int16) {
        guard !connection.closed else { return (0, 0) }
        var down: Int16 = 0
        var up: Int16 = 0
        if !policy.stalled {
            if !connection.toBroker.eof && connection.toBroker.bytes < Self.capacity { down |= Int16(POLLIN) }
            if connection.upState == .connected, !connection.fromBroker.eof,
                connection.fromBroker.bytes < Self.capacity
            {
                up |= Int16(POLLIN)
            }
        }
        if connection.upState == .connecting { up |= Int16(POLLOUT) }
        if connection.upState == .connected, connection.toBroker.blocked, !policy.holdToBroker {
            up |= Int16(POLLOUT)
        }
        if connection.fromBroker.blocked, !policy.holdFromBroker { down |= Int16(POLLOUT) }
        return (down, up)
    }

    private func handle(_ connection: LinkConnection, upSide: Bool, revents: Int16, policy: Policy) {
        if upSide && connection.upState == .connecting {
            let code = LinkSockets.pendingError(connection.up)
            if code != 0 {
                refuse(connection, String(cString: strerror(code)))
                return
            }
            connection.upState = .connected
        }
        let fd = upSide ? connection.up : connection.down
        let pipe = upSide ? connection.fromBroker : connection.toBroker
        if revents & Int16(POLLOUT) != 0 {
            (upSide ? connection.toBroker : connection.fromBroker).blocked = false
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, !policy.stalled, !pipe.eof {
            var buffer = [UInt8](repeating: 0, count: Self.chunkSize)
            let count = read(fd, &buffer, buffer.count)
            if count > 0 {
                pipe.append(Array(buffer[0..<count]), delay: policy.delay(!upSide), now: .now)
                if upSide { counters.readFromBroker += count } else { counters.readToBroker += count }
            } else if count == 0 {
                pipe.eof = true
            } else if errno != EAGAIN && errno != EINTR {
                // ECONNRESET and the like: the peer is gone; the other side hears a reset too.
                connection.abort()
            }
        }
        // An error, or a hang-up once its FIN was read (a reset, or both ways shut while the link still had bytes
        // for it): nothing more can pass on this connection, and polling on would only wake at once again.
        if !connection.closed,
            revents & Int16(POLLERR) != 0 || (revents & Int16(POLLHUP) != 0 && pipe.eof)
        {
            connection.abort()
        }
        if !connection.closed { deliver(connection, policy: policy, now: .now) }
    }

    /// Writes what is due in each direction that no fault holds, until the socket would block.
    private func deliver(_ connection: LinkConnection, policy: Policy, now: ContinuousClock.Instant) {
        guard !connection.closed else { return }
        if connection.upState == .connected, !policy.holdToBroker {
            let written = connection.toBroker.flush(to: connection.up, now: now)
            guard written >= 0 else { return connection.abort() }
            counters.bytesToBroker += written
            if connection.toBroker.finished && !connection.upShut {
                shutdown(connection.up, Int32(SHUT_WR))
                connection.upShut = true
            }
        }
        if !policy.holdFromBroker {
            let written = connection.fromBroker.flush(to: connection.down, now: now)
            guard written >= 0 else { return connection.abort() }
            counters.bytesFromBroker += written
            if connection.fromBroker.finished && !connection.downShut {
                shutdown(connection.down, Int32(SHUT_WR))
                connection.downShut = true
            }
        }
        // The process left before an upstream existed and nothing of it waits: no broker ever saw it.
        if connection.upState == .none, connection.toBroker.finished {
            connection.close()
        } else if connection.upShut && connection.downShut {
            connection.close()
        }
    }

    private func closeFinished() {
        connections.removeAll { $0.closed }
    }

    private func pollTimeout(policy: Policy, now: ContinuousClock.Instant) -> Int32 {
        var next: ContinuousClock.Instant?
        func consider(_ instant: ContinuousClock.Instant?) {
            guard let instant else { return }
            if next.map({ instant < $0 }) ?? true { next = instant }
        }
        for entry in active { consider(entry.until) }
        for connection in connections where !connection.closed {
            if !policy.holdToBroker, connection.upState == .connected, !connection.toBroker.blocked {
                consider(connection.toBroker.nextDue)
            }
            if !policy.holdFromBroker, !connection.fromBroker.blocked { consider(connection.fromBroker.nextDue) }
        }
        guard let next else { return -1 }
        let wait = next - now
        if wait <= .zero { return 0 }
        // Rounded up, so the chunk is due when poll returns.
        let (seconds, attoseconds) = wait.components
        return Int32(min(seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000, 60_000))
    }

    private func publish() {
        counters.open = connections.filter { !$0.closed }.count
        let faults = active.map(\.fault)
        let counters = self.counters
        let changedNow = published.withLock { published -> Bool in
            defer { published = Published(counters: counters, faults: faults) }
            return published.counters != counters || published.faults != faults
        }
        if changedNow {
            changed.lock()
            changed.broadcast()
            changed.unlock()
        }
    }

    private func shutDown() {
        for connection in connections { connection.close() }
        connections.removeAll()
        for listener in listeners { close(listener) }
        if let ipcPath { unlink(ipcPath) }
        let left = inbox.withLock { inbox in
            inbox.finished = true
            defer { inbox.commands.removeAll() }
            return inbox.commands
        }
        publish()
        for (_, semaphore) in left { semaphore.signal() }
        close(wakeRead)
        close(wakeWrite)
    }
}

/// One accepted connection and its upstream connection, with what the link holds each way.
final class LinkConnection {
    enum UpState { case none, connecting, connected }

    let down: Int32
    var up: Int32 = -1
    var upState = UpState.none
    let toBroker = LinkPipe()
    let fromBroker = LinkPipe()
    var upShut = false
    var downShut = false
    private(set) var closed = false

    init(down: Int32) { self.down = down }

    /// RST to both sides; what was held is dropped.
    func abort() {
        guard !closed else { return }
        closed = true
        LinkSockets.reset(down)
        if up >= 0 { LinkSockets.reset(up) }
        toBroker.drop()
        fromBroker.drop()
    }

    /// An orderly close of both sides.
    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(down)
        if up >= 0 { Glibc.close(up) }
    }
}

/// The bytes of one direction of a connection that the link has read and not yet delivered, in order.
final class LinkPipe {
    struct Chunk {
        var bytes: [UInt8]
        var offset = 0
        let arrival: ContinuousClock.Instant
        /// This chunk's draw of the jitter, in [0, 1).
        let draw: Double
        var due: ContinuousClock.Instant
    }

    private var chunks: [Chunk] = []
    private var head = 0
    /// Bytes held.
    private(set) var bytes = 0
    /// The source side sent FIN: once the held bytes are delivered, the link passes it on.
    var eof = false
    /// The last write would have blocked: wait for POLLOUT.
    var blocked = false

    var finished: Bool { eof && bytes == 0 }

    var nextDue: ContinuousClock.Instant? { head < chunks.count ? chunks[head].due : nil }

    func append(_ data: [UInt8], delay: (Duration, Duration), now: ContinuousClock.Instant) {
        let draw = delay.1 == .zero ? 0 : Double.random(in: 0..<1)
        var due = now + delay.0 + delay.1 * draw
        if head < chunks.count, let last = chunks.last, last.due > due { due = last.due }
        chunks.append(Chunk(bytes: data, arrival: now, draw: draw, due: due))
        bytes += data.count
    }

    func refresh(delay: (Duration, Duration)) {
        var previous: ContinuousClock.Instant?
        for index in head..<chunks.count {
            var due = chunks[index].arrival + delay.0 + delay.1 * chunks[index].draw
            if let previous, previous > due { due = previous }
            chunks[index].due = due
            previous = due
        }
    }

    /// Writes the due chunks to `fd` until it would block. - Returns: bytes written, or -1 when the peer is gone.
    func flush(to fd: Int32, now: ContinuousClock.Instant) -> Int {
        var written = 0
        while head < chunks.count, chunks[head].due <= now, !blocked {
            let count = chunks[head].bytes.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + chunks[head].offset, raw.count - chunks[head].offset, Int32(MSG_NOSIGNAL))
            }
            if count < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    blocked = true
                    break
                }
                if errno == EINTR { continue }
                return -1
            }
            written += count
            bytes -= count
            chunks[head].offset += count
            if chunks[head].offset == chunks[head].bytes.count {
                head += 1
                if head > 64 && head * 2 > chunks.count {
                    chunks.removeFirst(head)
                    head = 0
                }
            }
        }
        return written
    }

    func drop() {
        chunks.removeAll()
        head = 0
        bytes = 0
    }
}
