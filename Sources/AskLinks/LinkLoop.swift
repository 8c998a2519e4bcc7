import AskBasics
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
        /// Open connections the link cannot read (CURVE).
        var unreadableOpen = 0
    }

    /// A fault in effect, with what a message fault needs: its draws, how many messages it took, and the
    /// connections it was refused on.
    struct Active {
        let fault: LinkFault
        let until: ContinuousClock.Instant?
        var random: LinkRandom
        var taken = 0
        /// The serials of the connections it was refused on.
        var refusedOn: Set<Int> = []

        init(_ fault: LinkFault, until: ContinuousClock.Instant?) {
            self.fault = fault
            self.until = until
            if case .message(let message) = fault {
                random = LinkRandom(seed: message.seed)
            } else {
                random = LinkRandom(seed: 0)
            }
        }
    }

    /// A bandwidth limit's line in one direction: the bytes it may send now (its credit grows at the rate while
    /// bytes wait, and is zero when none do).
    struct Pacer {
        var credit = 0.0
        var since: ContinuousClock.Instant?
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
    private var active: [Active] = []
    private var pacerToBroker = Pacer()
    private var pacerFromBroker = Pacer()
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
        let deadline = Date() + timeout.seconds
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
                active.append(Active(fault, until: duration.map { ContinuousClock.now + $0 }))
                log(
                    "link \(name): \(fault) starts"
                        + (duration.map { " for \(linkDurationText($0))" } ?? " until healed")
                )
                if case .message(let message) = fault {
                    if counters.messageFaults[message] == nil {
                        counters.messageFaults[message] = LinkMessageCounters()
                    }
                    for connection in connections where !connection.closed {
                        refuseIfUnreadable(connection, toBroker: true)
                        refuseIfUnreadable(connection, toBroker: false)
                    }
                }
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
        var bandwidthToBroker: Int?
        var bandwidthFromBroker: Int?
        var watchToBroker = false
        var watchFromBroker = false

        func holds(_ toBroker: Bool) -> Bool { toBroker ? holdToBroker : holdFromBroker }
        func delay(_ toBroker: Bool) -> (Duration, Duration) { toBroker ? delayToBroker : delayFromBroker }
        func bandwidth(_ toBroker: Bool) -> Int? { toBroker ? bandwidthToBroker : bandwidthFromBroker }
        func watches(_ toBroker: Bool) -> Bool { toBroker ? watchToBroker : watchFromBroker }
    }

    private func currentPolicy() -> Policy {
        var policy = Policy()
        for entry in active {
            switch entry.fault {
            case .bandwidth(let rate, let direction):
                let rate = max(1, rate)
                if direction.includes(.toBroker) {
                    policy.bandwidthToBroker = min(policy.bandwidthToBroker ?? rate, rate)
                }
                if direction.includes(.fromBroker) {
                    policy.bandwidthFromBroker = min(policy.bandwidthFromBroker ?? rate, rate)
                }
            case .message(let message):
                if message.direction.includes(.toBroker) { policy.watchToBroker = true }
                if message.direction.includes(.fromBroker) { policy.watchFromBroker = true }
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
    /// A message held by a message delay is due at once when no such fault is left.
    private func refreshDue() {
        let policy = currentPolicy()
        let delaysMessages = active.contains {
            if case .message(let fault) = $0.fault, case .delay = fault.action { true } else { false }
        }
        let now = ContinuousClock.now
        for connection in connections {
            connection.toBroker.refresh(delay: policy.delayToBroker)
            connection.fromBroker.refresh(delay: policy.delayFromBroker)
            if !delaysMessages {
                connection.toBroker.stream.expedite(now: now)
                connection.fromBroker.stream.expedite(now: now)
            }
        }
    }

    private func acceptAll(_ listener: Int32) {
        while let fd = LinkSockets.accept(listener) {
            counters.accepted += 1
            connections.append(LinkConnection(down: fd, serial: counters.accepted))
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
                if upSide { counters.readFromBroker += count } else { counters.readToBroker += count }
                take(buffer[0..<count], into: pipe, of: connection, toBroker: !upSide, policy: policy)
            } else if count == 0 {
                var out: [UInt8] = []
                pipe.stream.finish(out: &out)
                pipe.stream.release(now: .now, out: &out)
                if !out.isEmpty { pipe.append(out, delay: policy.delay(!upSide), now: .now) }
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

    /// Passes bytes read from one side through that direction's message stream (which judges messages while a
    /// message fault watches) into the pipe.
    private func take(
        _ bytes: ArraySlice<UInt8>,
        into pipe: LinkPipe,
        of connection: LinkConnection,
        toBroker: Bool,
        policy: Policy
    ) {
        let stream = pipe.stream
        let (droppedBefore, addedBefore) = (stream.droppedBytes, stream.addedBytes)
        let knewMechanism = stream.mechanism != nil
        let now = ContinuousClock.now
        var out: [UInt8] = []
        stream.feed(bytes, now: now, watching: policy.watches(toBroker), out: &out) { info in
            judge(info, toBroker: toBroker)
        }
        stream.release(now: now, out: &out)
        if !out.isEmpty { pipe.append(out, delay: policy.delay(toBroker), now: now) }
        if toBroker {
            counters.droppedToBroker += stream.droppedBytes - droppedBefore
            counters.duplicatedToBroker += stream.addedBytes - addedBefore
        } else {
            counters.droppedFromBroker += stream.droppedBytes - droppedBefore
            counters.duplicatedFromBroker += stream.addedBytes - addedBefore
        }
        if !knewMechanism, let mechanism = stream.mechanism, mechanism != "NULL" {
            if !connection.unreadable {
                connection.unreadable = true
                counters.unreadable += 1
            }
            refuseIfUnreadable(connection, toBroker: toBroker)
        }
    }

    /// What the message faults in effect do with a message read in one direction: every fault that matches counts
    /// it; the first that takes it (its count not used up, its draw won) decides.
    private func judge(_ info: LinkMessageInfo, toBroker: Bool) -> LinkMessageDecision {
        var decision = LinkMessageDecision.pass
        for index in active.indices {
            guard case .message(let fault) = active[index].fault,
                fault.direction.includes(toBroker ? .toBroker : .fromBroker),
                fault.matches(command: info.command, kind: info.kind)
            else { continue }
            counters.messages.matched += 1
            counters.messageFaults[fault, default: LinkMessageCounters()].matched += 1
            guard decision == .pass else { continue }
            if let count = fault.count, active[index].taken >= count { continue }
            if fault.probability < 1, active[index].random.next() >= fault.probability { continue }
            active[index].taken += 1
            switch fault.action {
            case .drop:
                decision = .drop
                counters.messages.dropped += 1
                counters.messageFaults[fault, default: LinkMessageCounters()].dropped += 1
            case .duplicate:
                decision = .duplicate
                counters.messages.duplicated += 1
                counters.messageFaults[fault, default: LinkMessageCounters()].duplicated += 1
            case .delay(let delay):
                decision = .delay(delay)
                counters.messages.delayed += 1
                counters.messageFaults[fault, default: LinkMessageCounters()].delayed += 1
            }
            if let count = fault.count, active[index].taken == count {
                log("link \(name): \(fault) took its \(count) message\(count == 1 ? "" : "s"); it takes no more")
            }
        }
        return decision
    }

    /// A message fault in effect on a connection whose `toBroker` direction the link cannot read (CURVE) does
    /// nothing there: said once per fault and connection, in the log and the fault's `refused` counter.
    private func refuseIfUnreadable(_ connection: LinkConnection, toBroker: Bool) {
        let stream = (toBroker ? connection.toBroker : connection.fromBroker).stream
        guard let mechanism = stream.mechanism, mechanism != "NULL" else { return }
        let id = connection.serial
        for index in active.indices {
            guard case .message(let fault) = active[index].fault,
                fault.direction.includes(toBroker ? .toBroker : .fromBroker), !active[index].refusedOn.contains(id)
            else { continue }
            active[index].refusedOn.insert(id)
            counters.messages.refused += 1
            counters.messageFaults[fault, default: LinkMessageCounters()].refused += 1
            log(
                "link \(name): message fault refused: \(mechanism) (\(fault)): the link cannot read this connection's "
                    + "messages; run the link's peers without CURVE, or use a byte fault (partition, delay, "
                    + "bandwidth, reset, stall)"
            )
        }
    }

    /// Writes what is due in each direction that no fault holds, until the socket would block (or a bandwidth
    /// limit's credit is spent).
    private func deliver(_ connection: LinkConnection, policy: Policy, now: ContinuousClock.Instant) {
        guard !connection.closed else { return }
        pace(policy: policy, now: now)
        for (pipe, toBroker) in [(connection.toBroker, true), (connection.fromBroker, false)] {
            var out: [UInt8] = []
            if pipe.stream.release(now: now, out: &out) > 0 {
                pipe.append(out, delay: policy.delay(toBroker), now: now)
            }
        }
        if connection.upState == .connected, !policy.holdToBroker {
            let written = connection.toBroker.flush(
                to: connection.up,
                now: now,
                limit: policy.bandwidthToBroker == nil ? Int.max : Int(pacerToBroker.credit)
            )
            guard written >= 0 else { return connection.abort() }
            if policy.bandwidthToBroker != nil { pacerToBroker.credit -= Double(written) }
            counters.bytesToBroker += written
            if connection.toBroker.finished && !connection.upShut {
                shutdown(connection.up, Int32(SHUT_WR))
                connection.upShut = true
            }
        }
        if !policy.holdFromBroker {
            let written = connection.fromBroker.flush(
                to: connection.down,
                now: now,
                limit: policy.bandwidthFromBroker == nil ? Int.max : Int(pacerFromBroker.credit)
            )
            guard written >= 0 else { return connection.abort() }
            if policy.bandwidthFromBroker != nil { pacerFromBroker.credit -= Double(written) }
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

    /// Whether bytes in one direction are ready to go (due, not held, the socket writable) on some connection.
    private func ready(toBroker: Bool, policy: Policy, now: ContinuousClock.Instant) -> Bool {
        guard !policy.holds(toBroker) else { return false }
        return connections.contains { connection in
            guard !connection.closed, !toBroker || connection.upState == .connected else { return false }
            let pipe = toBroker ? connection.toBroker : connection.fromBroker
            return !pipe.blocked && (pipe.nextDue.map { $0 <= now } ?? false)
        }
    }

    /// Grows each bandwidth limit's credit at its rate while bytes wait for it; with none waiting it is zero, so
    /// a byte never leaves earlier than the bytes before it and it take at that rate.
    private func pace(policy: Policy, now: ContinuousClock.Instant) {
        func update(_ pacer: inout Pacer, rate: Int?, waiting: Bool) {
            guard let rate, waiting else {
                pacer = Pacer()
                return
            }
            if let since = pacer.since {
                let cap = max(1, Double(rate) / 10)
                pacer.credit = min(cap, pacer.credit + (now - since).seconds * Double(rate))
            }
            pacer.since = now
        }
        update(
            &pacerToBroker,
            rate: policy.bandwidthToBroker,
            waiting: policy.bandwidthToBroker != nil && ready(toBroker: true, policy: policy, now: now)
        )
        update(
            &pacerFromBroker,
            rate: policy.bandwidthFromBroker,
            waiting: policy.bandwidthFromBroker != nil && ready(toBroker: false, policy: policy, now: now)
        )
    }

    /// When a bandwidth limit has credit for its next bytes (a tenth of a second's worth at most, at least 1 B).
    private func paceWake(_ pacer: Pacer, rate: Int, now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        let quantum = max(1, Double(rate) / 100)
        let missing = max(0, quantum - pacer.credit)
        return (pacer.since ?? now) + .seconds(missing / Double(rate))
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
        func considerPipe(_ pipe: LinkPipe, toBroker: Bool) {
            if let due = pipe.nextDue, let rate = policy.bandwidth(toBroker), due <= now {
                consider(paceWake(toBroker ? pacerToBroker : pacerFromBroker, rate: rate, now: now))
            } else {
                consider(pipe.nextDue)
            }
        }
        for connection in connections where !connection.closed {
            if !policy.holdToBroker, connection.upState == .connected, !connection.toBroker.blocked {
                considerPipe(connection.toBroker, toBroker: true)
            }
            if !policy.holdFromBroker, !connection.fromBroker.blocked {
                considerPipe(connection.fromBroker, toBroker: false)
            }
            // A delayed message goes in at a message boundary; off one, the next read brings the stream to one.
            for pipe in [connection.toBroker, connection.fromBroker] where pipe.stream.atBoundary {
                consider(pipe.stream.nextDue)
            }
        }
        guard let next else { return -1 }
        let wait = next - now
        if wait <= .zero { return 0 }
        // Rounded up, so the chunk is due when poll returns.
        return Int32(min(wait.millisecondsRoundedUp, 60_000))
    }

    private func publish() {
        counters.open = connections.filter { !$0.closed }.count
        let faults = active.map(\.fault)
        let counters = self.counters
        let unreadableOpen = connections.filter { !$0.closed && $0.unreadable }.count
        let changedNow = published.withLock { published -> Bool in
            defer { published = Published(counters: counters, faults: faults, unreadableOpen: unreadableOpen) }
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
    /// A greeting on it named CURVE (or another mechanism than NULL): the link cannot read its messages.
    var unreadable = false
    private(set) var closed = false

    /// Its number among the connections the link accepted (1, 2, ...).
    let serial: Int

    init(down: Int32, serial: Int) {
        self.down = down
        self.serial = serial
    }

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
    /// The bytes read in this direction, as ZMTP: what message faults see; it hands the pipe what goes on.
    let stream = LinkMessageStream()

    var finished: Bool { eof && bytes == 0 && stream.idle }

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

    /// Writes the due chunks to `fd` until it would block, `limit` bytes at most. - Returns: bytes written, or -1
    /// when the peer is gone.
    func flush(to fd: Int32, now: ContinuousClock.Instant, limit: Int = .max) -> Int {
        var written = 0
        while head < chunks.count, chunks[head].due <= now, !blocked, written < limit {
            let count = chunks[head].bytes.withUnsafeBytes { raw in
                send(
                    fd,
                    raw.baseAddress! + chunks[head].offset,
                    min(raw.count - chunks[head].offset, limit - written),
                    Int32(MSG_NOSIGNAL)
                )
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
        stream.drop()
    }
}
