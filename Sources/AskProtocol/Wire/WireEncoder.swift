import ZeroMQ

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

    /// SEND (worker → broker) or DELIVER (broker → worker).
    public static func message(
        _ command: WireCommand,
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        body: [UInt8],
        into out: inout Multipart
    ) {
        precondition(command == .send || command == .deliver, "only SEND and DELIVER carry application messages")
        header(command, into: &out)
        id.appendFrame(to: &out)
        out.append(from)
        out.append(to)
        out.append(kind)
        if let subject { subject.appendFrame(to: &out) } else { out.append([UInt8]()) }
        out.append(body)
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
