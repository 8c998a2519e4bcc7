import AskModel
import AskSimulation
import Foundation

/// The processes a story runs against: a real `askrelay-broker` and `askrelay-limits`, started fresh for the story
/// in its own folders (journal, store, logs), the broker on an `ipc://` path that stays the same across a restart.
final class StoryProcesses: @unchecked Sendable {  // @unchecked: used by one story's task at a time.
    let supervisor = ProcessSupervisor()
    let endpoint: String
    let socketFolder: String
    let logs: String
    let binDirectory: URL
    var processes: [StoryProcess: SupervisedProcess] = [:]

    /// How long a started process has to print its ready line.
    static let readyTimeout: Duration = .seconds(30)
    /// Heartbeat of every process and connection of a story: a killed broker is noticed within a second.
    static let heartbeat = "200ms"

    init(logs: String, binDirectory: URL) throws {
        self.logs = logs
        self.binDirectory = binDirectory
        // ipc paths are limited to 107 bytes: a short folder under /tmp, not the logs folder.
        var template = Array("/tmp/askrelay-story-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw StoryRunError("cannot create a folder under /tmp") }
        socketFolder = String(cString: made)
        endpoint = "ipc://\(socketFolder)/broker.ipc"
    }

    /// Starts the broker, then the limits worker seeded with the story's limits state, each waiting for `ready`.
    /// - Throws: ``StoryRunError`` naming the process and its log.
    func start(_ story: Story) throws {
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true)
        let statePath = (logs as NSString).appendingPathComponent("limits-state.json")
        try Self.limitsState(story).write(to: URL(fileURLWithPath: statePath))
        try launch(
            .broker,
            "askrelay-broker",
            [
                "--endpoint", endpoint, "--data-dir", path("broker-data"), "--durability", story.broker.durability,
                "--pending-window", story.broker.pendingWindow.text, "--heartbeat", Self.heartbeat,
            ]
        )
        try launch(
            .limits,
            "askrelay-limits",
            [
                "--broker", endpoint, "--id", "limits-1", "--state", statePath, "--data-dir", path("limits-data"),
                "--heartbeat", Self.heartbeat,
            ]
        )
    }

    func path(_ name: String) -> String { (logs as NSString).appendingPathComponent(name) }

    private func launch(_ process: StoryProcess, _ executable: String, _ arguments: [String]) throws {
        let url = binDirectory.appendingPathComponent(executable)
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw StoryRunError(
                "\(executable) not found in \(binDirectory.path); build with `swift build` or set ASKRELAY_BIN_DIR"
            )
        }
        // The caller's ASKRELAY_* variables are not the story's: one such as ASKRELAY_CURVE_KEY or
        // ASKRELAY_DURABILITY would change what the processes do.
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ASKRELAY_") }
        let started = try supervisor.start(
            name: process.rawValue,
            executable: url.path,
            arguments: arguments,
            environment: environment,
            replacingEnvironment: true,
            logPath: path("\(process.rawValue).log")
        )
        processes[process] = started
        do { try started.waitForLine(timeout: Self.readyTimeout) } catch { throw StoryRunError("\(error)") }
    }

    /// Plays a fault step. - Returns: `nil` when it was done, else what went wrong.
    func fault(_ action: FaultAction, on name: StoryProcess) -> String? {
        guard let process = processes[name] else { return "\(name.rawValue) was never started" }
        switch action {
        case .kill, .term:
            guard process.isRunning else { return "\(name.rawValue) is not running" }
            process.signal(action == .kill ? SIGKILL : SIGTERM, expected: true)
            guard let status = try? process.waitForExit(timeout: .seconds(15)) else {
                process.signal(SIGKILL, expected: true)
                return "\(name.rawValue) did not exit within 15 s of SIGTERM"
            }
            if action == .term && !status.isSuccess { return "\(name.rawValue) exited \(status) after SIGTERM" }
        case .stop, .cont:
            guard process.isRunning else { return "\(name.rawValue) is not running" }
            process.signal(action == .stop ? SIGSTOP : SIGCONT, expected: true)
        case .restart:
            guard !process.isRunning else { return "\(name.rawValue) is still running; kill or term it first" }
            do {
                try process.restart()
                try process.waitForLine(timeout: Self.readyTimeout)
            } catch {
                return "\(name.rawValue) did not start again: \(error)"
            }
        }
        return nil
    }

    /// SIGKILL to everything still running, and the ipc folder removed.
    func stop() {
        for process in processes.values where process.isRunning { process.signal(SIGCONT) }
        for process in processes.values where process.isRunning {
            process.signal(SIGTERM, expected: true)
            if (try? process.waitForExit(timeout: .seconds(5))) == nil {
                process.signal(SIGKILL, expected: true)
                _ = try? process.waitForExit(timeout: .seconds(5))
            }
        }
        try? FileManager.default.removeItem(atPath: socketFolder)
    }

    /// The limits worker's state file (docs/workers.md, *State file*) for the story's `limits`.
    static func limitsState(_ story: Story) throws -> Data {
        var children: [String: Any] = [:]
        for (child, limits) in story.limits {
            var entry: [String: Any] = [:]
            if let value = limits.limitsEnabled { entry["limitsEnabled"] = value }
            if let value = limits.contactSyncSetUp { entry["contactSyncSetUp"] = value }
            if let value = limits.eligible { entry["eligible"] = value }
            entry["knownHandles"] = limits.knownHandles.map { ["kind": $0.kind.rawValue, "value": $0.value] }
            children[child] = entry
        }
        return try JSONSerialization.data(withJSONObject: ["children": children], options: [.sortedKeys])
    }
}

/// The processes of a story could not be started.
public struct StoryRunError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
