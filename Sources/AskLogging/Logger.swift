import Foundation
import Synchronization

/// Severity of a log line, lowest first.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    case trace, debug, info, notice, warning, error, critical

    public init?(name: String) {
        guard let level = LogLevel.allCases.first(where: { $0.description == name.lowercased() }) else { return nil }
        self = level
    }

    public var description: String {
        switch self {
        case .trace: "trace"
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
        }
    }

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// Where log lines go: standard error in executables, memory in tests.
public protocol LogSink: Sendable {
    func write(_ line: String)
}

/// Writes each line to standard error with one `write(2)`, so lines from threads never interleave.
public struct StandardErrorSink: LogSink {
    public init() {}
    public func write(_ line: String) {
        var text = line + "\n"
        text.withUTF8 { buffer in _ = Foundation.write(2, buffer.baseAddress, buffer.count) }
    }
}

/// Keeps lines in memory, for tests that assert on what was logged.
public final class MemorySink: LogSink {
    private let storage = Mutex<[String]>([])
    public init() {}
    public func write(_ line: String) { storage.withLock { $0.append(line) } }
    public var lines: [String] { storage.withLock { $0 } }
}

/// A structured, levelled logger: one line per event, `timestamp level label: key=value ... message`.
/// Libraries take a `Logger`; only executables decide where lines go.
public struct Logger: Sendable {
    public let label: String
    public var level: LogLevel
    public var metadata: [String: String] = [:]
    let sink: any LogSink

    public init(label: String, level: LogLevel = .info, sink: any LogSink = StandardErrorSink()) {
        self.label = label
        self.level = level
        self.sink = sink
    }

    /// A logger that drops everything.
    public static func silent(_ label: String = "silent") -> Logger {
        Logger(label: label, level: .critical, sink: DiscardSink())
    }

    @inlinable
    public func isEnabled(_ level: LogLevel) -> Bool { level >= self.level }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) {
        guard level >= self.level else { return }
        var line = "\(Self.timestamp()) \(level) \(label):"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) { line += " \(key)=\(Self.quote(value))" }
        for (key, value) in fields { line += " \(key)=\(Self.quote(String(describing: value)))" }
        line += " \(message())"
        sink.write(line)
    }

    public func trace(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.trace, message(), fields) }
    public func debug(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.debug, message(), fields) }
    public func info(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.info, message(), fields) }
    public func notice(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.notice, message(), fields) }
    public func warning(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.warning, message(), fields) }
    public func error(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.error, message(), fields) }
    public func critical(_ message: @autoclosure () -> String, _ fields: KeyValuePairs<String, Any> = [:]) { log(.critical, message(), fields) }

    static func quote(_ value: String) -> String {
        value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" }) || value.isEmpty
            ? "\"" + value.replacingOccurrences(of: "\"", with: "\\\"") + "\"" : value
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, now.tv_nsec / 1_000_000)
    }
}

struct DiscardSink: LogSink {
    func write(_ line: String) {}
}
