import Foundation
import Testing

/// A real child process started by a test: stdout read line by line while it runs, stderr kept in a file,
/// always killed by `stop()` / `kill()` (call them in `defer`).
final class TestProcess: @unchecked Sendable {  // @unchecked: mutable state is behind `lines`' lock or set once.
    let process = Process()
    let name: String
    private let lines = LineBuffer()
    private let newLine = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    let stderrPath: String

    /// The directory holding the package's built executables (next to the test bundle).
    static var binDirectory: URL {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("askrelay-broker").path) { return url }
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(".build/debug")
    }

    /// - Parameters:
    ///   - executableURL: a program outside the package's build (default: `executable` in `binDirectory`).
    ///   - environment: the whole environment of the process (default: the test's own).
    init(
        _ executable: String, _ arguments: [String], logDirectory: String, executableURL: URL? = nil,
        environment: [String: String]? = nil
    ) throws {
        name = executable
        process.executableURL = executableURL ?? Self.binDirectory.appendingPathComponent(executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let stdout = Pipe()
        process.standardOutput = stdout
        stderrPath = logDirectory + "/\(executable)-\(UUID().uuidString.prefix(8)).log"
        FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardInput = FileHandle.nullDevice
        let lines = self.lines
        let newLine = self.newLine
        let reader = stdout.fileHandleForReading
        let exited = self.exited
        process.terminationHandler = { _ in
            exited.signal()
            newLine.signal()
        }
        try process.run()
        Thread.detachNewThread {
            var buffer = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: 0x0A) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    lines.append(line)
                    newLine.signal()
                }
            }
            lines.end()
            newLine.signal()
        }
    }

    var pid: Int32 { process.processIdentifier }
    var output: [String] { lines.all }

    /// Waits for a stdout line starting with `prefix`. - Throws: on timeout or exit, with the process's stderr.
    func waitForLine(startingWith prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let line = output.first(where: { $0.hasPrefix(prefix) }) { return line }
            let left = ContinuousClock.now.duration(to: deadline)
            // A process that exited may have written its last lines after the reader's last look: only the end of
            // its stdout (everything read) or the deadline says that no such line will come.
            if left <= .zero || (lines.isEnded && output.first(where: { $0.hasPrefix(prefix) }) == nil) {
                let log = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
                throw ProcessFailure("\(name) printed no '\(prefix)' line (running: \(process.isRunning)); stderr:\n\(log.suffix(2000))")
            }
            _ = newLine.wait(timeout: .now() + .milliseconds(Int(min(left.components.seconds * 1000 + 1, 200))))
        }
    }

    /// Waits for the process to exit and for the end of its stdout, so `output` holds every line it wrote.
    /// - Returns: the exit status. - Throws: if either does not happen within `timeout`.
    @discardableResult
    func waitForEnd(timeout: Duration = .seconds(20)) throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while !lines.isEnded || process.isRunning {
            let left = ContinuousClock.now.duration(to: deadline)
            if left <= .zero { throw ProcessFailure("\(name) did not finish within \(timeout) (running: \(process.isRunning))") }
            _ = newLine.wait(timeout: .now() + .milliseconds(Int(min(left.components.seconds * 1000 + 1, 200))))
        }
        return process.terminationStatus
    }

    /// The endpoint from a broker's `ready endpoints=...` line.
    func readyEndpoint() throws -> String {
        let line = try waitForLine(startingWith: "ready")
        guard let value = line.split(separator: " ").first(where: { $0.hasPrefix("endpoints=") }) else {
            throw ProcessFailure("no endpoints in '\(line)'")
        }
        return String(value.dropFirst("endpoints=".count).split(separator: ",")[0])
    }

    func signal(_ number: Int32) { if process.isRunning { kill(pid, number) } }

    /// SIGKILL and reap.
    func kill9() {
        signal(SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, then waits for a clean exit. - Returns: the exit status (or -1 if it had to be killed).
    @discardableResult
    func terminate(timeout: Duration = .seconds(10)) -> Int32 {
        guard process.isRunning else { return process.terminationStatus }
        signal(SIGTERM)
        let milliseconds = Int(timeout.components.seconds * 1000)
        if exited.wait(timeout: .now() + .milliseconds(milliseconds)) == .success { exited.signal() }
        if process.isRunning {
            kill9()
            return -1
        }
        return process.terminationStatus
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

final class LineBuffer: @unchecked Sendable {  // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var lines: [String] = []
    private var ended = false
    func append(_ line: String) { lock.withLock { lines.append(line) } }
    var all: [String] { lock.withLock { lines } }
    /// Stdout reached end of file: every line the process wrote is in `all`.
    func end() { lock.withLock { ended = true } }
    var isEnded: Bool { lock.withLock { ended } }
}

struct ProcessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
