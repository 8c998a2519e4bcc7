import AskBasics
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Starts, watches, signals, restarts and always cleans up the worker processes of a simulation.
///
/// Every process gets its stdout read line by line on a thread of its own (lines go to `onLine` and are kept for
/// ``SupervisedProcess/waitForLine(deadline:matching:)``), its stderr copied to a log file, and its exit collected
/// by a waiter thread. All waits take a deadline; nothing sleeps. ``killAll()`` runs on every exit path, including a
/// SIGINT or SIGTERM of the supervising process (see ``interrupt(by:)``).
// @unchecked: all mutable state is guarded by `core.condition`.
public final class ProcessSupervisor: @unchecked Sendable {
    package let core: SupervisorCore
    var condition: NSCondition { core.condition }
    private var processes: [SupervisedProcess] = []
    /// Called with (process name, line) for every stdout line, on the reading thread.
    public var onLine: @Sendable (String, String) -> Void { core.onLine }

    public init(onLine: @escaping @Sendable (String, String) -> Void = { _, _ in }) {
        core = SupervisorCore(onLine: onLine)
    }

    deinit { killAll() }

    /// Marks the supervisor interrupted by `number` (a SIGINT or SIGTERM of the supervising process: every wait but
    /// the wait for an exit then fails fast, and nothing more starts) and kills everything it started.
    public func interrupt(by number: Int32) {
        core.interrupt(number)
        killAll()
    }

    /// The signal that interrupted the supervisor, if one did.
    public var interrupted: Int32? { core.interrupted }

    public var all: [SupervisedProcess] {
        condition.lock()
        defer { condition.unlock() }
        return processes
    }

    public func process(named name: String) -> SupervisedProcess? { all.first { $0.name == name } }

    /// The environment a supervised process starts from: ours without any `ASKRELAY_*` variable. A supervisor
    /// configures its processes with their flags and the `environment` it passes to `start`; a variable meant for
    /// the command that supervises them (`ASKRELAY_FAMILIES` of `askrelay simulate`, `ASKRELAY_BROKERS`) must not
    /// configure them too.
    public static func inheritedEnvironment(
        _ base: [String: String] = ProcessInfo.processInfo.environment
    ) -> [String: String] {
        base.filter { !$0.key.hasPrefix("ASKRELAY_") }
    }

    /// Starts `launch` (its environment: ``ProcessLaunch/startingEnvironment``; its stderr: its `logPath`, appended).
    /// - Throws: ``SupervisorError`` if the process cannot be spawned or the supervisor was interrupted.
    @discardableResult
    public func start(_ launch: ProcessLaunch) throws -> SupervisedProcess {
        let process = SupervisedProcess(core: core, launch: launch)
        condition.lock()
        if let signal = core.interruptedBy {
            condition.unlock()
            throw SupervisorError(process: launch.name, "not started: interrupted by \(signalName(signal))")
        }
        processes.append(process)
        condition.unlock()
        try process.spawn()
        return process
    }

    /// Sends SIGKILL to every running process (continuing stopped ones) and waits briefly for their exits.
    public func killAll(deadline: Duration = .seconds(5)) {
        let running = all.filter { $0.isRunning }
        for process in running {
            process.signal(SIGKILL)
        }
        let end = ContinuousClock.now + deadline
        for process in running { _ = try? process.waitForExit(until: end) }
    }

    /// Waits until `predicate` holds (checked under the lock after every process event) or `deadline` passes.
    /// - Returns: `false` on timeout or interruption.
    public func wait(until deadline: ContinuousClock.Instant, _ predicate: () -> Bool) -> Bool {
        core.wait(until: deadline, predicate)
    }

    /// Wakes every waiter (for callers that change state the predicates look at).
    public func poke() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }
}

/// The lock, condition and interruption state a supervisor shares with its processes (whose reader threads may
/// outlive the supervisor object).
package final class SupervisorCore: @unchecked Sendable {  // @unchecked: `interruptedBy` is guarded by `condition`.
    let condition = NSCondition()
    var interruptedBy: Int32?
    let onLine: @Sendable (String, String) -> Void

    init(onLine: @escaping @Sendable (String, String) -> Void) { self.onLine = onLine }

    var interrupted: Int32? {
        condition.lock()
        defer { condition.unlock() }
        return interruptedBy
    }

    package func interrupt(_ number: Int32) {
        condition.lock()
        interruptedBy = number
        condition.broadcast()
        condition.unlock()
    }

    /// - Parameter interruptible: return `false` at once after an interruption (every wait but the wait for an
    ///   exit, which killAll relies on to reap what it killed).
    func wait(until deadline: ContinuousClock.Instant, interruptible: Bool = true, _ predicate: () -> Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !predicate() {
            if interruptible && interruptedBy != nil { return false }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return false }
            _ = condition.wait(until: Date().addingTimeInterval(min(remaining.seconds, 0.5)))
        }
        return true
    }
}

/// One supervised executable; restartable with the same arguments.
// @unchecked: mutable state is guarded by the supervisor's condition.
public final class SupervisedProcess: @unchecked Sendable {
    /// What was started: the arguments of the current run (``restart(arguments:)`` may change them).
    public var launch: ProcessLaunch {
        var launch = initialLaunch
        launch.arguments = arguments
        return launch
    }
    public var name: String { initialLaunch.name }
    public var executable: String { initialLaunch.executable }
    /// The arguments of the current run (``restart(arguments:)`` may change them).
    public var arguments: [String] {
        condition.lock()
        defer { condition.unlock() }
        return argumentsStorage
    }
    public var environment: [String: String] { initialLaunch.environment }
    /// `environment` is the whole environment, not additions to ours.
    public var replacingEnvironment: Bool { initialLaunch.replacingEnvironment }
    public var logPath: String? { initialLaunch.logPath }
    /// The process group every run joins (`nil`: the supervisor's own group).
    public var processGroup: pid_t? { initialLaunch.processGroup }
    private let initialLaunch: ProcessLaunch
    private let supervisor: SupervisorCore
    private var condition: NSCondition { supervisor.condition }

    // Guarded by `condition`.
    private var argumentsStorage: [String]
    private var incarnationsStorage: [Incarnation] = []
    private var linesStorage: [String] = []
    private var lineCursorOfIncarnation: [Int] = []
    private var openReaders = 0
    /// The current run's last stderr lines (at most ``stderrTailLines``), for error messages: read from the pipe,
    /// so they are there whatever `logPath` is (a file, our own stderr, none) and hold no earlier run's lines.
    private var stderrTailStorage: [String] = []
    private static let stderrTailLines = 3

    init(core: SupervisorCore, launch: ProcessLaunch) {
        self.supervisor = core
        self.initialLaunch = launch
        self.argumentsStorage = launch.arguments
    }

    /// Every run so far, the current one last.
    public var incarnations: [Incarnation] {
        condition.lock()
        defer { condition.unlock() }
        return incarnationsStorage
    }

    /// The pid of the current run.
    public var pid: pid_t? { incarnations.last?.pid }

    public var isRunning: Bool {
        guard let last = incarnations.last else { return false }
        return last.exit == nil
    }

    /// The exit of the current run, once it ended.
    public var exitStatus: ProcessExitStatus? { incarnations.last?.exit }

    /// The current run's exit, for predicates of ``ProcessSupervisor/wait(until:_:)`` (which hold the lock).
    public var exitStatusUnlocked: ProcessExitStatus? { incarnationsStorage.last?.exit }

    /// The signal our fault schedule sent the current run, for predicates (which hold the lock).
    public var expectedSignalUnlocked: Int32? { incarnationsStorage.last?.expectedSignal }

    /// Every stdout line so far, over all runs.
    public var lines: [String] {
        condition.lock()
        defer { condition.unlock() }
        return linesStorage
    }

    /// Starts the process again with the same arguments, or with `arguments` from now on (a server that bound
    /// `tcp://...:*` comes back on the port it got). - Throws: if it is still running or cannot be spawned.
    public func restart(arguments: [String]? = nil) throws {
        guard !isRunning else { throw SupervisorError(process: name, "cannot restart: still running") }
        if let arguments {
            condition.lock()
            argumentsStorage = arguments
            condition.unlock()
        }
        try spawn()
    }

    /// Sends `signal` to the current run. `SIGKILL` and `SIGTERM` also send `SIGCONT` so a stopped process obeys.
    public func signal(_ number: Int32, expected: Bool = false) {
        condition.lock()
        guard var last = incarnationsStorage.last, last.exit == nil else {
            condition.unlock()
            return
        }
        if expected {
            last.expectedSignal = number
            incarnationsStorage[incarnationsStorage.count - 1] = last
        }
        // Signalled under the lock: the waiter thread reaps (and so frees the pid) only under the same lock.
        _ = kill(last.pid, number)
        if number == SIGKILL || number == SIGTERM { _ = kill(last.pid, SIGCONT) }
        condition.unlock()
    }

    /// Marks the current run's exit by `number` as expected (a crash the run was told to make), once it ended.
    public func expectExit(by number: Int32) {
        condition.lock()
        if let index = incarnationsStorage.indices.last { incarnationsStorage[index].expectedSignal = number }
        condition.unlock()
    }

    /// Waits for the current run's stdout line that starts with `prefix` (default `ready`).
    /// - Returns: the line. - Throws: ``SupervisorError`` if the process exits first or the deadline passes.
    @discardableResult
    public func waitForLine(prefix: String = ReadyLine.word, timeout: Duration) throws -> String {
        let deadline = ContinuousClock.now + timeout
        var found: String?
        var exited: ProcessExitStatus?
        condition.lock()
        let from = lineCursorOfIncarnation.last ?? 0
        condition.unlock()
        let ok = supervisor.wait(until: deadline) {
            if let line = linesStorage[from...].first(where: { $0.hasPrefix(prefix) }) {
                found = line
                return true
            }
            // Exited and every reader is drained: the line will not come.
            if let exit = incarnationsStorage.last?.exit, openReaders == 0 {
                exited = exit
                return true
            }
            return false
        }
        if let found {
            if prefix == ReadyLine.word {
                condition.lock()
                if !incarnationsStorage.isEmpty { incarnationsStorage[incarnationsStorage.count - 1].readyLine = found }
                condition.unlock()
            }
            return found
        }
        // Our own stderr is no log to point at: its lines are already on the screen.
        let log = logPath.flatMap { $0 == "/dev/stderr" ? nil : " (log: \($0))" } ?? ""
        let expected = prefix.trimmingCharacters(in: .whitespaces)
        if let exited {
            throw SupervisorError(process: name, "exited (\(exited)) before printing '\(expected) ...'\(log)\(tail())")
        }
        if let signal = supervisor.interrupted {
            throw SupervisorError(process: name, "interrupted by \(signalName(signal))")
        }
        _ = ok
        throw SupervisorError(
            process: name,
            "did not print '\(expected) ...' within \(durationText(timeout))\(log)\(tail())"
        )
    }

    /// The current run's state with respect to its line starting with `prefix`, without waiting, for predicates of
    /// ``ProcessSupervisor/wait(until:_:)`` (which hold the lock): a loop that watches many processes at once.
    public func readinessUnlocked(prefix: String = ReadyLine.word) -> Readiness {
        let from = lineCursorOfIncarnation.last ?? 0
        if let line = linesStorage[from...].first(where: { $0.hasPrefix(prefix) }) { return .ready(line) }
        if let exit = incarnationsStorage.last?.exit, openReaders == 0 { return .exited(exit) }
        return .waiting
    }

    /// ``readinessUnlocked(prefix:)`` taking the lock; a `ready` line found is kept as the run's ``Incarnation/readyLine``.
    public func readiness(prefix: String = ReadyLine.word) -> Readiness {
        condition.lock()
        defer { condition.unlock() }
        let state = readinessUnlocked(prefix: prefix)
        if case .ready(let line) = state, prefix == ReadyLine.word, !incarnationsStorage.isEmpty {
            incarnationsStorage[incarnationsStorage.count - 1].readyLine = line
        }
        return state
    }

    /// The current run's last stderr lines, for an error message.
    package func tail() -> String {
        condition.lock()
        let lines = stderrTailStorage
        condition.unlock()
        guard !lines.isEmpty else { return "" }
        return "; last log lines:\n  " + lines.joined(separator: "\n  ")
    }

    /// Waits for the current run to exit. - Returns: its status. - Throws: on timeout.
    @discardableResult
    public func waitForExit(timeout: Duration) throws -> ProcessExitStatus {
        try waitForExit(until: .now + timeout)
    }

    @discardableResult
    public func waitForExit(until deadline: ContinuousClock.Instant) throws -> ProcessExitStatus {
        var status: ProcessExitStatus?
        _ = supervisor.wait(until: deadline, interruptible: false) {
            status = incarnationsStorage.last?.exit
            return status != nil
        }
        if status == nil {
            condition.lock()
            status = incarnationsStorage.last?.exit
            condition.unlock()
        }
        guard let status else { throw SupervisorError(process: name, "did not exit in time") }
        // The exit can be collected before the reader threads read the last lines the process wrote: wait for
        // its pipes' end of file too, so `lines` is complete (bounded, in case something else holds a write end).
        let drained = min(deadline, .now + .seconds(2))
        _ = supervisor.wait(until: drained, interruptible: false) { openReaders == 0 }
        return status
    }

    /// Waits for the current run to exit and for the end of its stdout and stderr, so ``lines`` holds every line
    /// it wrote. - Returns: its status. - Throws: if both have not happened by `timeout`.
    @discardableResult
    public func waitForEnd(timeout: Duration) throws -> ProcessExitStatus {
        var status: ProcessExitStatus?
        _ = supervisor.wait(until: .now + timeout, interruptible: false) {
            status = incarnationsStorage.last?.exit
            return status != nil && openReaders == 0
        }
        guard let status, !isReading else {
            throw SupervisorError(
                process: name,
                "did not finish within \(durationText(timeout)) (running: \(isRunning))"
            )
        }
        return status
    }

    private var isReading: Bool {
        condition.lock()
        defer { condition.unlock() }
        return openReaders > 0
    }

    // MARK: spawning

    /// Held from making a run's pipes until they are close-on-exec and the run is spawned, by every supervisor:
    /// another spawn in between would inherit the write ends and keep our readers from seeing end-of-file.
    static let spawnLock = NSLock()

    func spawn() throws {
        // Pipes are made close-on-exec while holding the lock every spawn takes, so no other worker inherits them
        // (an inherited write end would keep a reader from seeing end-of-file). pipe2 is not visible from Swift.
        Self.spawnLock.lock()
        defer { Self.spawnLock.unlock() }
        condition.lock()
        var outPipe: [Int32] = [0, 0]
        var errPipe: [Int32] = [0, 0]
        guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
            condition.unlock()
            throw SupervisorError(process: name, "pipe failed: \(String(cString: strerror(errno)))")
        }
        for fd in outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)

        let merged = initialLaunch.startingEnvironment
        let argv = [executable] + argumentsStorage
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in cArgs { free(pointer) }
            for pointer in cEnv { free(pointer) }
        }
        // Our own SignalWatcher ignores SIGINT/SIGTERM, and ignored signals survive exec: give workers the defaults.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        setDefaultSignals(&attributes, processGroup: processGroup)
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, cArgs, cEnv)
        close(outPipe[1])
        close(errPipe[1])
        guard result == 0 else {
            condition.unlock()
            close(outPipe[0])
            close(errPipe[0])
            throw SupervisorError(process: name, "could not start \(executable): \(String(cString: strerror(result)))")
        }
        incarnationsStorage.append(
            Incarnation(pid: pid, startedAt: Date(), exit: nil, expectedSignal: nil, readyLine: nil)
        )
        lineCursorOfIncarnation.append(linesStorage.count)
        stderrTailStorage = []
        openReaders += 2
        condition.unlock()

        let spawned = pid
        let outFD = outPipe[0]
        let errFD = errPipe[0]
        let logFD: Int32 =
            logPath == "/dev/stderr"
            ? fcntl(2, F_DUPFD_CLOEXEC, 0)
            : logPath.map { open($0, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) } ?? -1
        startThread(name: "sim.\(name).out") { [self] in readLines(outFD) }
        startThread(name: "sim.\(name).err") { [self] in copyStderr(errFD, to: logFD) }
        startThread(name: "sim.\(name).wait") { [self] in reap(spawned) }
    }

    private func readLines(_ fd: Int32) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            pending.append(contentsOf: buffer[0..<count])
            while let newline = pending.firstIndex(of: 0x0A) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                deliver(line)
            }
        }
        if !pending.isEmpty { deliver(String(decoding: pending, as: UTF8.self)) }
        close(fd)
        readerClosed()
    }

    private func deliver(_ line: String) {
        condition.lock()
        if ReadyLine(parsing: line) != nil, let last = incarnationsStorage.indices.last,
            incarnationsStorage[last].readyAt == nil
        {
            incarnationsStorage[last].readyAt = Date()
        }
        linesStorage.append(line)
        condition.broadcast()
        condition.unlock()
        supervisor.onLine(name, line)
    }

    private func copyStderr(_ fd: Int32, to logFD: Int32) {
        var buffer = [UInt8](repeating: 0, count: 8192)
        var pending: [UInt8] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            if logFD >= 0 { _ = buffer.withUnsafeBytes { write(logFD, $0.baseAddress, count) } }
            pending.append(contentsOf: buffer[0..<count])
            var complete: [String] = []
            while let newline = pending.firstIndex(of: 0x0A) {
                complete.append(String(decoding: pending[..<newline], as: UTF8.self))
                pending.removeSubrange(...newline)
            }
            // A line longer than the buffer is kept whole only up to 8 KiB: the tail is for a message.
            if pending.count > 8192 { pending.removeFirst(pending.count - 8192) }
            if !complete.isEmpty { keepStderrLines(complete) }
        }
        if !pending.isEmpty { keepStderrLines([String(decoding: pending, as: UTF8.self)]) }
        close(fd)
        if logFD >= 0 { close(logFD) }
        readerClosed()
    }

    private func keepStderrLines(_ lines: [String]) {
        let kept = lines.filter { !$0.isEmpty }.suffix(Self.stderrTailLines)
        guard !kept.isEmpty else { return }
        condition.lock()
        stderrTailStorage.append(contentsOf: kept)
        if stderrTailStorage.count > Self.stderrTailLines {
            stderrTailStorage.removeFirst(stderrTailStorage.count - Self.stderrTailLines)
        }
        condition.unlock()
    }

    private func readerClosed() {
        condition.lock()
        openReaders -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func reap(_ pid: pid_t) {
        var status: Int32 = 0
        // Wait without reaping first, so the pid stays ours while `signal` may still target it.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        condition.lock()
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exit: ProcessExitStatus
        if status & 0x7f == 0 {
            exit = .exited((status >> 8) & 0xff)
        } else {
            exit = .signaled(status & 0x7f)
        }
        if let index = incarnationsStorage.lastIndex(where: { $0.pid == pid }) {
            incarnationsStorage[index].exit = exit
            incarnationsStorage[index].endedAt = Date()
        }
        condition.broadcast()
        condition.unlock()
    }
}

/// Sets `attributes` so that the spawned program starts with SIGINT, SIGTERM, SIGPIPE and SIGHUP at their default
/// actions and no signal blocked (a SignalWatcher's ignored signals and a thread's mask survive exec), in
/// `processGroup` when one is given (`0`: a new group led by the program).
func setDefaultSignals(_ attributes: inout posix_spawnattr_t, processGroup: pid_t?) {
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for number in [SIGINT, SIGTERM, SIGPIPE, SIGHUP] { sigaddset(&defaults, number) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    var noMask = sigset_t()
    sigemptyset(&noMask)
    posix_spawnattr_setsigmask(&attributes, &noMask)
    var flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK
    if let processGroup {
        posix_spawnattr_setpgroup(&attributes, processGroup)
        flags |= POSIX_SPAWN_SETPGROUP
    }
    posix_spawnattr_setflags(&attributes, Int16(flags))
}
