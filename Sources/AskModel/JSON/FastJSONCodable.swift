import Foundation

/// A type with a hand-written JSON encoder that writes exactly the bytes of ``WireJSON``'s Foundation encoder.
///
/// ``WireJSON/encode(_:)`` uses it for every value whose type adopts it and falls back to Foundation when it returns
/// `false`.
protocol FastJSONEncodable {
    /// Writes the value's canonical JSON.
    /// - Returns: `false` when the value is one Foundation's encoder would refuse (a date it cannot write); the
    ///   writer's content is then unspecified and the caller discards it.
    func writeJSON(to writer: inout JSONWriter) -> Bool
}

/// A type with a hand-written JSON decoder that accepts only input it fully understands.
///
/// ``WireJSON/decode(_:from:)`` tries it first and falls back to Foundation when it returns `nil`, so whatever it
/// accepts must decode to the value Foundation would give, and anything doubtful (a missing, repeated or unknown
/// key, a `null` in a required field, an unknown enum case, an escape where none is expected) must be declined
/// rather than judged: error messages and edge cases stay Foundation's.
protocol FastJSONDecodable {
    /// Reads a value at the reader's position; `nil` to decline.
    init?(json reader: inout JSONReader)
}

/// Both directions of the fast JSON path.
typealias FastJSONCodable = FastJSONEncodable & FastJSONDecodable

extension WireJSON {
    /// The fast path's encoding of `value`, or `nil` when its type has none or the value needs Foundation's verdict.
    /// ``encode(_:)`` is this, else ``foundationEncode(_:)``; public for the differential tests and the fuzzer.
    public static func fastEncode<T>(_ value: T) -> [UInt8]? {
        guard let fast = value as? any FastJSONEncodable else { return nil }
        var writer = JSONWriter()
        return fast.writeJSON(to: &writer) ? writer.bytes : nil
    }

    /// The fast path's decoding of `bytes`, or `nil` when `T` has none or it declines the input.
    /// ``decode(_:from:)`` is this, else ``foundationDecode(_:from:)``; public for the differential tests and the fuzzer.
    public static func fastDecode<T>(_ type: T.Type = T.self, from bytes: some Collection<UInt8>) -> T? {
        guard let fastType = T.self as? any FastJSONDecodable.Type else { return nil }
        return withContiguousBytes(bytes) { decodeDocument(fastType, $0) as? T }
    }

    /// A whole document: the value, then nothing but whitespace.
    private static func decodeDocument<F: FastJSONDecodable>(_ type: F.Type, _ bytes: UnsafeRawBufferPointer) -> F? {
        var reader = JSONReader(bytes)
        guard let value = F(json: &reader), reader.isAtEnd() else { return nil }
        return value
    }

    private static func withContiguousBytes<R>(_ bytes: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) -> R)
        -> R
    {
        if let data = bytes as? Data { return data.withUnsafeBytes(body) }
        if let result = bytes.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) { return result }
        return Array(bytes).withUnsafeBytes(body)
    }
}

extension WireJSON {
    /// Appends `text` as a JSON string literal, quotes included, escaped exactly as ``encode(_:)`` escapes it (for
    /// bodies built around stored JSON, and the journal's lists).
    public static func appendQuoted(_ text: String, to out: inout [UInt8]) {
        var writer = JSONWriter(capacity: text.utf8.count + 2)
        writer.string(text)
        out.append(contentsOf: writer.bytes)
    }

    /// A JSON array of strings, read by the fast path's rules (every escape, surrogate pairs, whitespace).
    /// - Returns: `nil` for anything else (not an array, an element that is not a string, a raw control character,
    ///   a lone surrogate, invalid UTF-8, trailing text), for the caller to hand to a full decoder for the verdict.
    public static func stringArray(_ bytes: UnsafeRawBufferPointer) -> [String]? {
        var reader = JSONReader(bytes)
        guard let list = reader.array({ $0.string() }), reader.isAtEnd() else { return nil }
        return list
    }
}
