/// The journal's choice-id lists: JSON arrays of strings (`["askrelay.approve","askrelay.decline"]`), readable
/// with the sqlite3 shell, written and read without Foundation's JSON coders (a restart reads one list per open
/// question, and JSONDecoder costs microseconds per call).
enum JSONStringList {
    /// `list` as a compact JSON array. Escapes `"`, `\` and control characters; everything else (including `/`
    /// and non-ASCII text) is written as is, which is valid JSON.
    static func encode(_ list: [String]) -> String {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(2 + list.reduce(0) { $0 + $1.utf8.count + 3 })
        for (index, item) in list.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            appendQuoted(item, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `text` as a JSON string literal, quotes included.
    static func appendQuoted(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Parses a JSON array of strings.
    ///
    /// Handles what JSON allows in such an array: whitespace, every escape (`\"` `\\` `\/` `\b` `\f` `\n` `\r`
    /// `\t`, `\uXXXX` with surrogate pairs) and UTF-8 text. - Returns: `nil` for anything else, so the caller can
    /// hand the text to a full JSON decoder for the verdict (and its error message): not an array, an element
    /// that is not a string, a raw control character, a lone surrogate, invalid UTF-8, trailing text.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> [String]? {
        var parser = Parser(bytes: bytes)
        return parser.list()
    }

    static func parse(_ text: String) -> [String]? {
        var text = text
        return text.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }

    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        var scratch: [UInt8] = []

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        mutating func list() -> [String]? {
            skipSpace()
            guard take(UInt8(ascii: "[")) else { return nil }
            var result: [String] = []
            skipSpace()
            if !take(UInt8(ascii: "]")) {
                while true {
                    skipSpace()
                    guard let item = string() else { return nil }
                    result.append(item)
                    skipSpace()
                    if take(UInt8(ascii: ",")) { continue }
                    guard take(UInt8(ascii: "]")) else { return nil }
                    break
                }
            }
            skipSpace()
            return index == bytes.count ? result : nil
        }

        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            // Fast path: no escapes, so the bytes between the quotes are the string.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    return String(validating: slice, as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { return nil }
                index += 1
            }
            scratch.removeAll(keepingCapacity: true)
            scratch.append(contentsOf: bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: scratch, as: UTF8.self)
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
                        scratch.append(contentsOf: Array(String(Character(scalar)).utf8))
                    default: return nil
                    }
                case 0..<0x20:
                    return nil
                default:
                    scratch.append(byte)
                }
            }
            return nil
        }

        /// The scalar of a `\uXXXX` escape (the `\u` already read), joining a surrogate pair.
        mutating func unicodeEscape() -> Unicode.Scalar? {
            guard let first = hex4() else { return nil }
            switch first {
            case 0xD800...0xDBFF:
                guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let second = hex4(), (0xDC00...0xDFFF).contains(second) else {
                    return nil
                }
                return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
            case 0xDC00...0xDFFF:
                return nil
            default:
                return Unicode.Scalar(first)
            }
        }

        mutating func hex4() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            return value
        }
    }
}
