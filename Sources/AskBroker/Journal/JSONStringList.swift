import AskProtocol

/// The journal's choice-id lists: JSON arrays of strings (`["askrelay.approve","askrelay.decline"]`), readable
/// with the sqlite3 shell, written and read without Foundation's JSON coders (a restart reads one list per open
/// question, and JSONDecoder costs microseconds per call).
enum JSONStringList {
    /// `list` as a compact JSON array, each string escaped as the wire's JSON escapes it.
    static func encode(_ list: [String]) -> String {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(2 + list.reduce(0) { $0 + $1.utf8.count + 3 })
        for (index, item) in list.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            WireJSON.appendQuoted(item, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses a JSON array of strings (``WireJSON/stringArray(_:)``). - Returns: `nil` for anything else, so the
    /// caller can hand the text to a full JSON decoder for the verdict (and its error message).
    static func parse(_ bytes: UnsafeRawBufferPointer) -> [String]? { WireJSON.stringArray(bytes) }

    static func parse(_ text: String) -> [String]? {
        var text = text
        return text.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }
}
