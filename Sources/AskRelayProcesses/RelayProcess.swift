import AskBasics
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One askrelay process (or any program that prints a `ready` line): started, awaited by its ``ReadyLine``, signalled,
/// restarted and ended one way, for the cluster harness, `askrelay load`'s servers and the tests.
///
/// It is a ``SupervisedProcess`` of a ``ProcessSupervisor`` (its own, or one shared with other processes), with its
/// stdout kept line by line and its stderr in ``logPath`` (appended over restarts; `/dev/stderr`: copied to ours).
///
/// Fault control: ``kill()`` (SIGKILL), ``suspend()`` / ``resume()`` (SIGSTOP / SIGCONT), ``terminate(timeout:)``
/// (SIGTERM, returning the exit status), ``restart(timeout:)`` (same arguments, waits for its ready line), ``stop()``
/// (SIGTERM, then SIGKILL, never failing). One convention: each of the five fault calls blocks its thread until its
/// effect is visible (the exit reaped, every thread stopped or running again, the ready line read), and throws
/// ``RelayProcessError`` when that state cannot be reached — the process is gone (``suspend()``, ``resume()``), still
/// running (``restart(timeout:)``), or the effect did not show within its timeout. ``kill()`` and
/// ``terminate(timeout:)`` of a process that already ended return how it ended. Run them off the cooperative pool
/// (``onDedicatedThread(name:_:)``) in async code.
///
/// A process with a supervisor of its own is stopped (``stop()``) when it is released; one of a shared supervisor is
/// the supervisor's to end.
public final class RelayProcess: Sendable {
    /// The name, also the log file's in a cluster: `broker`, `limits`, `parent-1`, `askrelay-broker`...
    public let name: String
    /// The process's stderr: a file (appended over restarts), or `/dev/stderr` (copied to ours).
    public let logPath: String
    /// The supervised process underneath (every run, its lines, its exit).
    public let process: SupervisedProcess
    /// How long ``waitUntilReady(timeout:)`` and ``restart(timeout:)`` wait by default.
    public let readyTimeout: Duration
    private let supervisor: ProcessSupervisor
    private let ownsSupervisor: Bool
    /// The arguments of the next restart (a broker's are rewritten to the endpoint it bound first).
    private let restartArguments = Mutex<[String]?>(nil)

    /// Starts `launch` (it does not wait for its ready line: ``waitUntilReady(timeout:)``); its stderr goes to its
    /// `logPath` (appended; created empty if missing; `nil` or `/dev/stderr`: copied to ours).
    /// - Parameters:
    ///   - supervisor: a supervisor shared with other processes (a cluster's); `nil`: one of its own.
    ///   - readyTimeout: how long ``waitUntilReady(timeout:)`` and ``restart(timeout:)`` wait by default.
    /// - Throws: ``RelayProcessError`` when the executable is not an executable file or cannot be spawned.
    public init(_ launch: ProcessLaunch, supervisor: ProcessSupervisor? = nil, readyTimeout: Duration = .seconds(30))
        throws
    {
        var launch = launch
        let logPath = launch.logPath ?? "/dev/stderr"
        launch.logPath = logPath
        if logPath != "/dev/stderr", !FileManager.default.fileExists(atPath: logPath) {
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        }
        let owner = supervisor ?? ProcessSupervisor()
        do { process = try owner.start(launch) } catch {
            let program = (launch.executable as NSString).lastPathComponent
            throw RelayProcessError("\(program) could not be started: \(error)")
        }
        name = launch.name
        self.logPath = logPath
        self.readyTimeout = readyTimeout
        self.supervisor = owner
        ownsSupervisor = supervisor == nil
        Self.running.withLock { $0[ObjectIdentifier(self)] = process }
    }

    /// ``init(_:supervisor:readyTimeout:)`` of a ``ProcessLaunch`` with these fields.
    /// - Parameters:
    ///   - name: the process's name in messages (default: the executable's file name).
    ///   - environment: added to ours without its `ASKRELAY_*` variables (see
    ///     ``ProcessSupervisor/inheritedEnvironment(_:)``); the whole environment with `replacingEnvironment`.
    ///   - logPath: where its stderr goes (appended; created empty if missing); `/dev/stderr`: copied to ours.
    ///   - processGroup: the group every run joins (a ``ProcessGroupGuard``'s); `nil`: ours.
    public convenience init(
        name: String? = nil,
        executable: String,
        arguments: [String],
        environment: [String: String] = [:],
        replacingEnvironment: Bool = false,
        logPath: String = "/dev/stderr",
        processGroup: pid_t? = nil,
        supervisor: ProcessSupervisor? = nil,
        readyTimeout: Duration = .seconds(30)
    ) throws {
        let launch = ProcessLaunch(
            name: name,
            executable: executable,
            arguments: arguments,
            environment: environment,
            replacingEnvironment: replacingEnvironment,
            logPath: logPath,
            processGroup: processGroup
        )
        try self.init(launch, supervisor: supervisor, readyTimeout: readyTimeout)
    }

    /// Starts a server that this program alone ends (`askrelay load`'s broker, proxy and workers): with a supervisor of
    /// its own, in ``ProcessGroupGuard/program``'s group (so a kill -9 of this program does not leave it running), and
    /// waits up to `timeout` for its ready line (``ready`` holds it then).
    /// - Throws: ``RelayProcessError`` when it cannot start, exits first (as soon as it does, with its exit and last
    ///   stderr lines) or says nothing in time (it is stopped then).
    public static func server(
        executable: String,
        arguments: [String],
        timeout: Duration = .seconds(15),
        logPath: String = "/dev/stderr"
    ) throws -> RelayProcess {
        let server = try RelayProcess(
            executable: executable,
            arguments: arguments,
            logPath: logPath,
            processGroup: ProcessGroupGuard.program?.processGroup,
            readyTimeout: timeout
        )
        try server.waitUntilReady(stoppingOnFailure: true)
        return server
    }

    deinit {
        if ownsSupervisor { stop() }
        _ = Self.running.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
    }

    // MARK: State

    /// The pid of the current run (`nil` before the first).
    public var pid: Int32? { process.pid }
    public var isRunning: Bool { process.isRunning }
    /// How the current run ended, once it did.
    public var exitStatus: ProcessExitStatus? { process.exitStatus }
    /// Every run so far (pid, start, exit, ready line), the current one last.
    public var runs: [Incarnation] { process.incarnations }
    /// Every stdout line so far, over all runs.
    public var output: [String] { process.lines }
    /// The current run's `ready ...` line as printed, once it was.
    public var readyLine: String? { process.incarnations.last?.readyLine }
    /// The current run's ready line, parsed, once it was printed.
    public var ready: ReadyLine? { readyLine.flatMap(ReadyLine.init(parsing:)) }

    /// The stderr log so far (empty when it goes to our own stderr).
    public var stderr: String {
        logPath == "/dev/stderr" ? "" : (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// The log so far: stdout lines, then the stderr log file.
    public var log: String {
        "== \(name) stdout\n" + output.joined(separator: "\n") + "\n== \(name) stderr (\(logPath))\n" + stderr
    }

    /// The last `characters` of the stderr log, for a message.
    public func logTail(_ characters: Int = 2000) -> String { String(stderr.suffix(characters)) }

    // MARK: Waiting

    /// Waits for the current run's ready line (`ready` or `ready key=value ...`).
    /// - Parameter stoppingOnFailure: ``stop()`` the process when it does not come (a server nobody else ends).
    /// - Returns: the line. - Throws: ``RelayProcessError`` with the log's tail when the process exits first (as soon
    ///   as it does), is interrupted, or says nothing within `timeout` (default ``readyTimeout``).
    @discardableResult
    public func waitUntilReady(timeout: Duration? = nil, stoppingOnFailure: Bool = false) throws -> ReadyLine {
        let line: String
        do { line = try process.waitForLine(prefix: ReadyLine.word, timeout: timeout ?? readyTimeout) } catch {
            if stoppingOnFailure { stop() }
            throw failure("\(error)")
        }
        guard let ready = ReadyLine(parsing: line) else {
            if stoppingOnFailure { stop() }
            throw failure("\(name) printed '\(line)', not a ready line")
        }
        return ready
    }

    /// Waits for the current run's stdout line starting with `prefix`. - Throws: ``RelayProcessError`` with the log's
    /// tail when the process exits first or the line does not come within `timeout`.
    @discardableResult
    public func waitForLine(startingWith prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        do { return try process.waitForLine(prefix: prefix, timeout: timeout) } catch { throw failure("\(error)") }
    }

    /// Waits for the current run's exit and the end of its output, so ``output`` holds every line it wrote.
    /// - Returns: the exit status. - Throws: ``RelayProcessError`` when both have not happened within `timeout`.
    @discardableResult
    public func wait(timeout: Duration) throws -> ProcessExitStatus {
        do { return try process.waitForEnd(timeout: timeout) } catch {
            throw RelayProcessError("\(name) did not exit within \(durationText(timeout)): \(error)")
        }
    }

    // MARK: Signals

    /// Sends `number` to the current run (SIGKILL and SIGTERM also SIGCONT, so a stopped process obeys).
    public func signal(_ number: Int32) { process.signal(number) }

    /// SIGKILL (continuing a stopped process) and waits until the exit is reaped. - Returns: the exit status.
    @discardableResult
    public func kill() throws -> ProcessExitStatus {
        process.signal(SIGKILL, expected: true)
        return try wait(timeout: .seconds(30))
    }

    /// SIGSTOP, and waits until every thread of the process is stopped: the kernel stops them after kill(2) returns,
    /// so without the wait a message sent next could still be handled (a story's "stop, then ask" once got its
    /// answer). The process stays alive but runs nothing (its sockets stay open, it answers nothing) until
    /// ``resume()``. - Throws: ``RelayProcessError`` if it is gone, or not stopped within 30 s.
    public func suspend() throws {
        guard process.isRunning, let pid else { throw RelayProcessError("\(name) is not running; nothing to suspend") }
        process.signal(SIGSTOP, expected: true)
        try ProcessState.waitUntilStopped(pid, timeout: .seconds(30))
    }

    /// SIGCONT after ``suspend()``, and waits until no thread of the process is stopped any more.
    /// - Throws: ``RelayProcessError`` if it is gone (killed, exited: there is nothing to continue), or still stopped
    ///   after 30 s.
    public func resume() throws {
        guard process.isRunning, let pid else { throw RelayProcessError("\(name) is not running; nothing to resume") }
        process.signal(SIGCONT)
        do { try ProcessState.waitUntilContinued(pid, timeout: .seconds(30)) } catch {
            throw RelayProcessError("\(name) could not be resumed: \(error)")
        }
    }

    /// SIGTERM (continuing a stopped process) and waits for the exit. - Returns: the exit status (`exit 0` for the
    /// askrelay executables' clean drain). - Throws: ``RelayProcessError`` when it has not exited in `timeout` (it
    /// keeps running; ``kill()`` it).
    @discardableResult
    public func terminate(timeout: Duration = .seconds(20)) throws -> ProcessExitStatus {
        process.signal(SIGTERM, expected: true)
        return try wait(timeout: timeout)
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`; never fails. Safe to call more than once.
    /// - Returns: the exit status, `nil` if even SIGKILL was not seen to end it.
    @discardableResult
    public func stop(grace: Duration = .seconds(5)) -> ProcessExitStatus? {
        if let exit = process.exitStatus { return exit }
        process.signal(SIGTERM)
        if let exit = try? process.waitForExit(timeout: grace) { return exit }
        process.signal(SIGKILL)
        return try? process.waitForExit(timeout: .seconds(60))
    }

    /// Starts the process again with its arguments (and so its data folder), in its process group, and waits for its
    /// ready line. - Throws: ``RelayProcessError`` when it is still running, cannot start or never says ready.
    @discardableResult
    public func restart(timeout: Duration? = nil) throws -> ReadyLine {
        guard !process.isRunning else {
            throw RelayProcessError("\(name) is still running; kill or terminate it first")
        }
        do { try process.restart(arguments: restartArguments.withLock { $0 }) } catch {
            throw RelayProcessError("\(name) could not be restarted: \(error)")
        }
        return try waitUntilReady(timeout: timeout)
    }

    /// The arguments of every later ``restart(timeout:)`` (a server that bound `tcp://...:*` comes back on the port
    /// it got).
    public func setRestartArguments(_ arguments: [String]) { restartArguments.withLock { $0 = arguments } }

    // MARK: Every process

    /// Processes started and not yet released, so that a signal handler can end them all.
    private static let running = Mutex<[ObjectIdentifier: SupervisedProcess]>([:])

    /// Sends SIGTERM to every process this program started as a ``RelayProcess`` that still runs (for a SIGINT /
    /// SIGTERM handler; does not wait).
    public static func terminateAll() {
        for process in running.withLock({ Array($0.values) }) where process.isRunning { process.signal(SIGTERM) }
    }

    private func failure(_ message: String) -> RelayProcessError {
        // Our own stderr is no log to show: its lines are on the screen already (the supervisor's message has the
        // last ones).
        guard logPath != "/dev/stderr" else { return RelayProcessError(message) }
        return RelayProcessError("\(message); stderr of \(name) (\(logPath)):\n\(logTail())")
    }
}

extension ProcessGroupGuard {
    /// A group that dies with this program however it ends, made on first use, for processes that must not outlive
    /// it (`askrelay load`'s servers); `nil` if its guard process could not start (they then share our group).
    public static let program: ProcessGroupGuard? = try? ProcessGroupGuard()
}

extension ProcessExitStatus {
    /// The exit as Foundation's `Process.terminationStatus` gives it: the code, or the number of the signal.
    public var code: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let number): number
        }
    }
}
