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

/// The fields of a log line, in order.
public typealias LogFields = KeyValuePairs<String, Any>

/// A structured, levelled logger: one line per event, `timestamp level label: key=value ... message`.
/// Libraries take a `Logger`; only executables decide where lines go.
///
/// Every line is exactly one line whatever the values hold: values and the message are escaped (see
/// ``quote(_:)``) and cut to ``maxValueLength`` / ``maxMessageLength`` characters, so text a peer controls can
/// neither forge a line nor make one huge. The message and the fields are built only when the level is enabled.
public struct Logger: Sendable {
    public let label: String
    public var level: LogLevel
    public var metadata: [String: String] = [:]
    let sink: any LogSink

    /// Characters of one field value kept in a line; the rest is replaced by `…(+N)` (N: characters cut).
    public static let maxValueLength = 256
    /// Characters of a message kept in a line.
    public static let maxMessageLength = 1024

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

    public func log(
        _ level: LogLevel,
        _ message: @autoclosure () -> String,
        _ fields: @autoclosure () -> LogFields = [:]
    ) {
        guard level >= self.level else { return }
        var line = "\(Self.timestamp()) \(level) \(Self.escape(label, limit: Self.maxValueLength)):"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line += " \(Self.escape(key, limit: Self.maxValueLength))=\(Self.quote(value))"
        }
        for (key, value) in fields() {
            line += " \(Self.escape(key, limit: Self.maxValueLength))=\(Self.quote(String(describing: value)))"
        }
        line += " \(Self.escape(message(), limit: Self.maxMessageLength))"
        sink.write(line)
    }

    public func trace(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.trace, message(), fields())
    }
    public func debug(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.debug, message(), fields())
    }
    public func info(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.info, message(), fields())
    }
    public func notice(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.notice, message(), fields())
    }
    public func warning(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.warning, message(), fields())
    }
    public func error(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.error, message(), fields())
    }
    public func critical(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> LogFields = [:]) {
        log(.critical, message(), fields())
    }

    /// A field value as it appears after `key=`: bare when it is non-empty printable ASCII without space, `"`, `=`
    /// or `\`; otherwise in double quotes, escaped as ``escape(_:limit:)`` does, with `"` as `\"`. Cut to
    /// ``maxValueLength`` characters first.
    static func quote(_ value: String) -> String {
        let bare =
            !value.isEmpty && value.utf8.count <= maxValueLength
            && value.utf8.allSatisfy { byte in
                byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "=")
                    && byte != UInt8(ascii: "\\")
            }
        if bare { return value }
        return "\"" + escape(value, limit: maxValueLength, quote: true) + "\""
    }

    /// `text` on one line: `\` as `\\`, newline, carriage return and tab as `\n`, `\r`, `\t`, every other control,
    /// format (bidirectional overrides, zero-width characters), line or paragraph separator and unassigned scalar as
    /// `\u{XXXX}`; with `quote`, `"` as `\"`. Longer than `limit` characters, the rest is replaced by `…(+N)`.
    static func escape(_ text: String, limit: Int, quote: Bool = false) -> String {
        var out = ""
        out.reserveCapacity(min(text.utf8.count, limit) + 2)
        var kept = 0
        var scalars = text.unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
            if kept == limit {
                var rest = 1
                while scalars.next() != nil { rest += 1 }
                out += "…(+\(rest))"
                break
            }
            kept += 1
            switch scalar {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\"" where quote: out += "\\\""
            default:
                if needsEscape(scalar) {
                    out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.value < 0x20 || scalar.value == 0x7F { return true }
        if scalar.isASCII { return false }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .unassigned, .privateUse, .surrogate: return true
        default: return false
        }
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
            parts.tm_year + 1900,
            parts.tm_mon + 1,
            parts.tm_mday,
            parts.tm_hour,
            parts.tm_min,
            parts.tm_sec,
            now.tv_nsec / 1_000_000
        )
    }
}

struct DiscardSink: LogSink {
    func write(_ line: String) {}
}
