import WireBytes

/// Builds AskRelay messages into a reusable ``Multipart`` buffer.
///
/// Every function appends to `out`, so a ROUTER sender first appends the peer identity and a DEALER sender starts
/// with an empty buffer.
public enum WireEncoder {
    /// Appends the lead frame of a command whose lead holds nothing else: the signature and the command byte.
    @inlinable
    public static func lead(_ command: WireCommand, into out: inout Multipart) {
        out.appendFrame { appendLeadPrefix(command, to: &$0) }
    }

    /// Appends the signature and the command byte to a lead frame being built.
    @inlinable
    public static func appendLeadPrefix(_ command: WireCommand, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: Wire.signature)
        bytes.append(command.rawValue)
    }

    /// SEND (worker → broker) or DELIVER (broker → worker): the lead frame (signature, command, the packed header,
    /// the carried ACK ids; built in place, one append), then the body.
    public static func message(
        _ command: WireCommand,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        trace: TraceContext? = nil,
        acks: ArraySlice<MessageID> = [],
        body: [UInt8],
        into out: inout Multipart
    ) {
        precondition(command == .send || command == .deliver, "only SEND and DELIVER carry application messages")
        out.appendFrame {
            appendLeadPrefix(command, to: &$0)
            appendHeader(id: id, subject: subject, trace: trace, from: from, to: to, kind: kind, to: &$0)
            appendAcks(acks, to: &$0)
        }
        out.append(body)
    }

    /// Appends carried ACK ids (docs/protocol.md §5.2) to a SEND or DELIVER lead being built: `ids` as 16-byte ids
    /// back to back, at most ``Wire/Limits/maxAckIDs``. Appends nothing when `ids` is empty.
    @inlinable
    public static func appendAcks(_ ids: ArraySlice<MessageID>, to bytes: inout [UInt8]) {
        guard !ids.isEmpty else { return }
        bytes.reserveCapacity(bytes.count + ids.count * 16)
        for id in ids { id.append(to: &bytes) }
    }

    /// SEND or DELIVER from header bytes already encoded (the broker forwards a SEND's header unchanged in the
    /// DELIVER it makes of it: only the command byte and the carried ACK ids differ).
    @inlinable
    public static func message(
        _ command: WireCommand,
        header: UnsafeRawBufferPointer,
        acks: ArraySlice<MessageID> = [],
        body: UnsafeRawBufferPointer,
        into out: inout Multipart
    ) {
        precondition(command == .send || command == .deliver, "only SEND and DELIVER carry application messages")
        out.appendFrame {
            appendLeadPrefix(command, to: &$0)
            $0.append(contentsOf: header)
            appendAcks(acks, to: &$0)
        }
        out.append(body)
    }

    /// DELIVER with a forwarded header (see ``message(_:header:acks:body:into:)``).
    @inlinable
    public static func deliver(
        header: UnsafeRawBufferPointer,
        acks: ArraySlice<MessageID> = [],
        body: UnsafeRawBufferPointer,
        into out: inout Multipart
    ) {
        message(.deliver, header: header, acks: acks, body: body, into: &out)
    }

    /// Appends the packed SEND/DELIVER header (`id flags [subject] [trace] from to kind`, docs/protocol.md §5.2) to
    /// `bytes`.
    /// A field longer than 255 bytes cannot be encoded: its first 255 bytes are written, and the receiver refuses
    /// the message (`bad-address` / `bad-kind`), as it would any over-long field.
    public static func appendHeader(
        id: MessageID,
        subject: MessageID?,
        trace: TraceContext? = nil,
        from: String,
        to: String,
        kind: String,
        to bytes: inout [UInt8]
    ) {
        bytes.reserveCapacity(
            bytes.count + 20 + (subject == nil ? 0 : 16) + (trace == nil ? 0 : TraceContext.size) + from.utf8.count
                + to.utf8.count + kind.utf8.count
        )
        id.append(to: &bytes)
        bytes.append((subject == nil ? 0 : 1) | (trace == nil ? 0 : 2))
        subject?.append(to: &bytes)
        trace?.append(to: &bytes)
        appendField(from, to: &bytes)
        appendField(to, to: &bytes)
        appendField(kind, to: &bytes)
    }

    @inline(__always)
    static func appendField(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = text.utf8
        let count = utf8.count
        if count <= 255 {
            bytes.append(UInt8(count))
            bytes.append(contentsOf: utf8)
        } else {
            bytes.append(255)
            bytes.append(contentsOf: utf8.prefix(255))
        }
    }

    /// The packed header as its own array (for senders that keep it, like the broker's envelopes).
    public static func headerBytes(
        id: MessageID,
        subject: MessageID?,
        trace: TraceContext? = nil,
        from: String,
        to: String,
        kind: String
    ) -> [UInt8] {
        var bytes: [UInt8] = []
        appendHeader(id: id, subject: subject, trace: trace, from: from, to: to, kind: kind, to: &bytes)
        return bytes
    }

    /// ACK of one or more message ids (at most ``Wire/Limits/maxAckIDs``).
    public static func ack<C: Collection>(_ ids: C, into out: inout Multipart) where C.Element == MessageID {
        out.appendFrame { bytes in
            appendLeadPrefix(.ack, to: &bytes)
            bytes.reserveCapacity(bytes.count + ids.count * 16)
            for id in ids { id.append(to: &bytes) }
        }
    }

    public static func nack(id: MessageID?, _ error: WireError, into out: inout Multipart) {
        out.appendFrame { bytes in
            appendLeadPrefix(.nack, to: &bytes)
            id?.append(to: &bytes)
        }
        out.append(error.code.rawValue)
        out.append(truncated(error.reason, toBytes: Wire.Limits.standard.maxReason))
    }

    /// The longest prefix of `text` of at most `limit` UTF-8 bytes that ends between two Unicode scalars.
    static func truncated(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var end = text.utf8.index(text.startIndex, offsetBy: limit)
        // Step back over continuation bytes (10xxxxxx) to the start of the scalar the limit cuts.
        while end > text.startIndex && text.utf8[end] & 0xC0 == 0x80 { end = text.utf8.index(before: end) }
        return String(text[..<end])
    }

    public static func heartbeat(into out: inout Multipart) {
        lead(.heartbeat, into: &out)
    }

    public static func bye(reason: String = "", into out: inout Multipart) {
        lead(.bye, into: &out)
        if !reason.isEmpty { out.append(truncated(reason, toBytes: Wire.Limits.standard.maxReason)) }
    }

    /// HELLO or WELCOME with a JSON body.
    public static func session(_ command: WireCommand, body: [UInt8], into out: inout Multipart) {
        precondition(command == .hello || command == .welcome, "only HELLO and WELCOME carry a session body")
        lead(command, into: &out)
        out.append(body)
    }
}

extension MessageID {
    /// Appends the 16 big-endian bytes to `out` as one frame, without making an array.
    @inlinable
    public func appendFrame(to out: inout Multipart) {
        withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { out.append($0) }
    }
}
