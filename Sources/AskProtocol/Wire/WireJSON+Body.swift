import AskModel

extension WireJSON {
    /// Encodes a message body. A value that cannot be encoded is an error naming its type, never an empty body (which
    /// the peer would refuse, with nothing logged here).
    /// - Parameter code: the code of the error (what the operation that needed the body fails with).
    /// - Throws: ``WireError`` with `code` and the encoder's reason.
    public static func encodeBody<T: Encodable>(_ value: T, code: ErrorCode) throws(WireError) -> [UInt8] {
        do { return try encode(value) } catch {
            throw WireError(code, "could not encode the \(T.self) body: \(error)")
        }
    }
}
