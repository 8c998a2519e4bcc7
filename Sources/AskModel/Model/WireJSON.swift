import Foundation

/// The one JSON dialect of the AskRelay protocol.
///
/// Output is byte-for-byte reproducible: keys are sorted, slashes are not escaped, dates are RFC 3339 UTC
/// strings with millisecond precision (see ``WireDate``), `Data` is standard base64 with padding, and UUIDs
/// are upper-case canonical strings. Sets in the model are encoded as arrays in a fixed order by their owners.
public enum WireJSON {
    // JSONEncoder/JSONDecoder are Sendable in swift-foundation (their options are lock-protected and each
    // call builds its own state), so one configured instance of each is shared.
    private static let encoder = makeEncoder(dates: WireDate.format)
    private static let decoder = makeDecoder(dates: WireDate.parse, example: "2026-11-29T13:15:06.123Z")

    /// An encoder of this dialect (sorted keys, unescaped slashes, base64 data) whose dates `dates` writes
    /// (`nil`: not representable). The wire's dates are ``WireDate/format(_:)``; records keep microseconds.
    public static func makeEncoder(dates: @escaping @Sendable (Date) -> String?) -> JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        e.dataEncodingStrategy = .base64
        e.dateEncodingStrategy = .custom { date, encoder in
            guard let text = dates(date) else {
                throw EncodingError.invalidValue(
                    date,
                    .init(codingPath: encoder.codingPath, debugDescription: "date outside years 0000...9999")
                )
            }
            var c = encoder.singleValueContainer()
            try c.encode(text)
        }
        return e
    }

    /// A decoder of this dialect whose dates `dates` reads (`nil`: not a timestamp; the error shows `example`).
    public static func makeDecoder(dates: @escaping @Sendable (String) -> Date?, example: String) -> JSONDecoder {
        let d = JSONDecoder()
        d.dataDecodingStrategy = .base64
        d.dateDecodingStrategy = .custom { decoder in
            let c = try decoder.singleValueContainer()
            let text = try c.decode(String.self)
            guard let date = dates(text) else {
                throw DecodingError.dataCorruptedError(
                    in: c,
                    debugDescription: "expected an RFC 3339 timestamp like \(example), got \(text)"
                )
            }
            return date
        }
        return d
    }

    /// Encodes a value to canonical JSON bytes.
    ///
    /// Types of the flow's bodies have a hand-written encoder (``fastEncode(_:)``) that writes the same bytes as
    /// Foundation's; other types, and values the fast path leaves to Foundation, go through `JSONEncoder`.
    /// - Throws: `EncodingError` if the value cannot be represented (for example a date past year 9999).
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        if let bytes = fastEncode(value) { return bytes }
        return try foundationEncode(value)
    }

    /// Decodes a value from JSON bytes.
    ///
    /// Types of the flow's bodies have a hand-written decoder (``fastDecode(_:from:)``) that takes the input it
    /// fully understands; everything else, errors included, is Foundation's `JSONDecoder`.
    /// - Parameters:
    ///   - type: the type to decode.
    ///   - bytes: UTF-8 JSON text.
    /// - Throws: `DecodingError` when the bytes are not JSON or do not have the expected shape.
    public static func decode<T: Decodable>(_ type: T.Type = T.self, from bytes: some Collection<UInt8>) throws -> T {
        if let value = fastDecode(T.self, from: bytes) { return value }
        return try foundationDecode(T.self, from: bytes)
    }

    /// ``encode(_:)`` by Foundation's `JSONEncoder` only: the reference the fast path is tested against.
    public static func foundationEncode<T: Encodable>(_ value: T) throws -> [UInt8] {
        Array(try encoder.encode(value))
    }

    /// ``decode(_:from:)`` by Foundation's `JSONDecoder` only: the reference the fast path is tested against.
    public static func foundationDecode<T: Decodable>(_ type: T.Type = T.self, from bytes: some Collection<UInt8>)
        throws -> T
    {
        let data = (bytes as? Data) ?? Data(bytes)
        return try decoder.decode(T.self, from: data)
    }

    /// Encodes a value to canonical JSON text (for logs, docs and fixtures).
    public static func encodeString<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encode(value), as: UTF8.self)
    }
}

/// The JSON AskRelay writes for people and tools rather than the wire: reports, key and principal files, rosters,
/// limits state, the stats endpoint. One place configures every such encoder; keys are always sorted.
public enum ReportJSON {
    /// - Parameters:
    ///   - pretty: indented, one key per line (files); `false` for one line (the stats endpoint, rosters).
    ///   - escapingSlashes: `/` written as `\/` (Foundation's default, kept where a file has always had it).
    ///   - isoDates: dates as ISO 8601 strings instead of Foundation's default (seconds since 2001).
    public static func encoder(pretty: Bool = true, escapingSlashes: Bool = false, isoDates: Bool = false)
        -> JSONEncoder
    {
        let encoder = JSONEncoder()
        var formatting: JSONEncoder.OutputFormatting = [.sortedKeys]
        if pretty { formatting.insert(.prettyPrinted) }
        if !escapingSlashes { formatting.insert(.withoutEscapingSlashes) }
        encoder.outputFormatting = formatting
        if isoDates { encoder.dateEncodingStrategy = .iso8601 }
        return encoder
    }
}
