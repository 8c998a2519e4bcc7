import AskCLI
import AskRelayProcesses
import Foundation
import Testing

/// A real child process started by a test: a ``SupervisedProcess`` of its own supervisor (stdout read line by line
/// while it runs, stderr kept in a file), with the waits and messages tests use; always killed by `stop()` /
/// `kill()` (call them in `defer`) or, at the latest, when it is released.
final class TestProcess: Sendable {
    let process: SupervisedProcess
    private let supervisor: ProcessSupervisor
    let name: String
    let stderrPath: String

    /// The directory holding the package's built executables (next to the test bundle).
    static var binDirectory: URL {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("askrelay-broker").path) {
                return url
            }
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(".build/debug")
    }

    /// - Parameters:
    ///   - executableURL: a program outside the package's build (default: `executable` in `binDirectory`).
    ///   - environment: the whole environment of the process (default: the test's own).
    init(
        _ executable: String,
        _ arguments: [String],
        logDirectory: String,
        executableURL: URL? = nil,
        environment: [String: String]? = nil
    ) throws {
        name = executable
        stderrPath = logDirectory + "/\(executable)-\(UUID().uuidString.prefix(8)).log"
        FileManager.default.createFile(atPath: stderrPath, contents: nil)
        supervisor = ProcessSupervisor()
        process = try supervisor.start(
            name: executable,
            executable: (executableURL ?? Self.binDirectory.appendingPathComponent(executable)).path,
            arguments: arguments,
            environment: environment ?? [:],
            replacingEnvironment: environment != nil,
            logPath: stderrPath
        )
    }

    var pid: Int32 { process.pid ?? 0 }
    var output: [String] { process.lines }
    var isRunning: Bool { process.isRunning }

    /// Waits for a stdout line starting with `prefix`. - Throws: on timeout or exit, with the process's stderr.
    func waitForLine(startingWith prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        do { return try process.waitForLine(prefix: prefix, timeout: timeout) } catch {
            let log = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
            throw ProcessFailure(
                "\(name) printed no '\(prefix)' line (running: \(isRunning)); stderr:\n\(log.suffix(2000))"
            )
        }
    }

    /// Waits for the process to exit and for the end of its stdout, so `output` holds every line it wrote.
    /// - Returns: the exit status (the signal's number if a signal ended it). - Throws: if either does not happen
    ///   within `timeout`.
    @discardableResult
    func waitForEnd(timeout: Duration = .seconds(20)) throws -> Int32 {
        do { return Self.status(try process.waitForEnd(timeout: timeout)) } catch {
            throw ProcessFailure("\(name) did not finish within \(timeout) (running: \(isRunning))")
        }
    }

    /// The endpoint from a broker's `ready endpoints=...` line.
    func readyEndpoint() throws -> String {
        let line = try waitForLine(startingWith: "ready")
        guard let value = line.split(separator: " ").first(where: { $0.hasPrefix("endpoints=") }) else {
            throw ProcessFailure("no endpoints in '\(line)'")
        }
        return String(value.dropFirst("endpoints=".count).split(separator: ",")[0])
    }

    func signal(_ number: Int32) { process.signal(number) }

    /// SIGKILL and reap.
    func kill9() {
        signal(SIGKILL)
        _ = try? process.waitForExit(timeout: .seconds(60))
    }

    /// SIGTERM, then waits for a clean exit. - Returns: the exit status (or -1 if it had to be killed).
    @discardableResult
    func terminate(timeout: Duration = .seconds(10)) -> Int32 {
        if let exit = process.exitStatus { return Self.status(exit) }
        signal(SIGTERM)
        if let exit = try? process.waitForExit(timeout: timeout) { return Self.status(exit) }
        kill9()
        return -1
    }

    /// An exit as Foundation's `Process.terminationStatus` gives it: the code, or the number of the signal.
    static func status(_ exit: ProcessExitStatus) -> Int32 {
        switch exit {
        case .exited(let code): code
        case .signaled(let number): number
        }
    }
}

struct ProcessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
