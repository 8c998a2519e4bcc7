import Foundation

/// A strict, forward-only reader over UTF-8 JSON bytes, for the hand-written decoders of ``FastJSONDecodable``.
///
/// It reads RFC 8259 JSON token by token and understands only what the protocol's bodies contain: objects, arrays,
/// strings, `true`/`false` and `null`. Every read returns `nil` (or `false`) on anything else or anything doubtful —
/// a number, an escaped object key, a lone surrogate, a raw control character, invalid UTF-8, a missing comma — and
/// the caller then declines the whole input, so ``WireJSON`` hands it to Foundation for the verdict and the error
/// message. It never decides that input is invalid; it only decides that it is sure.
///
/// The bytes must outlive the reader (it is used inside `withUnsafeBytes`).
struct JSONReader {
    private let bytes: UnsafeRawBufferPointer
    private var index = 0
    /// Unescaped string bytes, reused across strings with escapes.
    private var scratch: [UInt8] = []

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    // MARK: - Whitespace and punctuation

    /// Skips JSON whitespace (space, tab, line feed, carriage return).
    @inline(__always)
    mutating func skipSpace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// Skips whitespace, then consumes `byte` if it is next.
    @inline(__always)
    mutating func take(_ byte: UInt8) -> Bool {
        skipSpace()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// Whether only whitespace is left.
    mutating func isAtEnd() -> Bool {
        skipSpace()
        return index == bytes.count
    }

    /// Consumes the literal `null` if it is next (after whitespace).
    mutating func takeNull() -> Bool { takeLiteral("null") }

    /// `true` or `false`; `nil` for anything else.
    mutating func bool() -> Bool? {
        if takeLiteral("true") { return true }
        if takeLiteral("false") { return false }
        return nil
    }

    private mutating func takeLiteral(_ literal: StaticString) -> Bool {
        skipSpace()
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        let word = UnsafeRawBufferPointer(start: literal.utf8Start, count: count)
        for k in 0..<count where bytes[index + k] != word[k] { return false }
        // What follows (`nullx`) is checked by the caller's next read, which expects punctuation or the end.
        index += count
        return true
    }

    // MARK: - Containers

    /// Reads an object, calling `field` for each member with its key, the reader positioned at the member's value.
    ///
    /// Keys must be plain strings without escapes (the protocol's keys are ASCII names); a key with an escape or a
    /// `field` that returns `false` makes the whole read fail. `field` must return `false` for a key it has already
    /// seen (Foundation keeps the first of repeated keys; rather than mirror that, the fast path declines) and for
    /// any key it does not know (Foundation skips those, but it also accepts numbers like `01` there).
    /// - Returns: `false` when the input is not an object this reader is sure of.
    @inline(__always)
    mutating func object(_ field: (JSONKey, inout JSONReader) -> Bool) -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        while true {
            guard let key = key() else { return false }
            guard take(UInt8(ascii: ":")), field(key, &self) else { return false }
            if take(UInt8(ascii: ",")) { continue }
            return take(UInt8(ascii: "}"))
        }
    }

    /// Reads an array of elements read by `element`.
    /// - Returns: `nil` when the input is not such an array.
    @inline(__always)
    mutating func array<T>(_ element: (inout JSONReader) -> T?) -> [T]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var result: [T] = []
        if take(UInt8(ascii: "]")) { return result }
        while true {
            guard let value = element(&self) else { return nil }
            result.append(value)
            if take(UInt8(ascii: ",")) { continue }
            return take(UInt8(ascii: "]")) ? result : nil
        }
    }

    /// Reads a value of a type with its own fast decoder.
    @inline(__always)
    mutating func value<T: FastJSONDecodable>(_ type: T.Type = T.self) -> T? {
        T(json: &self)
    }

    /// Reads an array of values of a type with its own fast decoder.
    @inline(__always)
    mutating func values<T: FastJSONDecodable>(_ type: T.Type = T.self) -> [T]? {
        array { T(json: &$0) }
    }

    // MARK: - Strings

    /// The key of an object member: a string without escapes, as raw bytes.
    private mutating func key() -> JSONKey? {
        guard let raw = rawString() else { return nil }
        return JSONKey(bytes: raw)
    }

    /// The bytes between the quotes of a string that has no escapes and no control characters (not yet checked
    /// for UTF-8); `nil` for anything else, the reader then being somewhere inside the string.
    private mutating func rawString() -> UnsafeRawBufferPointer? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        guard skipPlainRun() == UInt8(ascii: "\"") else { return nil }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
        index += 1
        return slice
    }

    /// Moves to the first `"`, `\` or control character inside a string. - Returns: that byte, `nil` at the end.
    @inline(__always)
    private mutating func skipPlainRun() -> UInt8? {
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { return byte }
            index += 1
        }
        return nil
    }

    /// A string with every JSON escape resolved.
    /// - Returns: `nil` for a non-string, a raw control character, a bad or incomplete escape, a lone surrogate
    ///   (Foundation refuses those too, but its message is its own), or invalid UTF-8.
    mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        switch skipPlainRun() {
        case UInt8(ascii: "\""):
            let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            index += 1
            return Self.validString(slice)
        case UInt8(ascii: "\\"): break
        default: return nil  // a control character, or the end
        }
        // Slow path: at least one escape.
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return scratch.withUnsafeBytes { Self.validString($0) }
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(escape)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = unicodeEscape() else { return nil }
                    appendUTF8(scalar)
                default:
                    return nil
                }
            case 0..<0x20:
                return nil
            default:
                scratch.append(byte)
            }
        }
        return nil
    }

    /// `utf8` as a string, or `nil` if it is not valid UTF-8.
    ///
    /// `String(validating:as:)` would do, but it is not specialised for buffers and looks up generic metadata on
    /// every call, a sixth of the decoding time. `String(decoding:as:)` is fast and replaces invalid sequences
    /// with U+FFFD (EF BF BD), so the text is valid exactly when its UTF-8 is the input.
    @inline(__always)
    static func validString(_ utf8: UnsafeRawBufferPointer) -> String? {
        var text = String(decoding: utf8.bindMemory(to: UInt8.self), as: UTF8.self)
        return Self.equal(&text, utf8) ? text : nil
    }

    /// Whether the UTF-8 of `text` is `utf8`, by one `memcmp` (the `UTF8View` walks byte by byte).
    @inline(__always)
    static func equal(_ text: inout String, _ utf8: UnsafeRawBufferPointer) -> Bool {
        text.withUTF8 { own in
            own.count == utf8.count && (own.isEmpty || memcmp(own.baseAddress!, utf8.baseAddress!, own.count) == 0)
        }
    }

    /// The scalar of a `\uXXXX` escape (after `\u`), joining a surrogate pair; `nil` for a lone surrogate.
    private mutating func unicodeEscape() -> Unicode.Scalar? {
        guard let first = hex4() else { return nil }
        switch first {
        case 0xD800...0xDBFF:
            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { return nil }
            index += 2
            guard let second = hex4(), (0xDC00...0xDFFF).contains(second) else { return nil }
            return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        case 0xDC00...0xDFFF:
            return nil
        default:
            return Unicode.Scalar(first)
        }
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Self.hexValue(bytes[index]) else { return nil }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func appendUTF8(_ scalar: Unicode.Scalar) {
        let v = scalar.value
        switch v {
        case 0..<0x80:
            scratch.append(UInt8(v))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | v >> 6))
            scratch.append(UInt8(0x80 | v & 0x3F))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | v >> 12))
            scratch.append(UInt8(0x80 | v >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | v & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | v >> 18))
            scratch.append(UInt8(0x80 | v >> 12 & 0x3F))
            scratch.append(UInt8(0x80 | v >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | v & 0x3F))
        }
    }

    @inline(__always)
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: - Strings with a meaning

    /// Reads a member's value into `slot` with `read`.
    /// - Returns: `false` when the slot is already filled (a repeated key) or `read` declines.
    @inline(__always)
    mutating func read<T>(into slot: inout T?, _ read: (inout JSONReader) -> T?) -> Bool {
        guard case .none = slot, let value = read(&self) else { return false }
        slot = value
        return true
    }

    /// Reads an optional member's value into `slot`: `null` is `.some(nil)`, like an absent member once unwrapped.
    @inline(__always)
    mutating func readOptional<T>(into slot: inout T??, _ read: (inout JSONReader) -> T?) -> Bool {
        self.read(into: &slot) { $0.nullOr(read) }
    }

    /// `null` as `.some(nil)`, else a value read by `read` as `.some(value)`; `nil` when neither: the reading of an
    /// optional field, where Foundation's `decodeIfPresent` also takes `null` as absent.
    @inline(__always)
    mutating func nullOr<T>(_ read: (inout JSONReader) -> T?) -> T?? {
        if takeNull() { return .some(nil) }
        return read(&self).map { .some($0) }
    }

    /// A string that is one of `E`'s raw values.
    @inline(__always)
    mutating func rawValue<E: RawRepresentable & CaseIterable>(_ type: E.Type = E.self) -> E?
    where E.RawValue == String {
        // Compare the bytes with each case's name rather than build a string to switch on; escaped text takes the
        // long way.
        let start = index
        if let raw = rawString() {
            return E.allCases.first { value in
                var name = value.rawValue
                return Self.equal(&name, raw)
            }
        }
        index = start
        return string().flatMap(E.init(rawValue:))
    }

    /// A UUID in its canonical 36-character form, hex digits in either case (what `UUID(uuidString:)` takes).
    /// Any other spelling, escapes included, is declined.
    mutating func uuid() -> UUID? {
        guard let raw = rawString(), raw.count == 36 else { return nil }
        var out: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let ok = withUnsafeMutableBytes(of: &out) { target -> Bool in
            var r = 0
            for w in 0..<16 {
                if r == 8 || r == 13 || r == 18 || r == 23 {
                    guard raw[r] == UInt8(ascii: "-") else { return false }
                    r += 1
                }
                guard let high = Self.hexValue(raw[r]), let low = Self.hexValue(raw[r + 1]) else { return false }
                target[w] = high << 4 | low
                r += 2
            }
            return true
        }
        return ok ? UUID(uuid: out) : nil
    }

    /// An RFC 3339 timestamp string (``WireDate/parse(_:)``), without escapes.
    mutating func date() -> Date? {
        guard let raw = rawString() else { return nil }
        return WireDate.parse(utf8: raw)
    }

    /// A standard base64 string (what `Data(base64Encoded:)` takes), without escapes.
    mutating func data() -> Data? {
        guard let raw = rawString(), let text = Self.validString(raw) else { return nil }
        return Data(base64Encoded: text)
    }
}

/// An object key as it appears between the quotes, matched against the protocol's names with `case "name":`.
struct JSONKey {
    let bytes: UnsafeRawBufferPointer

    @inline(__always)
    static func ~= (name: StaticString, key: JSONKey) -> Bool {
        let count = name.utf8CodeUnitCount
        guard key.bytes.count == count else { return false }
        return memcmp(key.bytes.baseAddress!, name.utf8Start, count) == 0
    }
}
