import Foundation

/// Writes JSON bytes exactly as ``WireJSON``'s Foundation encoder (`[.sortedKeys, .withoutEscapingSlashes]`) does,
/// for the hand-written encoders of ``FastJSONEncodable``.
///
/// Foundation's output, which this reproduces (the differential tests in AskModelTests hold it to that):
/// - no whitespace; members in the byte order of their keys (callers write keys in that order);
/// - strings: `"` and `\` escaped with a backslash; U+0008, U+0009, U+000A, U+000C, U+000D as `\b` `\t` `\n` `\f`
///   `\r`; other controls below U+0020 as `\u00XX` with lower-case hex; everything else, `/`, U+007F and non-ASCII
///   text included, as its UTF-8 bytes;
/// - `true`/`false`; dates through ``WireDate``, `Data` as padded base64, UUIDs upper-case. No body carries a number,
///   so numbers (and Foundation's number formatting) are left out.
///
/// Commas are placed by one flag: a value written after another value (in an array or after a member) gets one.
struct JSONWriter {
    private(set) var bytes: [UInt8] = []
    private var needsComma = false

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    @inline(__always)
    private mutating func separator() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    mutating func beginObject() {
        separator()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    mutating func beginArray() {
        separator()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// Writes `"name":`; the member's value follows. `name` must need no escaping.
    @inline(__always)
    mutating func key(_ name: StaticString) {
        separator()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    mutating func bool(_ value: Bool) {
        separator()
        bytes.append(contentsOf: value ? "true".utf8 : "false".utf8)
        needsComma = true
    }

    /// A string literal, escaped as Foundation escapes it.
    mutating func string(_ text: String) {
        separator()
        var text = text
        text.withUTF8 { appendQuoted($0) }
        needsComma = true
    }

    private mutating func appendQuoted(_ utf8: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        var runStart = 0
        for (index, byte) in utf8.enumerated()
        where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
            if runStart < index { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index])) }
            runStart = index + 1
            bytes.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
            case 0x08: bytes.append(UInt8(ascii: "b"))
            case 0x09: bytes.append(UInt8(ascii: "t"))
            case 0x0A: bytes.append(UInt8(ascii: "n"))
            case 0x0C: bytes.append(UInt8(ascii: "f"))
            case 0x0D: bytes.append(UInt8(ascii: "r"))
            default:
                bytes.append(contentsOf: "u00".utf8)
                bytes.append(Self.hexDigits[Int(byte >> 4)])
                bytes.append(Self.hexDigits[Int(byte & 0xF)])
            }
        }
        if runStart < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...])) }
        bytes.append(UInt8(ascii: "\""))
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
    private static let upperHexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// A string that is `value`'s raw value.
    mutating func rawValue<E: RawRepresentable>(_ value: E) where E.RawValue == String {
        string(value.rawValue)
    }

    /// The canonical upper-case UUID string (`uuidString`).
    mutating func uuid(_ value: UUID) {
        separator()
        bytes.append(UInt8(ascii: "\""))
        withUnsafeBytes(of: value.uuid) { raw in
            for (index, byte) in raw.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 { bytes.append(UInt8(ascii: "-")) }
                bytes.append(Self.upperHexDigits[Int(byte >> 4)])
                bytes.append(Self.upperHexDigits[Int(byte & 0xF)])
            }
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    /// A ``WireDate`` string.
    /// - Returns: `false`, having written nothing, for a date outside years 0000...9999 (Foundation's encoder
    ///   throws there; the caller falls back to it for the error).
    mutating func date(_ value: Date) -> Bool {
        let mark = bytes.count
        separator()
        bytes.append(UInt8(ascii: "\""))
        guard WireDate.append(value, to: &bytes) else {
            bytes.removeSubrange(mark...)
            return false
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
        return true
    }

    /// Padded standard base64, as Foundation's `.base64` data strategy writes it.
    mutating func data(_ value: Data) {
        separator()
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: value.base64EncodedString().utf8)
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    /// A value of a type with its own fast encoder.
    @inline(__always)
    mutating func value<T: FastJSONEncodable>(_ value: T) -> Bool {
        value.writeJSON(to: &self)
    }

    /// An array of values of a type with its own fast encoder.
    mutating func values<T: FastJSONEncodable>(_ values: [T]) -> Bool {
        beginArray()
        for value in values {
            guard value.writeJSON(to: &self) else { return false }
        }
        endArray()
        return true
    }
}
