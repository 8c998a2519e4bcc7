import Foundation
import Synchronization

/// Where log lines go: standard error in executables, memory in tests.
public protocol LogSink: Sendable {
    func write(_ line: String)
}

/// Writes each line to standard error with one `write(2)`, so lines from threads never interleave.
public struct StandardErrorSink: LogSink {
    public init() {}
    public func write(_ line: String) { FileSink.write(line, to: 2) }
}

/// Appends each line to a file with one `write(2)` on an `O_APPEND` descriptor, so the lines of several loggers
/// (each with its own sink on the same file, even in several processes) never overwrite or split each other. A
/// file that cannot be opened drops the lines.
public final class FileSink: LogSink {
    private let descriptor: Int32

    public init(path: String) {
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
    }

    public func write(_ line: String) {
        guard descriptor >= 0 else { return }
        Self.write(line, to: descriptor)
    }

    deinit { if descriptor >= 0 { close(descriptor) } }

    /// `line` and a newline in one `write(2)`.
    static func write(_ line: String, to descriptor: Int32) {
        var text = line + "\n"
        text.withUTF8 { buffer in _ = Foundation.write(descriptor, buffer.baseAddress, buffer.count) }
    }
}

/// Keeps lines in memory, for tests that assert on what was logged.
public final class MemorySink: LogSink {
    private let storage = Mutex<[String]>([])
    public init() {}
    public func write(_ line: String) { storage.withLock { $0.append(line) } }
    public var lines: [String] { storage.withLock { $0 } }
}

/// A structured, levelled logger: one line per event, `timestamp level label: key=value ... message`, keys sorted.
/// Libraries take an `AskLogger`; only executables decide where lines go.
///
/// Its API is swift-log's `AskLogger` (`init(label:)`, ``Level``, ``Metadata`` of ``MetadataValue``s, ``Message``,
/// `info(_:metadata:)` and the other levels, each argument an autoclosure), so moving to swift-log is a type alias
/// and a `LogHandler` in place of ``LogSink``. The prefix keeps it from colliding with swift-log's `AskLogger` in a
/// package that imports both.
///
/// Every line is exactly one line whatever the values hold: values and the message are escaped (see
/// ``quote(_:)``) and cut to ``maxValueLength`` / ``maxMessageLength`` characters, so text a peer controls can
/// neither forge a line nor make one huge. The message and the metadata are built only when the level is enabled.
public struct AskLogger: Sendable {
    /// Severity of a log line, lowest first.
    public enum Level: String, Sendable, Codable, Comparable, CaseIterable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical

        /// The level named `name`, in any case (`"INFO"`, `"info"`).
        public init?(name: String) { self.init(rawValue: name.lowercased()) }

        public var description: String { rawValue }

        /// Its rank, lowest first (a switch: comparisons sit on hot paths, before a disabled line is dropped).
        @inlinable var order: Int {
            switch self {
            case .trace: 0
            case .debug: 1
            case .info: 2
            case .notice: 3
            case .warning: 4
            case .error: 5
            case .critical: 6
            }
        }
        @inlinable public static func < (a: Level, b: Level) -> Bool { a.order < b.order }
    }

    /// The text of a line, written as a string literal or interpolation.
    public struct Message: Sendable, Equatable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
        CustomStringConvertible
    {
        public let description: String
        public init(stringLiteral value: String) { description = value }
        public init(stringInterpolation: DefaultStringInterpolation) {
            description = String(stringInterpolation: stringInterpolation)
        }
    }

    /// A metadata value: a string (a literal or an interpolation), something printable, or nested values.
    public enum MetadataValue: Sendable, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
        ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, CustomStringConvertible
    {
        case string(String)
        case stringConvertible(any CustomStringConvertible & Sendable)
        case dictionary(Metadata)
        case array([MetadataValue])

        public init(stringLiteral value: String) { self = .string(value) }
        public init(stringInterpolation: DefaultStringInterpolation) {
            self = .string(String(stringInterpolation: stringInterpolation))
        }
        public init(arrayLiteral elements: MetadataValue...) { self = .array(elements) }
        public init(dictionaryLiteral elements: (String, MetadataValue)...) {
            self = .dictionary(Metadata(elements, uniquingKeysWith: { _, last in last }))
        }

        public var description: String {
            switch self {
            case .string(let text): text
            case .stringConvertible(let value): value.description
            case .array(let values): "[" + values.map(\.description).joined(separator: ", ") + "]"
            case .dictionary(let values):
                "[" + values.sorted(by: { $0.key < $1.key }).map { "\($0.key): \($0.value)" }.joined(separator: ", ")
                    + "]"
            }
        }
    }

    /// The key-value pairs of a line.
    public typealias Metadata = [String: MetadataValue]

    public let label: String
    /// Lines below this level are dropped before their message or metadata is built.
    public var logLevel: Level
    /// Metadata every line of this logger carries.
    public var metadata: Metadata = [:]
    let sink: any LogSink

    /// Characters of one field value kept in a line; the rest is replaced by `…(+N)` (N: characters cut).
    public static let maxValueLength = 256
    /// Characters of a message kept in a line.
    public static let maxMessageLength = 1024

    /// A logger at `info` writing to standard error, as swift-log's `AskLogger(label:)`.
    public init(label: String) {
        self.init(label: label, level: .info)
    }

    public init(label: String, level: Level, sink: any LogSink = StandardErrorSink()) {
        self.label = label
        self.logLevel = level
        self.sink = sink
    }

    /// A logger that drops everything.
    public static func silent(_ label: String = "silent") -> AskLogger {
        AskLogger(label: label, level: .critical, sink: DiscardSink())
    }

    /// One metadata value of every line of this logger.
    public subscript(metadataKey key: String) -> MetadataValue? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(
        level: Level,
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        guard level >= logLevel else { return }
        var text = "\(Self.timestamp()) \(level) \(Self.escape(label, limit: Self.maxValueLength)):"
        var all = self.metadata
        if let extra = metadata() { all.merge(extra, uniquingKeysWith: { _, line in line }) }
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            text += " \(Self.escape(key, limit: Self.maxValueLength))=\(Self.quote(value.description))"
        }
        text += " \(Self.escape(message().description, limit: Self.maxMessageLength))"
        sink.write(text)
    }

    public func trace(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .trace,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
    }

    public func debug(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .debug,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
    }

    public func info(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(level: .info, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
    }

    public func notice(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .notice,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
    }

    public func warning(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .warning,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
    }

    public func error(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .error,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
    }

    public func critical(
        _ message: @autoclosure () -> Message,
        metadata: @autoclosure () -> Metadata? = nil,
        source: @autoclosure () -> String? = nil,
        file: String = #fileID,
        function: String = #function,
        line: UInt = #line
    ) {
        log(
            level: .critical,
            message(),
            metadata: metadata(),
            source: source(),
            file: file,
            function: function,
            line: line
        )
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
    /// Public so that every other place that prints text from a file or a peer on a terminal escapes it the same way.
    public static func escape(_ text: String, limit: Int = .max, quote: Bool = false) -> String {
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
