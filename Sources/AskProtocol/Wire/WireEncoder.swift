import WireBytes

/// Builds AskRelay messages into a reusable ``Multipart`` buffer.
///
/// Every function appends to `out`, so a ROUTER sender first appends the peer identity and a DEALER sender starts
/// with an empty buffer.
public enum WireEncoder {
    @inlinable
    public static func header(_ command: WireCommand, into out: inout Multipart) {
        out.append(Wire.signature)
        withUnsafeBytes(of: command.rawValue) { out.append($0) }
    }

    /// SEND (worker → broker) or DELIVER (broker → worker): signature, command, the packed header (built in place,
    /// one append), body.
    public static func message(
        _ command: WireCommand,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        acks: ArraySlice<MessageID> = [],
        body: [UInt8],
        into out: inout Multipart
    ) {
        precondition(command == .send || command == .deliver, "only SEND and DELIVER carry application messages")
        header(command, into: &out)
        out.appendFrame { appendHeader(id: id, subject: subject, from: from, to: to, kind: kind, to: &$0) }
        carriedAcks(acks, into: &out)
        out.append(body)
    }

    /// The optional frame of a SEND or DELIVER that acknowledges other messages (docs/protocol.md §5.2): `ids` as
    /// 16-byte ids back to back, at most ``Wire/Limits/maxAckIDs``. Appends nothing when `ids` is empty.
    /// Goes between the header and the body.
    @inlinable
    public static func carriedAcks(_ ids: ArraySlice<MessageID>, into out: inout Multipart) {
        guard !ids.isEmpty else { return }
        out.appendFrame { bytes in
            bytes.reserveCapacity(ids.count * 16)
            for id in ids { id.append(to: &bytes) }
        }
    }

    /// SEND or DELIVER from header bytes already encoded (the broker forwards a SEND's header unchanged in the
    /// DELIVER it makes of it: only the command byte differs).
    @inlinable
    public static func message(
        _ command: WireCommand,
        header: UnsafeRawBufferPointer,
        acks: ArraySlice<MessageID> = [],
        body: UnsafeRawBufferPointer,
        into out: inout Multipart
    ) {
        precondition(command == .send || command == .deliver, "only SEND and DELIVER carry application messages")
        self.header(command, into: &out)
        out.append(header)
        carriedAcks(acks, into: &out)
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

    /// Appends the packed SEND/DELIVER header (`id flags [subject] from to kind`, docs/protocol.md §5.2) to `bytes`.
    /// A field longer than 255 bytes cannot be encoded: its first 255 bytes are written, and the receiver refuses
    /// the message (`bad-address` / `bad-kind`), as it would any over-long field.
    public static func appendHeader(
        id: MessageID,
        subject: MessageID?,
        from: String,
        to: String,
        kind: String,
        to bytes: inout [UInt8]
    ) {
        bytes.reserveCapacity(
            bytes.count + 20 + (subject == nil ? 0 : 16) + from.utf8.count + to.utf8.count + kind.utf8.count
        )
        id.append(to: &bytes)
        if let subject {
            bytes.append(1)
            subject.append(to: &bytes)
        } else {
            bytes.append(0)
        }
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
    public static func headerBytes(id: MessageID, subject: MessageID?, from: String, to: String, kind: String)
        -> [UInt8]
    {
        var bytes: [UInt8] = []
        appendHeader(id: id, subject: subject, from: from, to: to, kind: kind, to: &bytes)
        return bytes
    }

    /// ACK of one or more message ids (at most ``Wire/Limits/maxAckIDs``).
    public static func ack<C: Collection>(_ ids: C, into out: inout Multipart) where C.Element == MessageID {
        header(.ack, into: &out)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ids.count * 16)
        for id in ids { id.append(to: &bytes) }
        out.append(bytes)
    }

    public static func nack(id: MessageID?, _ error: WireError, into out: inout Multipart) {
        header(.nack, into: &out)
        out.append(id?.bytes ?? [])
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
        header(.heartbeat, into: &out)
    }

    public static func bye(reason: String = "", into out: inout Multipart) {
        header(.bye, into: &out)
        if !reason.isEmpty { out.append(truncated(reason, toBytes: Wire.Limits.standard.maxReason)) }
    }

    /// HELLO or WELCOME with a JSON body.
    public static func session(_ command: WireCommand, body: [UInt8], into out: inout Multipart) {
        precondition(command == .hello || command == .welcome, "only HELLO and WELCOME carry a session body")
        header(command, into: &out)
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
