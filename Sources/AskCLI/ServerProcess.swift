import Foundation
import Synchronization

/// A server executable started for a benchmark: a ``SupervisedProcess`` of its own supervisor (stdout read line by
/// line, stderr copied to ours), considered up once it prints its `ready ...` line, and always stopped with SIGTERM
/// (then SIGKILL) by ``stop()``.
public final class ServerProcess: Sendable {
    public let process: SupervisedProcess
    private let supervisor: ProcessSupervisor
    /// The `key=value` fields of the ready line.
    public let readyFields: [String: String]
    public let readyLine: String

    /// Starts `executable` with `arguments` and waits (up to `timeout`) for a stdout line starting with `ready `.
    /// - Parameter logPath: where its stderr goes (appended); `/dev/stderr`: copied to ours.
    /// - Throws: ``SupervisorError`` if it cannot start, exits first (as soon as it does), or says nothing in time (it
    ///   is killed then).
    public init(
        executable: URL,
        arguments: [String],
        timeout: Duration = .seconds(15),
        logPath: String = "/dev/stderr"
    ) throws {
        let supervisor = ProcessSupervisor()
        let name = executable.lastPathComponent
        let process = try supervisor.start(
            name: name,
            executable: executable.path,
            arguments: arguments,
            logPath: logPath,
            processGroup: Self.group?.processGroup
        )
        Self.running.withLock { $0[ObjectIdentifier(process)] = process }
        let line: String
        do { line = try process.waitForLine(prefix: "ready ", timeout: timeout) } catch {
            Self.stop(process)
            // The supervisor's error says which: it exited first (at once, with its exit and last stderr lines), it
            // was interrupted, or it said nothing in time.
            throw error
        }
        var fields: [String: String] = [:]
        for field in line.dropFirst("ready ".count).split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        self.supervisor = supervisor
        self.process = process
        readyLine = line
        readyFields = fields
    }

    /// The pid of the server's run.
    public var pid: Int32 { process.pid ?? 0 }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s. Safe to call more than once.
    public func stop() { Self.stop(process) }

    /// The process group every server joins, which dies with this process however it ends: a SIGKILL of askrelay load
    /// must not leave its broker running. A terminal's Ctrl-C reaches askrelay alone, which stops its servers itself.
    /// `nil` if the guard could not start; the servers then share our group.
    private static let group: ProcessGroupGuard? = try? ProcessGroupGuard()

    /// Processes started and not yet stopped, so a signal handler can stop them all.
    private static let running = Mutex<[ObjectIdentifier: SupervisedProcess]>([:])

    /// Sends SIGTERM to every server still running (for a SIGINT/SIGTERM handler; does not wait).
    public static func terminateAll() {
        for process in running.withLock({ Array($0.values) }) where process.isRunning { process.signal(SIGTERM) }
    }

    static func stop(_ process: SupervisedProcess) {
        if process.isRunning {
            process.signal(SIGTERM)
            if (try? process.waitForExit(timeout: .seconds(5))) == nil {
                process.signal(SIGKILL)
                _ = try? process.waitForExit(timeout: .seconds(5))
            }
        }
        _ = running.withLock { $0.removeValue(forKey: ObjectIdentifier(process)) }
    }

    deinit { stop() }
}
