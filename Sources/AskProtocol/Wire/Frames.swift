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
    public static let version: UInt8 = 1
    /// Frame 0 of every message: "ASK" followed by the version byte.
    public static let signature: [UInt8] = [0x41, 0x53, 0x4B, version]

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

/// A message read off the wire, described by the frame positions of its parts in the received ``Multipart``.
///
/// Parsing checks every header but never decodes a body: the body stays bytes in the buffer until someone needs it.
/// SEND and DELIVER carry their routing fields packed in one header frame (docs/protocol.md §5.2); the parser
/// records where `from`, `to` and `kind` lie in the ``Multipart/storage``, so they can be compared or hashed in
/// place (``Multipart/bytes(_:equal:)``, ``Multipart/withBytes(_:_:)``) or turned into strings when needed.
public struct ParsedFrames: Sendable, Equatable {
    public var command: WireCommand
    /// The index of the signature frame (1 on a ROUTER, after the peer identity; 0 on a DEALER).
    public var base: Int
    /// SEND / DELIVER: the message id. NACK: the refused message's id, when it had one.
    public var id: MessageID?
    /// SEND / DELIVER: the question the message is about (subject flag set), when it has one.
    public var subject: MessageID?
    /// SEND / DELIVER: where the address and kind bytes lie in the message's storage (empty for other commands).
    public var fromRange: Range<Int> = 0..<0
    public var toRange: Range<Int> = 0..<0
    public var kindRange: Range<Int> = 0..<0
    /// SEND / DELIVER: the message has the optional frame of acknowledged ids between header and body (5 frames).
    public var carriesAcks = false

    public init(command: WireCommand, base: Int) {
        self.command = command
        self.base = base
    }

    /// SEND / DELIVER: the packed header frame (id, flags, subject, from, to, kind).
    public var headerFrame: Int { base + 2 }
    /// SEND / DELIVER: the body (always last); HELLO / WELCOME: the JSON body.
    public var bodyFrame: Int {
        command == .hello || command == .welcome ? base + 2 : (carriesAcks ? base + 4 : base + 3)
    }
    /// ACK: the frame holding N × 16 id bytes; SEND / DELIVER with ``carriesAcks``: the carried ids.
    public var ackFrame: Int { command == .ack ? base + 2 : base + 3 }
    /// NACK: code and reason frames.
    public var codeFrame: Int { base + 3 }
    public var reasonFrame: Int { base + 4 }
    /// BYE: the reason frame, when present.
    public var byeReasonFrame: Int { base + 2 }
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
        // The signature is judged first: a peer speaking another protocol learns that, not a frame count.
        try checkSignature(message, base)
        guard frames >= 2 else {
            throw WireError(.missingFrames, "a message needs at least a signature and a command frame, got \(frames)")
        }
        guard message.size(of: base + 1) == 1 else {
            throw WireError(.unknownCommand, "the command frame must be 1 byte, got \(message.size(of: base + 1))")
        }
        let byte = message.storage[message.range(of: base + 1).lowerBound]
        guard let command = WireCommand(rawValue: byte) else {
            throw WireError(.unknownCommand, "unknown command 0x\(String(byte, radix: 16))")
        }
        var parsed = ParsedFrames(command: command, base: base)
        switch command {
        case .heartbeat:
            try expectFrames(frames, 2, command)
        case .hello, .welcome:
            try expectFrames(frames, 3, command)
            guard message.size(of: base + 2) <= limits.maxBody else {
                throw WireError(
                    .oversizeFrame,
                    "\(command) body is \(message.size(of: base + 2)) bytes, limit \(limits.maxBody)"
                )
            }
        case .send, .deliver:
            guard frames == 4 || frames == 5 else {
                throw WireError(
                    frames < 4 ? .missingFrames : .extraFrames,
                    "\(command) has 4 frames, or 5 with ACK ids, got \(frames)"
                )
            }
            parsed.carriesAcks = frames == 5
            try parseHeader(message, into: &parsed, limits)
            if parsed.carriesAcks {
                try checkAckFrame(message, parsed.ackFrame, limits, what: "\(command)'s ACK-ids frame")
            }
            let bodySize = message.size(of: parsed.bodyFrame)
            guard bodySize <= limits.maxBody else {
                throw WireError(.oversizeFrame, "body is \(bodySize) bytes, limit \(limits.maxBody)")
            }
        case .ack:
            try expectFrames(frames, 3, command)
            try checkAckFrame(message, base + 2, limits, what: "an ACK frame")
        case .nack:
            try expectFrames(frames, 5, command)
            let idSize = message.size(of: base + 2)
            if idSize == 16 {
                parsed.id = message.withFrame(base + 2) { MessageID(bytes: $0) }
            } else if idSize != 0 {
                throw WireError(.badID, "a NACK's id frame must be empty or 16 bytes, got \(idSize)")
            }
            let codeSize = message.size(of: parsed.codeFrame)
            guard codeSize > 0, codeSize <= limits.maxKind else {
                throw WireError(.badKind, "a NACK code must be 1-\(limits.maxKind) bytes, got \(codeSize)")
            }
            try checkText(message, parsed.reasonFrame, what: "reason", max: limits.maxReason)
        case .bye:
            guard frames == 2 || frames == 3 else {
                throw WireError(frames < 2 ? .missingFrames : .extraFrames, "BYE has 2 or 3 frames, got \(frames)")
            }
            if frames == 3 { try checkText(message, base + 2, what: "reason", max: limits.maxReason) }
        }
        return parsed
    }

    @inline(__always)
    static func checkSignature(_ message: Multipart, _ index: Int) throws(WireError) {
        let range = message.range(of: index)
        let storage = message.storage
        guard range.count == 4, storage[range.lowerBound] == 0x41, storage[range.lowerBound + 1] == 0x53,
            storage[range.lowerBound + 2] == 0x4B
        else {
            throw WireError(.badSignature, "frame 0 must be the 4-byte signature 'ASK' + version")
        }
        let version = storage[range.lowerBound + 3]
        guard version == Wire.version else {
            throw WireError(
                .unsupportedVersion,
                "protocol version \(version) is not supported; this broker speaks \(Wire.version)"
            )
        }
    }

    /// An ACK frame, or the ACK-ids frame a SEND/DELIVER may carry: 1 to `maxAckIDs` ids of 16 bytes.
    @inline(__always)
    static func checkAckFrame(_ message: Multipart, _ index: Int, _ limits: Wire.Limits, what: String) throws(WireError)
    {
        let size = message.size(of: index)
        guard size > 0, size % 16 == 0 else {
            throw WireError(.badID, "\(what) holds one or more 16-byte ids, got \(size) bytes")
        }
        guard size / 16 <= limits.maxAckIDs else {
            throw WireError(.oversizeFrame, "\(what) holds at most \(limits.maxAckIDs) ids, got \(size / 16)")
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
    /// carries it (docs/protocol.md §7). `nil` when the message is not a SEND/DELIVER of 4 or 5 frames or its header
    /// frame is unreadable (`bad-header`): then there is no id to give back.
    public static func idOfRefused(_ message: Multipart, base: Int = 0) -> MessageID? {
        let frames = message.count - base
        guard frames == 4 || frames == 5, message.size(of: base + 1) == 1 else { return nil }
        let byte = message.storage[message.range(of: base + 1).lowerBound]
        guard byte == WireCommand.send.rawValue || byte == WireCommand.deliver.rawValue,
            (try? checkSignature(message, base)) != nil
        else { return nil }
        var parsed = ParsedFrames(command: WireCommand(rawValue: byte)!, base: base)
        parsed.carriesAcks = frames == 5
        guard (try? readHeaderStructure(message, into: &parsed)) != nil else { return nil }
        return parsed.id
    }

    /// Reads the packed SEND/DELIVER header: first its structure (size, flags, subject, the three lengths, nothing
    /// after the kind), then the fields from left to right (from, to, kind).
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

    /// The header's structure: where the id, subject and each field lie, or what is wrong with the layout
    /// (`bad-header`). Sets ``ParsedFrames/id``, ``ParsedFrames/subject`` and the field ranges; checks no field.
    @inline(__always)
    static func readHeaderStructure(_ message: Multipart, into parsed: inout ParsedFrames) throws(WireError) {
        let header = message.range(of: parsed.headerFrame)
        guard header.count >= minimumHeader else {
            throw WireError(.badHeader, "the header frame must be at least \(minimumHeader) bytes, got \(header.count)")
        }
        // Structure: where each field lies, or what is wrong with the layout (no allocation).
        let storage = message.storage
        let flags = storage[header.lowerBound + 16]
        guard flags & 0xFE == 0 else {
            throw WireError(.badHeader, "header flags 0x\(String(flags, radix: 16)): only bit 0 (subject) may be set")
        }
        var cursor = header.lowerBound + 17
        if flags & 1 == 1 {
            guard cursor + 16 <= header.upperBound else {
                throw WireError(.badHeader, "the header's subject runs past its end (\(header.count) bytes)")
            }
            parsed.subject = storage.withUnsafeBytes {
                MessageID(bytes: UnsafeRawBufferPointer(rebasing: $0[cursor..<cursor + 16]))
            }
            cursor += 16
        }
        @inline(__always)
        func field(_ name: StaticString) throws(WireError) -> Range<Int> {
            guard cursor < header.upperBound else {
                throw WireError(.badHeader, "the header ends before the length of '\(name)' (\(header.count) bytes)")
            }
            let length = Int(storage[cursor])
            cursor += 1
            guard cursor + length <= header.upperBound else {
                throw WireError(
                    .badHeader,
                    "the '\(name)' length \(length) runs past the header's end (\(header.count) bytes)"
                )
            }
            defer { cursor += length }
            return cursor..<cursor + length
        }
        let from = try field("from")
        let to = try field("to")
        let kind = try field("kind")
        guard cursor == header.upperBound else {
            throw WireError(.badHeader, "the header has \(header.upperBound - cursor) bytes after the kind")
        }
        parsed.id = storage.withUnsafeBytes {
            MessageID(bytes: UnsafeRawBufferPointer(rebasing: $0[header.lowerBound..<header.lowerBound + 16]))
        }
        parsed.fromRange = from
        parsed.toRange = to
        parsed.kindRange = kind
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
        guard parsed.command == .ack || parsed.carriesAcks else { return }
        withFrame(parsed.ackFrame) { bytes in
            var offset = 0
            while offset + 16 <= bytes.count {
                if let id = MessageID(bytes: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16])) { body(id) }
                offset += 16
            }
        }
    }
}
