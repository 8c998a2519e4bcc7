import AskModel
import Foundation
import Synchronization

/// What happened to a message, or to a question, in one process: the events of a trace file (docs/tracing.md).
///
/// A flow's trace is its question's: every message of the flow carries the question id (the header's subject, or
/// the ask's own question), so the events of all processes that name one question are its trace, and each message
/// id is one hop. Times are each process's own wall clock.
public enum TraceEvent: String, Codable, Sendable, CaseIterable {
    /// A worker or an app's center sent a message to the broker (a SEND).
    case sent
    /// A process took a message in: the broker a SEND, a worker a DELIVER.
    case received
    /// The broker queued a message for its recipient: one it accepted, or one it made (question, response, closed,
    /// approval, an ask's refusal).
    case routed
    /// The broker's turn that accepted the message committed to its journal (only with a journal).
    case journaled
    /// The broker sent a DELIVER of the message to its recipient's session.
    case delivered
    /// The recipient acknowledged the message (at the broker: its ACK came; at a worker: it sent its ACK).
    case acked
    /// The message was refused, with `code` (at the broker: its NACK; at a worker: the NACK it got).
    case refused
    /// The question's deadline passed while it was open (at the broker).
    case expired
    /// The question closed at the broker; `code` says how (answered, cancelled, expired, abandoned, refused).
    case closed
    /// A fault the simulation played, or a story's fault or network step (the own line of askrelay simulate or
    /// askrelay test; `code` is the action, `to` the process or link).
    case fault
}

/// One line of a trace file: `{"at_us":1764763200123456,"event":"delivered","kind":"question","question":"…",
/// "id":"…","from":"broker","to":"guardian/g1"}`; fields that do not apply are left out.
public struct TraceLine: Codable, Sendable, Equatable {
    /// When, in microseconds since 1970, on the writing process's clock.
    public var atMicroseconds: Int64
    /// The event's name (a ``TraceEvent`` raw value; a name this build does not know is kept as read).
    public var event: String
    /// The message kind (`ask`, `question`, `answer`, `response`, ...).
    public var kind: String?
    /// The question the message is about.
    public var question: String?
    /// The message id (one hop).
    public var id: String?
    public var from: String?
    public var to: String?
    /// A refusal's code, a close's reason, a fault's action.
    public var code: String?
    /// The trace context the message carried (docs/protocol.md §5.5), as a `traceparent`: its trace and the span
    /// that caused it. The message's own span id is the last 8 bytes of its id.
    public var trace: String?

    enum CodingKeys: String, CodingKey {
        case event, kind, question, id, from, to, code, trace
        case atMicroseconds = "at_us"
    }

    public init(
        atMicroseconds: Int64,
        event: String,
        kind: String? = nil,
        question: String? = nil,
        id: String? = nil,
        from: String? = nil,
        to: String? = nil,
        code: String? = nil,
        trace: String? = nil
    ) {
        self.atMicroseconds = atMicroseconds
        self.trace = trace
        self.event = event
        self.kind = kind
        self.question = question
        self.id = id
        self.from = from
        self.to = to
        self.code = code
    }
}

/// Appends trace lines to a file (`--trace-log FILE` of the broker and the workers), and hands them to a sink (the
/// live OpenTelemetry export of `--otlp-endpoint`). Lines are gathered in memory and written by ``flush()`` in one
/// `write(2)` (a ``LineFile``): the broker flushes at the end of each loop turn, a worker after each message it
/// handles, so a process killed loses at most the lines of the turn it was in. Without a trace log a process records
/// nothing: callers hold an optional `TraceLog` and test it for `nil`.
public final class TraceLog: Sendable {
    /// Takes the bytes of whole lines at each flush, on the flushing thread; it must not block.
    public typealias Sink = @Sendable ([UInt8]) -> Void

    private let file: LineFile?
    private let sink: Sink?
    private let pending = Mutex<[UInt8]>([])
    /// The file's path; `nil` when lines go to the sink alone.
    public var path: String? { file?.path }

    /// Opens (creating it, mode 0600) the file at `path` for appending; its folder must exist.
    /// - Throws: ``LineFileError`` naming the path and the system's reason.
    public init(path: String) throws {
        file = try LineFile(path: path, what: "the trace log", flag: "--trace-log")
        sink = nil
    }

    /// Lines to the file at `path` when given, and to `sink` when given (at least one of them).
    /// - Throws: ``LineFileError`` naming the path and the system's reason.
    public init(path: String?, sink: Sink?) throws {
        precondition(path != nil || sink != nil, "a trace log writes to a file, a sink or both")
        file = try path.map { try LineFile(path: $0, what: "the trace log", flag: "--trace-log") }
        self.sink = sink
    }

    /// Adds one line, written by the next ``flush()``. The line is formatted straight into the pending buffer: no
    /// string is built per field (a line costs about a microsecond), since a traced flow records some thirty.
    public func record(
        _ event: TraceEvent,
        kind: String? = nil,
        question: UUID? = nil,
        id: UUID? = nil,
        from: String? = nil,
        to: String? = nil,
        code: String? = nil,
        trace: TraceContext? = nil,
        at: Date = Date()
    ) {
        let microseconds = Int64((at.timeIntervalSince1970 * 1_000_000).rounded(.down))
        pending.withLock { line in
            line.append(contentsOf: #"{"at_us":"#.utf8)
            Self.appendDecimal(microseconds, to: &line)
            line.append(contentsOf: #","event":""#.utf8)
            line.append(contentsOf: event.rawValue.utf8)
            line.append(0x22)
            if let kind {
                line.append(contentsOf: #","kind":"#.utf8)
                WireJSON.appendQuoted(kind, to: &line)
            }
            if let question {
                line.append(contentsOf: #","question":""#.utf8)
                Self.appendUUID(question, to: &line)
                line.append(0x22)
            }
            if let id {
                line.append(contentsOf: #","id":""#.utf8)
                Self.appendUUID(id, to: &line)
                line.append(0x22)
            }
            if let from {
                line.append(contentsOf: #","from":"#.utf8)
                WireJSON.appendQuoted(from, to: &line)
            }
            if let to {
                line.append(contentsOf: #","to":"#.utf8)
                WireJSON.appendQuoted(to, to: &line)
            }
            if let code {
                line.append(contentsOf: #","code":"#.utf8)
                WireJSON.appendQuoted(code, to: &line)
            }
            if let trace {
                line.append(contentsOf: #","trace":""#.utf8)
                Self.appendTraceparent(trace, to: &line)
                line.append(0x22)
            }
            line.append(contentsOf: "}\n".utf8)
        }
    }

    @inline(__always)
    static func hexDigit(_ nibble: UInt8, upper: Bool) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : (upper ? 0x37 : 0x57) + nibble
    }

    /// A UUID as `UUID.uuidString` writes it (upper case, dashed 8-4-4-4-12), built on the stack and appended once.
    static func appendUUID(_ uuid: UUID, to line: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { out in
            withUnsafeBytes(of: uuid.uuid) { bytes in
                var position = 0
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        out[position] = 0x2D
                        position += 1
                    }
                    out[position] = hexDigit(bytes[index] >> 4, upper: true)
                    out[position + 1] = hexDigit(bytes[index] & 0x0F, upper: true)
                    position += 2
                }
            }
            line.append(contentsOf: out)
        }
    }

    /// `00-<trace id>-<parent id>-<flags>`, lower case, built on the stack and appended once.
    static func appendTraceparent(_ trace: TraceContext, to line: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 55) { out in
            var position = 0
            func put(_ value: UInt64, digits: Int) {
                for shift in stride(from: (digits - 1) * 4, through: 0, by: -4) {
                    out[position] = hexDigit(UInt8(truncatingIfNeeded: value >> UInt64(shift)) & 0x0F, upper: false)
                    position += 1
                }
            }
            out[0] = 0x30
            out[1] = 0x30
            out[2] = 0x2D
            position = 3
            put(trace.traceID.high, digits: 16)
            put(trace.traceID.low, digits: 16)
            out[position] = 0x2D
            position += 1
            put(trace.parentID, digits: 16)
            out[position] = 0x2D
            position += 1
            put(UInt64(trace.flags), digits: 2)
            line.append(contentsOf: out)
        }
    }

    static func appendDecimal(_ value: Int64, to line: inout [UInt8]) {
        if value < 0 { line.append(0x2D) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // up to 24 digits, stored as bytes
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(truncatingIfNeeded: 0x30 + magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { line.append(buffer[index]) }
        }
    }

    /// Writes the lines recorded since the last flush.
    public func flush() {
        let bytes = pending.withLock { pending -> [UInt8] in
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        guard !bytes.isEmpty else { return }
        file?.append(bytes)
        sink?(bytes)
    }

    deinit { flush() }
}
