import AskCLI
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One process of a cluster (the broker, the limits worker, a parent or child worker): a ``SupervisedProcess`` of
/// the cluster's supervisor, in the cluster's process group, with its stderr in `<folder>/<name>.log` and its
/// stdout kept line by line.
///
/// Fault control: ``kill()`` (SIGKILL), ``suspend()`` / ``resume()`` (SIGSTOP / SIGCONT), ``terminate(timeout:)``
/// (SIGTERM, returning the exit status), ``restart(timeout:)`` (same arguments, same data folder, waits for its
/// `ready` line). Every call blocks its thread until its effect is visible (the exit reaped, the ready line read);
/// the `async` cluster calls run them off the cooperative pool.
public final class ClusterProcess: Sendable {
    /// The name, also the log file's: `broker`, `limits`, `parent-1`, `child-1`...
    public let name: String
    /// `<folder>/<name>.log`: the process's stderr (its log lines), appended over restarts.
    public let logPath: String
    let process: SupervisedProcess
    let readyTimeout: Duration
    /// The arguments of the next restart (the broker's are rewritten to the endpoint it bound first).
    private let restartArguments: Mutex<[String]?>

    init(name: String, logPath: String, process: SupervisedProcess, readyTimeout: Duration) {
        self.name = name
        self.logPath = logPath
        self.process = process
        self.readyTimeout = readyTimeout
        restartArguments = Mutex(nil)
    }

    /// The pid of the current run (`nil` before the first).
    public var pid: Int32? { process.pid }
    public var isRunning: Bool { process.isRunning }
    /// How the current run ended, once it did.
    public var exitStatus: ProcessExitStatus? { process.exitStatus }
    /// Every run so far (pid, start, exit, ready line), the current one last.
    public var runs: [Incarnation] { process.incarnations }
    /// Every stdout line so far, over all runs.
    public var output: [String] { process.lines }
    /// The current run's `ready ...` line, once printed.
    public var readyLine: String? { process.incarnations.last?.readyLine }

    /// The log so far: stdout lines, then the stderr log file.
    public var log: String {
        let stderr = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return "== \(name) stdout\n" + output.joined(separator: "\n") + "\n== \(name) stderr (\(logPath))\n" + stderr
    }

    /// Waits for the current run's `ready` line. - Throws: ``ClusterError`` with the log's tail when it exits
    /// first or says nothing within the timeout.
    @discardableResult
    func waitUntilReady(timeout: Duration? = nil) throws -> String {
        do { return try process.waitForLine(prefix: "ready", timeout: timeout ?? readyTimeout) } catch {
            let stderr = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            throw ClusterError("\(error); stderr of \(name) (\(logPath)):\n\(stderr.suffix(2000))")
        }
    }

    func setRestartArguments(_ arguments: [String]) { restartArguments.withLock { $0 = arguments } }

    /// SIGKILL (continuing a stopped process) and waits until the exit is reaped. No-op when not running.
    /// - Returns: the exit status.
    @discardableResult
    public func kill() throws -> ProcessExitStatus {
        process.signal(SIGKILL, expected: true)
        return try wait(timeout: .seconds(30))
    }

    /// SIGSTOP: the process stays alive but runs nothing (its sockets stay open, it answers nothing) until
    /// ``resume()``.
    public func suspend() { process.signal(SIGSTOP, expected: true) }

    /// SIGCONT after ``suspend()``.
    public func resume() { process.signal(SIGCONT) }

    /// SIGTERM (continuing a stopped process) and waits for the exit. - Returns: the exit status (`exit 0` for
    /// the askrelay executables' clean drain). - Throws: ``ClusterError`` when it has not exited in `timeout`
    /// (it keeps running; ``kill()`` it).
    @discardableResult
    public func terminate(timeout: Duration = .seconds(20)) throws -> ProcessExitStatus {
        process.signal(SIGTERM, expected: true)
        return try wait(timeout: timeout)
    }

    /// Waits for the current run's exit (and the end of its output). - Throws: ``ClusterError`` on timeout.
    @discardableResult
    public func wait(timeout: Duration) throws -> ProcessExitStatus {
        do { return try process.waitForEnd(timeout: timeout) } catch {
            throw ClusterError("\(name) did not exit within \(durationText(timeout)): \(error)")
        }
    }

    /// Starts the process again with its arguments and data folder (the journal or limits store it had), in the
    /// cluster's process group, and waits for its `ready` line. The broker comes back on the endpoint it bound
    /// first. - Throws: ``ClusterError`` if it is still running, cannot start or never says ready.
    @discardableResult
    public func restart(timeout: Duration? = nil) throws -> String {
        guard !process.isRunning else { throw ClusterError("\(name) is still running; kill or terminate it first") }
        do { try process.restart(arguments: restartArguments.withLock { $0 }) } catch {
            throw ClusterError("\(name) could not be restarted: \(error)")
        }
        return try waitUntilReady(timeout: timeout)
    }
}

/// One process's log, as ``AskRelayCluster/logs`` returns them.
public struct ClusterLog: Sendable, Hashable {
    /// The process's name (`broker`, `limits`, ...).
    public let name: String
    /// The stderr log file.
    public let path: String
    /// Stdout lines, then the stderr log.
    public let text: String
}
