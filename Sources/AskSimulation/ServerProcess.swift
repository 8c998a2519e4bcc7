import Foundation
import Synchronization

/// A server executable started for a benchmark: launched with a stdout pipe, considered up once it prints its
/// `ready ...` line, and always stopped with SIGTERM (then SIGKILL) by ``stop()``.
public final class ServerProcess: @unchecked Sendable {  // @unchecked: used by the one thread that runs the benchmark.
    public let process = Process()
    /// The `key=value` fields of the ready line.
    public private(set) var readyFields: [String: String] = [:]
    public let readyLine: String
    private let output: Pipe
    private let exited = DispatchSemaphore(value: 0)

    /// Starts `executable` with `arguments` and waits (up to `timeout`) for a stdout line starting with `ready `.
    /// - Throws: if it cannot start, exits, or says nothing in time (it is killed then).
    public init(executable: URL, arguments: [String], timeout: Duration = .seconds(15)) throws {
        output = Pipe()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        let exited = self.exited
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        let started = process
        Self.running.withLock { $0[started.processIdentifier] = started }
        let descriptor = output.fileHandleForReading.fileDescriptor
        let deadline = ContinuousClock.now + timeout
        var buffer: [UInt8] = []
        var line: String?
        while line == nil {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            var pollfd = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(left.milliseconds + 1)
            guard poll(&pollfd, 1, milliseconds) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(descriptor, &chunk, chunk.count)
            if count <= 0 { break }  // the process closed stdout (exited)
            buffer.append(contentsOf: chunk[0..<count])
            while let newline = buffer.firstIndex(of: 0x0A) {
                let text = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                if text.hasPrefix("ready ") {
                    line = text
                    break
                }
            }
        }
        guard let line else {
            Self.terminate(process, exited)
            throw RelayLoadError("\(executable.lastPathComponent) printed no 'ready' line within \(timeout)")
        }
        readyLine = line
        for field in line.dropFirst("ready ".count).split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { readyFields[String(parts[0])] = String(parts[1]) }
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s. Safe to call more than once.
    public func stop() {
        Self.terminate(process, exited)
        _ = Self.running.withLock { $0.removeValue(forKey: process.processIdentifier) }
    }

    /// Processes started and not yet stopped, so a signal handler can stop them all.
    private static let running = Mutex<[Int32: Process]>([:])

    /// Sends SIGTERM to every server still running (for a SIGINT/SIGTERM handler; does not wait).
    public static func terminateAll() {
        for process in running.withLock({ Array($0.values) }) where process.isRunning { process.terminate() }
    }

    static func terminate(_ process: Process, _ exited: DispatchSemaphore) {
        guard process.isRunning else { return }
        process.terminate()
        if exited.wait(timeout: .now() + .seconds(5)) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + .seconds(5))
        }
        exited.signal()  // later calls return at once
    }

    deinit { stop() }
}
