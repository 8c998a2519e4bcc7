import Foundation

/// Checks that bytes are exactly one JSON value as RFC 8259 defines it, and says where they are not.
///
/// Foundation's `JSONDecoder` accepts more than JSON (a trailing comma, for one) and reports a syntax error without
/// a line, so every file a person edits (a scenario, a story, principals.json) is checked here first: it gets a
/// message naming the line and column. Object keys must be unique.
public enum StrictJSONSyntax {
    /// A place in the text where it stops being JSON.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// 1-based.
        public var line: Int
        /// 1-based, in characters.
        public var column: Int
        public var message: String
        public var description: String { "not valid JSON at line \(line), column \(column): \(message)" }
    }

    /// - Throws: ``Failure`` at the first byte that breaks the grammar.
    public static func check(_ data: Data) throws {
        let bytes = [UInt8](data)
        var parser = Parser(bytes: bytes)
        parser.skipSpace()
        if parser.atEnd { throw parser.fail("the text is empty; expected a JSON value such as {}") }
        try parser.value(depth: 0)
        parser.skipSpace()
        if !parser.atEnd { throw parser.fail("unexpected \(parser.found) after the end of the JSON value") }
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }

        /// The byte at `index`, in words.
        var found: String {
            guard index < bytes.count else { return "the end of the file" }
            let byte = bytes[index]
            if byte >= 0x20 && byte < 0x7f { return "'\(Character(Unicode.Scalar(byte)))'" }
            return String(format: "byte 0x%02x", byte)
        }

        func fail(_ message: String) -> Failure {
            var line = 1
            var column = 1
            for byte in bytes[..<min(index, bytes.count)] {
                if byte == 0x0A {
                    line += 1
                    column = 1
                } else if byte & 0xC0 != 0x80 {
                    column += 1  // count characters: skip UTF-8 continuation bytes
                }
            }
            return Failure(line: line, column: column, message: message)
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func value(depth: Int) throws {
            guard depth < 256 else { throw fail("nested more than 256 levels deep") }
            guard index < bytes.count else { throw fail("expected a value, found the end of the file") }
            switch bytes[index] {
            case UInt8(ascii: "{"): try object(depth: depth)
            case UInt8(ascii: "["): try array(depth: depth)
            case UInt8(ascii: "\""): _ = try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            case UInt8(ascii: "'"): throw fail("strings and field names take double quotes, not single quotes")
            default:
                throw fail("expected a value (an object, array, string, number, true, false or null), found \(found)")
            }
        }

        mutating func object(depth: Int) throws {
            index += 1
            skipSpace()
            if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
                index += 1
                return
            }
            var keys: Set<String> = []
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
                        throw fail(
                            "expected a field name in double quotes after ',', found '}' (JSON allows no trailing comma)"
                        )
                    }
                    throw fail("expected a field name in double quotes, found \(found)")
                }
                let keyStart = index
                let key = try string()
                if !keys.insert(key).inserted {
                    index = keyStart
                    throw fail("field '\(key)' is given twice in this object")
                }
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                    throw fail("expected ':' after the field name '\(key)', found \(found)")
                }
                index += 1
                skipSpace()
                try value(depth: depth + 1)
                skipSpace()
                guard index < bytes.count else { throw fail("expected ',' or '}', found the end of the file") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return
                }
                throw fail("expected ',' or '}' after the value of '\(key)', found \(found)")
            }
        }

        mutating func array(depth: Int) throws {
            index += 1
            skipSpace()
            if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipSpace()
                if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
                    throw fail("expected a value after ',', found ']' (JSON allows no trailing comma)")
                }
                try value(depth: depth + 1)
                skipSpace()
                guard index < bytes.count else { throw fail("expected ',' or ']', found the end of the file") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return
                }
                throw fail("expected ',' or ']' in the array, found \(found)")
            }
        }

        /// A string starting at `index` (a quote). - Returns: its text (escapes resolved loosely, for key names).
        mutating func string() throws -> String {
            let start = index
            index += 1
            var text: [UInt8] = []
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    guard let decoded = String(validating: text, as: UTF8.self) else {
                        index = start
                        throw fail("the string is not valid UTF-8")
                    }
                    return decoded
                }
                if byte < 0x20 {
                    throw fail(
                        byte == 0x0A
                            ? "a string ends at the end of the line without its closing quote"
                            : "a control character (\(found)) inside a string must be escaped"
                    )
                }
                if byte == UInt8(ascii: "\\") {
                    index += 1
                    guard index < bytes.count else { break }
                    let escape = bytes[index]
                    if escape == UInt8(ascii: "u") {
                        let digits = bytes[min(index + 1, bytes.count)..<min(index + 5, bytes.count)]
                        let isHex = { (byte: UInt8) in
                            (byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x66)
                        }
                        guard digits.count == 4, digits.allSatisfy(isHex) else {
                            throw fail("'\\u' takes four hex digits")
                        }
                        index += 5
                        text.append(UInt8(ascii: "?"))
                        continue
                    }
                    guard let plain = Self.escapes[escape] else {
                        throw fail(
                            "'\\\(Character(Unicode.Scalar(escape)))' is not a JSON escape (use \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX)"
                        )
                    }
                    text.append(plain)
                    index += 1
                    continue
                }
                text.append(byte)
                index += 1
            }
            index = start
            throw fail("the string starting here has no closing quote")
        }

        static let escapes: [UInt8: UInt8] = [
            UInt8(ascii: "\""): UInt8(ascii: "\""), UInt8(ascii: "\\"): UInt8(ascii: "\\"),
            UInt8(ascii: "/"): UInt8(ascii: "/"), UInt8(ascii: "b"): 0x08, UInt8(ascii: "f"): 0x0C,
            UInt8(ascii: "n"): 0x0A, UInt8(ascii: "r"): 0x0D, UInt8(ascii: "t"): 0x09,
        ]

        mutating func literal(_ word: String) throws {
            let utf8 = Array(word.utf8)
            guard bytes.count - index >= utf8.count, Array(bytes[index..<index + utf8.count]) == utf8 else {
                throw fail(
                    "expected a value, found \(found) (strings take double quotes; true, false and null are lower case)"
                )
            }
            index += utf8.count
        }

        mutating func number() throws {
            func digit() -> Bool { index < bytes.count && bytes[index] >= 0x30 && bytes[index] <= 0x39 }
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digit() else { throw fail("expected a digit, found \(found)") }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
                if digit() { throw fail("a number may not start with 0 (write 5, not 05)") }
            } else {
                while digit() { index += 1 }
            }
            if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digit() else { throw fail("expected a digit after the decimal point, found \(found)") }
                while digit() { index += 1 }
            }
            if index < bytes.count && (bytes[index] | 0x20) == UInt8(ascii: "e") {
                index += 1
                if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                    index += 1
                }
                guard digit() else { throw fail("expected a digit in the exponent, found \(found)") }
                while digit() { index += 1 }
            }
        }
    }
}
