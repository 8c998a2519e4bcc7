import Foundation
import WireBytes

/// The one-byte commands of the AskRelay wire protocol (docs/protocol.md).
public enum WireCommand: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Worker → broker: register a session and the logical addresses it serves. Body: `Hello` JSON.
    case hello = 0x01
    /// Broker → worker: the session is registered. Body: `Welcome` JSON.
    case welcome = 0x02
    /// Both ways: I am alive. No further frames.
    case heartbeat = 0x03
    /// Worker → broker: an application message for a logical address.
    case send = 0x04
    /// Broker → worker: an application message for one of the worker's addresses.
    case deliver = 0x05
    /// Both ways: the listed message ids were accepted (broker) or processed (worker).
    case ack = 0x06
    /// Both ways: a message was refused, with a code and a reason.
    case nack = 0x07
    /// Both ways: the session ends.
    case bye = 0x08

    public var description: String {
        switch self {
        case .hello: "HELLO"
        case .welcome: "WELCOME"
        case .heartbeat: "HEARTBEAT"
        case .send: "SEND"
        case .deliver: "DELIVER"
        case .ack: "ACK"
        case .nack: "NACK"
        case .bye: "BYE"
        }
    }
}

/// Constants and limits of the wire format.
public enum Wire {
    /// The protocol version this code speaks.
    public static let version: UInt8 = 2
    /// The first 4 bytes of every message's lead frame: "ASK" followed by the version byte.
    public static let signature: [UInt8] = [0x41, 0x53, 0x4B, version]
    /// The lead frame's fixed start: the signature and the command byte.
    public static let leadPrefix = 5

    /// Size limits a receiver enforces; anything larger is refused with `oversize-frame`.
    public struct Limits: Sendable, Hashable {
        public var maxAddress = 128
        public var maxKind = 32
        public var maxBody = 1 << 20
        public var maxReason = 1024
        public var maxAckIDs = 4096

        public init() {}
        public static let standard = Limits()
    }
}

/// A message read off the wire, described by where its parts lie in the received ``Multipart``.
///
/// Parsing checks every header but never decodes a body: the body stays bytes in the buffer until someone needs it.
/// A message's first frame, the *lead*, holds the signature, the command and the command's fixed fields: for SEND
/// and DELIVER the packed header (id, flags, subject, trace context, from, to, kind) and the carried ACK ids
/// (docs/protocol.md §5). The parser records where each field lies in the ``Multipart/storage``, so they can be
/// compared or hashed in place (``Multipart/bytes(_:equal:)``, ``Multipart/withBytes(_:_:)``) or turned into strings
/// when needed.
public struct ParsedFrames: Sendable, Equatable {
    public var command: WireCommand
    /// The index of the lead frame (1 on a ROUTER, after the peer identity; 0 on a DEALER).
    public var base: Int
    /// SEND / DELIVER: the message id. NACK: the refused message's id, when it had one.
    public var id: MessageID?
    /// SEND / DELIVER: the question the message is about (subject flag set), when it has one.
    public var subject: MessageID?
    /// SEND / DELIVER: the trace context the message carries (trace flag set), when it has one.
    public var trace: TraceContext?
    /// SEND / DELIVER: where the packed header (id to kind) lies in the message's storage, inside the lead frame.
    public var headerRange: Range<Int> = 0..<0
    /// SEND / DELIVER: where the address and kind bytes lie in the message's storage (empty for other commands).
    public var fromRange: Range<Int> = 0..<0
    public var toRange: Range<Int> = 0..<0
    public var kindRange: Range<Int> = 0..<0
    /// ACK: the acknowledged ids; SEND / DELIVER: the carried ACK ids after the header (empty when none), N × 16
    /// bytes of the lead frame.
    public var ackRange: Range<Int> = 0..<0

    public init(command: WireCommand, base: Int) {
        self.command = command
        self.base = base
    }

    /// SEND / DELIVER: the message carries ACK ids after its header.
    public var carriesAcks: Bool { !ackRange.isEmpty }
    /// The lead frame: signature, command and the command's fixed fields.
    public var leadFrame: Int { base }
    /// SEND / DELIVER: the body; HELLO / WELCOME: the JSON body.
    public var bodyFrame: Int { base + 1 }
    /// NACK: code and reason frames.
    public var codeFrame: Int { base + 1 }
    public var reasonFrame: Int { base + 2 }
    /// BYE: the reason frame, when present.
    public var byeReasonFrame: Int { base + 1 }
}

/// A W3C Trace Context (`traceparent`, version 00) in its binary form: the trace a message belongs to, the span
/// that caused it and the trace flags (docs/protocol.md §5.5). 25 bytes in a SEND/DELIVER header.
public struct TraceContext: Sendable, Hashable, CustomStringConvertible {
    /// The trace id, 16 bytes; never all zero.
    public var traceID: MessageID
    /// The parent span id, 8 bytes; never zero.
    public var parentID: UInt64
    /// The trace flags; bit 0 is `sampled`.
    public var flags: UInt8

    /// The size of the header field.
    public static let size = 25

    public init(traceID: MessageID, parentID: UInt64, flags: UInt8 = 1) {
        self.traceID = traceID
        self.parentID = parentID
        self.flags = flags
    }

    /// The span id of the hop a message is: the last 8 bytes of its message id (docs/protocol.md §5.5), so every
    /// process names a hop's span alike without carrying it.
    public static func spanID(of id: MessageID) -> UInt64 { id.low == 0 ? 1 : id.low }

    /// The context of a flow whose application gave none (docs/protocol.md §5.5): the question id is the trace id,
    /// and its last 8 bytes the flow's root span, the parent of the child's messages.
    public static func root(question: UUID) -> TraceContext {
        let id = MessageID(uuid: question)
        return TraceContext(traceID: id, parentID: spanID(of: id), flags: 1)
    }

    /// The context a message caused by `id` carries: the same trace, `id`'s span as the parent.
    public func child(of id: MessageID) -> TraceContext {
        TraceContext(traceID: traceID, parentID: Self.spanID(of: id), flags: flags)
    }

    /// Parses a `traceparent` header value: `00-<32 hex>-<16 hex>-<2 hex>`, lower case; `nil` when it is not one
    /// (an all-zero trace or parent id is not one).
    public init?(traceparent: String) {
        let parts = traceparent.split(separator: "-", omittingEmptySubsequences: false)
        let isLowerHex = { (text: Substring) in
            text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
        }
        guard parts.count == 4, parts[0] == "00", parts[1].utf8.count == 32, parts[2].utf8.count == 16,
            parts[3].utf8.count == 2, parts.allSatisfy(isLowerHex),
            let trace = MessageID(hex: String(parts[1])), let parent = UInt64(parts[2], radix: 16),
            let flags = UInt8(parts[3], radix: 16), trace != MessageID(high: 0, low: 0), parent != 0
        else { return nil }
        self.init(traceID: trace, parentID: parent, flags: flags)
    }

    /// The `traceparent` header value: `00-<trace id>-<parent id>-<flags>`.
    public var traceparent: String {
        let parent = String(parentID, radix: 16)
        let flagText = String(flags, radix: 16)
        return "00-\(traceID)-\(String(repeating: "0", count: 16 - parent.count))\(parent)-"
            + "\(flagText.count == 1 ? "0" : "")\(flagText)"
    }

    public var description: String { traceparent }

    /// Reads the 25 bytes ``append(to:)`` writes (a journal's copy of a message); `nil` when they are not 25 bytes
    /// or the trace or parent id is all zero.
    public init?(binary: [UInt8]) {
        guard binary.count == Self.size, let context = binary.withUnsafeBytes({ Self.read($0, at: 0) }) else {
            return nil
        }
        self = context
    }

    /// The 25 bytes of the header field.
    public var binary: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.size)
        append(to: &bytes)
        return bytes
    }

    /// Appends the 25 header bytes: trace id, parent id (big-endian), flags.
    @inlinable
    public func append(to bytes: inout [UInt8]) {
        traceID.append(to: &bytes)
        withUnsafeBytes(of: parentID.bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(flags)
    }

    /// The trace context of a packed SEND/DELIVER header (as ``WireEncoder/appendHeader(id:subject:trace:from:to:kind:to:)``
    /// writes it, or a parsed message's ``ParsedFrames/headerRange``), `nil` when it has none.
    public static func inHeader(_ header: UnsafeRawBufferPointer) -> TraceContext? {
        guard header.count > 16, header[16] & 2 != 0 else { return nil }
        let offset = 17 + (header[16] & 1 != 0 ? 16 : 0)
        guard header.count >= offset + size else { return nil }
        return read(header, at: offset)
    }

    /// Reads the 25 header bytes at `offset`; `nil` when the trace or parent id is all zero.
    static func read(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> TraceContext? {
        guard let trace = MessageID(bytes: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16])) else {
            return nil
        }
        var parent: UInt64 = 0
        for index in offset + 16..<offset + 24 { parent = parent << 8 | UInt64(bytes[index]) }
        guard trace != MessageID(high: 0, low: 0), parent != 0 else { return nil }
        return TraceContext(traceID: trace, parentID: parent, flags: bytes[offset + 24])
    }
}

/// Reads and checks AskRelay frames.
public enum WireParser {
    /// Parses the message in `message` starting at frame `base` (skip the ROUTER identity with `base: 1`).
    /// - Throws: ``WireError`` with the framing code that names what is wrong. Never traps.
    public static func parse(_ message: Multipart, base: Int = 0, limits: Wire.Limits = .standard) throws(WireError)
        -> ParsedFrames
    {
        let frames = message.count - base
        guard frames >= 1 else { throw WireError(.missingFrames, "the message has no frames after the identity") }
        // The signature is judged first: a peer speaking another protocol or version learns that, not a frame count.
        try checkSignature(message, base)
        let command = try readCommand(message, base)
        var parsed = ParsedFrames(command: command, base: base)
        let lead = message.range(of: base)
        switch command {
        case .heartbeat:
            try expectFrames(frames, 1, command)
            try expectBareLead(lead, command)
        case .hello, .welcome:
            try expectFrames(frames, 2, command)
            try expectBareLead(lead, command)
            guard message.size(of: base + 1) <= limits.maxBody else {
                throw WireError(
                    .oversizeFrame,
                    "\(command) body is \(message.size(of: base + 1)) bytes, limit \(limits.maxBody)"
                )
            }
        case .send, .deliver:
            try expectFrames(frames, 2, command)
            try parseHeader(message, into: &parsed, limits)
            try checkAckIDs(parsed.ackRange.count, limits, what: "\(command)'s carried ACK ids", allowEmpty: true)
            let bodySize = message.size(of: parsed.bodyFrame)
            guard bodySize <= limits.maxBody else {
                throw WireError(.oversizeFrame, "body is \(bodySize) bytes, limit \(limits.maxBody)")
            }
        case .ack:
            try expectFrames(frames, 1, command)
            parsed.ackRange = lead.lowerBound + Wire.leadPrefix..<lead.upperBound
            try checkAckIDs(parsed.ackRange.count, limits, what: "an ACK", allowEmpty: false)
        case .nack:
            try expectFrames(frames, 3, command)
            let idSize = lead.count - Wire.leadPrefix
            if idSize == 16 {
                parsed.id = message.storage.withUnsafeBytes {
                    MessageID(
                        bytes: UnsafeRawBufferPointer(rebasing: $0[lead.lowerBound + Wire.leadPrefix..<lead.upperBound])
                    )
                }
            } else if idSize != 0 {
                throw WireError(.badID, "a NACK's refused id is empty or 16 bytes, got \(idSize)")
            }
            let codeSize = message.size(of: parsed.codeFrame)
            guard codeSize > 0, codeSize <= limits.maxKind else {
                throw WireError(.badKind, "a NACK code must be 1-\(limits.maxKind) bytes, got \(codeSize)")
            }
            try checkText(message, parsed.reasonFrame, what: "reason", max: limits.maxReason)
        case .bye:
            guard frames == 1 || frames == 2 else {
                throw WireError(.extraFrames, "BYE has 1 or 2 frames, got \(frames)")
            }
            try expectBareLead(lead, command)
            if frames == 2 { try checkText(message, base + 1, what: "reason", max: limits.maxReason) }
        }
        return parsed
    }

    /// The lead frame starts with the 4-byte signature: `ASK` and the version byte.
    @inline(__always)
    static func checkSignature(_ message: Multipart, _ index: Int) throws(WireError) {
        let range = message.range(of: index)
        let storage = message.storage
        guard range.count >= 4, storage[range.lowerBound] == 0x41, storage[range.lowerBound + 1] == 0x53,
            storage[range.lowerBound + 2] == 0x4B
        else {
            throw WireError(.badSignature, "the first frame must start with the signature 'ASK' + version")
        }
        let version = storage[range.lowerBound + 3]
        guard version == Wire.version else {
            throw WireError(
                .unsupportedVersion,
                "protocol version \(version) is not supported; this peer speaks \(Wire.version)"
            )
        }
    }

    /// The command byte after the signature.
    @inline(__always)
    static func readCommand(_ message: Multipart, _ base: Int) throws(WireError) -> WireCommand {
        let lead = message.range(of: base)
        guard lead.count >= Wire.leadPrefix else {
            throw WireError(.unknownCommand, "the lead frame ends after the signature: the command byte is missing")
        }
        let byte = message.storage[lead.lowerBound + 4]
        guard let command = WireCommand(rawValue: byte) else {
            throw WireError(.unknownCommand, "unknown command 0x\(String(byte, radix: 16))")
        }
        return command
    }

    /// HEARTBEAT, HELLO, WELCOME and BYE have nothing in their lead frame after the command byte.
    @inline(__always)
    static func expectBareLead(_ lead: Range<Int>, _ command: WireCommand) throws(WireError) {
        guard lead.count == Wire.leadPrefix else {
            throw WireError(
                .badHeader,
                "\(command)'s lead frame is the signature and the command (5 bytes), got \(lead.count) bytes"
            )
        }
    }

    /// Carried ACK ids or an ACK's ids: 16 bytes each, at most `maxAckIDs`.
    @inline(__always)
    static func checkAckIDs(_ size: Int, _ limits: Wire.Limits, what: String, allowEmpty: Bool) throws(WireError) {
        guard size % 16 == 0, allowEmpty || size > 0 else {
            throw WireError(.badID, "\(what) are one or more 16-byte ids, got \(size) bytes")
        }
        guard size / 16 <= limits.maxAckIDs else {
            throw WireError(.oversizeFrame, "\(what) are at most \(limits.maxAckIDs) ids, got \(size / 16)")
        }
    }

    @inline(__always)
    static func expectFrames(_ count: Int, _ expected: Int, _ command: WireCommand) throws(WireError) {
        if count < expected { throw WireError(.missingFrames, "\(command) has \(expected) frames, got \(count)") }
        if count > expected { throw WireError(.extraFrames, "\(command) has \(expected) frames, got \(count)") }
    }

    /// The smallest SEND/DELIVER header: id, flags and three length bytes.
    static let minimumHeader = 16 + 1 + 3

    /// The id of a SEND or DELIVER that ``parse(_:base:limits:)`` refused, when the refusal came after its header's
    /// structure was read (a bad address or kind, bad or too many carried ACK ids, an oversize body): its NACK
    /// carries it (docs/protocol.md §7). `nil` when the message is not a SEND/DELIVER of 2 frames or its header is
    /// unreadable (`bad-header`): then there is no id to give back.
    public static func idOfRefused(_ message: Multipart, base: Int = 0) -> MessageID? {
        guard message.count - base == 2, (try? checkSignature(message, base)) != nil,
            let command = try? readCommand(message, base), command == .send || command == .deliver
        else { return nil }
        var parsed = ParsedFrames(command: command, base: base)
        guard (try? readHeaderStructure(message, into: &parsed)) != nil else { return nil }
        return parsed.id
    }

    /// Reads the packed SEND/DELIVER header: first its structure (size, flags, subject, trace context, the three
    /// lengths), then the fields from left to right (from, to, kind).
    @inline(__always)
    static func parseHeader(_ message: Multipart, into parsed: inout ParsedFrames, _ limits: Wire.Limits)
        throws(WireError)
    {
        try readHeaderStructure(message, into: &parsed)
        let storage = message.storage
        try checkAddress(storage, parsed.fromRange, what: "from", limits)
        try checkAddress(storage, parsed.toRange, what: "to", limits)
        try checkKind(storage, parsed.kindRange, limits)
    }

    /// The header's structure: where the id, subject, trace context and each field lie, or what is wrong with the
    /// layout (`bad-header`). Sets ``ParsedFrames/id``, ``ParsedFrames/subject``, ``ParsedFrames/trace``, the
    /// field ranges and ``ParsedFrames/ackRange`` (what follows the kind); checks no field.
    @inline(__always)
    static func readHeaderStructure(_ message: Multipart, into parsed: inout ParsedFrames) throws(WireError) {
        let lead = message.range(of: parsed.leadFrame)
        let start = lead.lowerBound + Wire.leadPrefix
        guard lead.upperBound - start >= minimumHeader else {
            throw WireError(
                .badHeader,
                "the header must be at least \(minimumHeader) bytes, got \(lead.upperBound - start)"
            )
        }
        // Structure: where each field lies, or what is wrong with the layout (no allocation).
        let storage = message.storage
        let flags = storage[start + 16]
        guard flags & 0xFC == 0 else {
            throw WireError(
                .badHeader,
                "header flags 0x\(String(flags, radix: 16)): only bit 0 (subject) and bit 1 (trace context) may be set"
            )
        }
        var cursor = start + 17
        if flags & 1 == 1 {
            guard cursor + 16 <= lead.upperBound else {
                throw WireError(.badHeader, "the header's subject runs past the lead frame's end")
            }
            parsed.subject = storage.withUnsafeBytes {
                MessageID(bytes: UnsafeRawBufferPointer(rebasing: $0[cursor..<cursor + 16]))
            }
            cursor += 16
        }
        if flags & 2 == 2 {
            guard cursor + TraceContext.size <= lead.upperBound else {
                throw WireError(.badHeader, "the header's trace context runs past the lead frame's end")
            }
            let position = cursor
            guard let trace = storage.withUnsafeBytes({ TraceContext.read($0, at: position) }) else {
                throw WireError(.badHeader, "the header's trace context has an all-zero trace id or parent id")
            }
            parsed.trace = trace
            cursor += TraceContext.size
        }
        @inline(__always)
        func field(_ name: StaticString) throws(WireError) -> Range<Int> {
            guard cursor < lead.upperBound else {
                throw WireError(.badHeader, "the header ends before the length of '\(name)'")
            }
            let length = Int(storage[cursor])
            cursor += 1
            guard cursor + length <= lead.upperBound else {
                throw WireError(.badHeader, "the '\(name)' length \(length) runs past the lead frame's end")
            }
            defer { cursor += length }
            return cursor..<cursor + length
        }
        let from = try field("from")
        let to = try field("to")
        let kind = try field("kind")
        parsed.id = storage.withUnsafeBytes {
            MessageID(bytes: UnsafeRawBufferPointer(rebasing: $0[start..<start + 16]))
        }
        parsed.headerRange = start..<cursor
        parsed.fromRange = from
        parsed.toRange = to
        parsed.kindRange = kind
        parsed.ackRange = cursor..<lead.upperBound
    }

    /// An address is `role` or `role/id`: role of lowercase letters, id of `A-Z a-z 0-9 . _ -` (1-64 bytes).
    @inline(__always)
    static func checkAddress(_ storage: [UInt8], _ range: Range<Int>, what: String, _ limits: Wire.Limits)
        throws(WireError)
    {
        guard !range.isEmpty, range.count <= limits.maxAddress else {
            throw WireError(
                .badAddress,
                "the '\(what)' address must be 1-\(limits.maxAddress) bytes, got \(range.count)"
            )
        }
        let ok = storage.withUnsafeBufferPointer { buffer -> Bool in
            var index = range.lowerBound
            var roleLength = 0
            while index < range.upperBound, buffer[index] >= 0x61, buffer[index] <= 0x7A {
                index += 1
                roleLength += 1
            }
            guard roleLength > 0 else { return false }
            if index == range.upperBound { return true }
            guard buffer[index] == 0x2F else { return false }  // "/"
            index += 1
            let idLength = range.upperBound - index
            guard idLength > 0, idLength <= 64 else { return false }
            while index < range.upperBound {
                let byte = buffer[index]
                let valid =
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == 0x2E || byte == 0x5F || byte == 0x2D
                if !valid { return false }
                index += 1
            }
            return true
        }
        guard ok else {
            let text = String(decoding: storage[range].prefix(64), as: UTF8.self)
            throw WireError(
                .badAddress,
                "the '\(what)' address '\(text)' is not 'role' or 'role/id' (id: A-Z a-z 0-9 . _ -)"
            )
        }
    }

    /// A kind is 1-32 bytes of `a-z 0-9 . -`.
    @inline(__always)
    static func checkKind(_ storage: [UInt8], _ range: Range<Int>, _ limits: Wire.Limits) throws(WireError) {
        guard !range.isEmpty, range.count <= limits.maxKind else {
            throw WireError(.badKind, "the kind must be 1-\(limits.maxKind) bytes, got \(range.count)")
        }
        let ok = storage.withUnsafeBufferPointer { buffer -> Bool in
            for index in range {
                let byte = buffer[index]
                if !((byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2E || byte == 0x2D) {
                    return false
                }
            }
            return true
        }
        guard ok else { throw WireError(.badKind, "the kind must be lowercase letters, digits, '.' and '-'") }
    }

    static func checkText(_ message: Multipart, _ index: Int, what: String, max: Int) throws(WireError) {
        let size = message.size(of: index)
        guard size <= max else { throw WireError(.oversizeFrame, "the \(what) is \(size) bytes, limit \(max)") }
        let valid = message.withFrame(index) { String(validating: $0.bindMemory(to: UInt8.self), as: UTF8.self) != nil }
        guard valid else { throw WireError(.invalidUTF8, "the \(what) is not valid UTF-8") }
    }
}

extension Multipart {
    /// The frame's bytes as a string (lossy for invalid UTF-8; parsed frames are already checked).
    public func string(_ index: Int) -> String {
        withFrame(index) { String(decoding: $0.bindMemory(to: UInt8.self), as: UTF8.self) }
    }

    /// Whether frame `index` holds exactly the UTF-8 bytes of `text`, without making a string.
    public func frame(_ index: Int, equals text: StaticString) -> Bool {
        withFrame(index) { bytes in
            bytes.count == text.utf8CodeUnitCount
                && memcmp(bytes.baseAddress ?? UnsafeRawPointer(text.utf8Start), text.utf8Start, bytes.count) == 0
        }
    }

    /// The bytes at `range` of the storage as a string (lossy for invalid UTF-8; parsed fields are already checked).
    public func string(_ range: Range<Int>) -> String {
        storage.withUnsafeBytes {
            String(decoding: UnsafeRawBufferPointer(rebasing: $0[range]).bindMemory(to: UInt8.self), as: UTF8.self)
        }
    }

    /// Lends the bytes at `range` of the storage (a parsed address or kind) without copying.
    @inlinable
    public func withBytes<R>(_ range: Range<Int>, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// Whether the bytes at `range` are exactly the UTF-8 bytes of `text`, without making a string.
    public func bytes(_ range: Range<Int>, equal text: StaticString) -> Bool {
        withBytes(range) { bytes in
            bytes.count == text.utf8CodeUnitCount
                && memcmp(bytes.baseAddress ?? UnsafeRawPointer(text.utf8Start), text.utf8Start, bytes.count) == 0
        }
    }

    /// SEND / DELIVER: the sender's address.
    public func from(_ parsed: ParsedFrames) -> String { string(parsed.fromRange) }
    /// SEND / DELIVER: the recipient's address.
    public func to(_ parsed: ParsedFrames) -> String { string(parsed.toRange) }
    /// SEND / DELIVER: the message kind.
    public func kind(_ parsed: ParsedFrames) -> String { string(parsed.kindRange) }

    /// The ids an ACK acknowledges, or those a SEND/DELIVER carries (none when it carries none), in order.
    public func ackIDs(_ parsed: ParsedFrames) -> [MessageID] {
        var ids: [MessageID] = []
        forEachAckID(parsed) { ids.append($0) }
        return ids
    }

    /// Calls `body` with each id an ACK acknowledges or a SEND/DELIVER carries, in order, without allocating.
    @inline(__always)
    public func forEachAckID(_ parsed: ParsedFrames, _ body: (MessageID) -> Void) {
        guard !parsed.ackRange.isEmpty else { return }
        withBytes(parsed.ackRange) { bytes in
            var offset = 0
            while offset + 16 <= bytes.count {
                if let id = MessageID(bytes: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16])) { body(id) }
                offset += 16
            }
        }
    }

    /// SEND / DELIVER: the packed header's bytes (id to kind), as the sender wrote them.
    public func header(_ parsed: ParsedFrames) -> ArraySlice<UInt8> { storage[parsed.headerRange] }
}
