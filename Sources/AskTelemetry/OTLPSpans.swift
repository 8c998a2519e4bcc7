import AskProtocol
import Foundation

/// A process's trace lines as OpenTelemetry spans, in the OTLP/HTTP JSON encoding (`ExportTraceServiceRequest`),
/// following the messaging semantic conventions (docs/tracing.md, "OpenTelemetry").
///
/// - A flow is a trace. A line with the message's trace context (`trace`, docs/protocol.md §5.5) gives the trace
///   id, which is the application's when it gave one; a line without one is in the trace whose id is the question
///   id's 16 bytes.
/// - One span per message per process: the sender's `send <kind>` (kind PRODUCER), the broker's `route <kind>`
///   (INTERNAL, from `received` to its last event, such as `acked`), a recipient's `process <kind>` (CONSUMER). With
///   a trace context, the span of the process that made the message (its sender, or the broker for a message it
///   originates) is the message's own span (the last 8 bytes of its id), child of the context's parent; every other
///   process's span of it is a child of that span. Other span ids are 8 bytes of a hash of the process, the message
///   id and the side, so an export is the same every time.
/// - Question events without a message (the broker's `expired`, `closed`) are spans `close question` of no length.
/// - A `refused` event makes the span's status ERROR with the code as its message.
/// - Lines without a question (a fault) carry no trace and are left out.
public enum OTLPSpans {
    /// OTLP span kinds.
    enum Kind: Int {
        case `internal` = 1
        case producer = 4
        case consumer = 5
    }

    /// The `ExportTraceServiceRequest` JSON of `lines`, all recorded by `process` (its service name); `instance`,
    /// when given, is the resource's `service.instance.id` (which process of that name). `late` maps the spans
    /// (``key(of:)``) that already went out in an earlier request to the id they went out with: their lines here are
    /// a span of their own, a child of that one, so no span id is sent twice (a collector keeps one span per id).
    public static func request(
        process: String,
        lines: [TraceLine],
        instance: String? = nil,
        late: [String: String] = [:]
    ) throws -> Data {
        var spans: [[String: Any]] = []
        var byMessage: [String: [TraceLine]] = [:]
        var order: [String] = []
        for line in lines {
            guard let key = key(of: line) else { continue }
            if byMessage[key] == nil { order.append(key) }
            byMessage[key, default: []].append(line)
        }
        for key in order {
            guard let group = byMessage[key], var span = span(process: process, key: key, lines: group) else {
                continue
            }
            if let parent = late[key] {
                let start = group.map(\.atMicroseconds).min()!
                span["parentSpanId"] = parent
                span["spanId"] = spanID(process, "late \(start) " + key)
                span["name"] = "\(span["name"] ?? "") (late)"
                span["attributes"] =
                    (span["attributes"] as? [[String: Any]] ?? []) + [attribute("askrelay.late", "true")]
            }
            spans.append(span)
        }
        let request: [String: Any] = [
            "resourceSpans": [
                [
                    "resource": [
                        "attributes": [attribute("service.name", process), attribute("service.namespace", "askrelay")]
                            + (instance.map { [attribute("service.instance.id", $0)] } ?? [])
                    ],
                    "scopeSpans": [["scope": ["name": "askrelay", "version": "1"], "spans": spans]],
                ]
            ]
        ]
        return try JSONSerialization.data(withJSONObject: request, options: [.sortedKeys])
    }

    /// The span a line belongs to: its message's (a process either sent a message or took it in, or, the broker,
    /// routed it: one span per id), or a span of its own for a question event; `nil` for a line exported in no span
    /// (a fault, a line about no question).
    public static func key(of line: TraceLine) -> String? {
        guard let question = line.question, line.event != TraceEvent.fault.rawValue else { return nil }
        if let id = line.id { return "m " + id }
        return "q " + question + " " + line.event + " \(line.atMicroseconds)"
    }

    /// The span id the lines of one span (``key(of:)``) go out with, `nil` when they make no span.
    public static func spanID(process: String, key: String, lines: [TraceLine]) -> String? {
        span(process: process, key: key, lines: lines)?["spanId"] as? String
    }

    /// The number of spans in a request this type made.
    public static func spanCount(_ request: Data) throws -> Int {
        let object = try JSONSerialization.jsonObject(with: request) as? [String: Any]
        let resources = object?["resourceSpans"] as? [[String: Any]] ?? []
        return resources.flatMap { $0["scopeSpans"] as? [[String: Any]] ?? [] }
            .reduce(0) { $0 + (($1["spans"] as? [Any])?.count ?? 0) }
    }

    static func span(process: String, key: String, lines: [TraceLine]) -> [String: Any]? {
        guard let first = lines.first, let question = first.question else { return nil }
        let context = lines.lazy.compactMap(\.trace).compactMap { TraceContext(traceparent: $0) }.first
        guard let traceID = context.map({ $0.traceID.description }) ?? hex(uuid: question) else { return nil }
        let start = lines.map(\.atMicroseconds).min()!
        let end = lines.map(\.atMicroseconds).max()!
        let events = lines.map(\.event)
        let kindName = lines.compactMap(\.kind).first ?? "question"
        let name: String
        let kind: Kind
        let operation: String
        if first.id == nil {
            (name, kind, operation) = ("close question", .internal, "settle")
        } else if events.contains(TraceEvent.sent.rawValue) {
            (name, kind, operation) = ("send \(kindName)", .producer, "send")
        } else if process.hasPrefix("broker") || events.contains(TraceEvent.routed.rawValue)
            || events.contains(TraceEvent.delivered.rawValue)
        {
            (name, kind, operation) = ("route \(kindName)", .internal, "process")
        } else {
            (name, kind, operation) = ("process \(kindName)", .consumer, "process")
        }
        var attributes = [
            attribute("messaging.system", "askrelay"),
            attribute("messaging.operation.type", operation),
            attribute("messaging.operation.name", kindName),
            attribute("askrelay.question", question),
            attribute("askrelay.events", events.joined(separator: ",")),
        ]
        if let id = first.id { attributes.append(attribute("messaging.message.id", id)) }
        if let to = lines.compactMap(\.to).first { attributes.append(attribute("messaging.destination.name", to)) }
        if let from = lines.compactMap(\.from).first { attributes.append(attribute("askrelay.from", from)) }
        var spanIdentifier = spanID(process, key)
        var parentSpanID: String?
        if let context {
            let made =
                events.contains(TraceEvent.sent.rawValue) || (process.hasPrefix("broker") && first.from == "broker")
            if let id = first.id, let uuid = UUID(uuidString: id) {
                let own = hex(TraceContext.spanID(of: MessageID(uuid: uuid)))
                if made {
                    (spanIdentifier, parentSpanID) = (own, hex(context.parentID))
                } else {
                    parentSpanID = own
                }
            } else {
                parentSpanID = hex(context.parentID)
            }
        }
        var span: [String: Any] = [
            "traceId": traceID,
            "spanId": spanIdentifier,
            "name": name,
            "kind": kind.rawValue,
            "startTimeUnixNano": String(start * 1000),
            "endTimeUnixNano": String(end * 1000),
            "attributes": attributes,
        ]
        if let parentSpanID { span["parentSpanId"] = parentSpanID }
        if let refused = lines.first(where: { $0.event == TraceEvent.refused.rawValue }) {
            span["status"] = ["code": 2, "message": refused.code ?? "refused"]
        } else if first.id == nil, let code = first.code {
            span["attributes"] = attributes + [attribute("askrelay.closed", code)]
        }
        return span
    }

    static func attribute(_ key: String, _ value: String) -> [String: Any] {
        ["key": key, "value": ["stringValue": value]]
    }

    /// A UUID string's 16 bytes as 32 lowercase hex digits (OTLP/JSON writes ids in hex).
    static func hex(uuid: String) -> String? {
        guard let uuid = UUID(uuidString: uuid) else { return nil }
        return withUnsafeBytes(of: uuid.uuid) { $0.map { String(format: "%02x", $0) }.joined() }
    }

    /// A span id as 16 lowercase hex digits.
    static func hex(_ spanID: UInt64) -> String { String(format: "%016llx", spanID) }

    /// 8 bytes of FNV-1a over the process and the span's key, as 16 hex digits; never all zero (an invalid id).
    static func spanID(_ process: String, _ key: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in (process + "\u{0}" + key).utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        if hash == 0 { hash = 1 }
        return String(format: "%016llx", hash)
    }
}
