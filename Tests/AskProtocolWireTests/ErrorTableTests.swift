import AskProtocol
import Foundation
import Testing

@Suite("The error table is the single source of docs/protocol.md §7")
struct ErrorTableTests {
    /// The rows of the specification's table: the lines after its header and separator, up to the first non-row.
    static var specificationRows: [String] {
        let lines = SpecExampleTests.specification.components(separatedBy: "\n")
        guard let header = lines.firstIndex(of: ErrorTable.markdownHeader) else { return [] }
        return Array(lines[(header + 2)...].prefix { $0.hasPrefix("| `") })
    }

    @Test("docs/protocol.md's error table is ErrorTable, row for row, in order, both ways")
    func specificationMatches() throws {
        let specified = Self.specificationRows
        let table = ErrorTable.conditions.map(\.markdownRow)
        if let path = ProcessInfo.processInfo.environment["ASKRELAY_ERROR_TABLE_OUT"] {
            // `ASKRELAY_ERROR_TABLE_OUT=/path swift test --filter ErrorTableTests` writes the table to paste.
            try ([ErrorTable.markdownHeader, "|---|---|---|---|"] + table).joined(separator: "\n").write(
                toFile: path,
                atomically: true,
                encoding: .utf8
            )
        }
        #expect(!specified.isEmpty, "docs/protocol.md has no table headed \(ErrorTable.markdownHeader)")
        let missing = table.filter { !specified.contains($0) }
        let extra = specified.filter { !table.contains($0) }
        #expect(
            missing.isEmpty,
            "rows of ErrorTable missing from docs/protocol.md:\n\(missing.joined(separator: "\n"))"
        )
        #expect(
            extra.isEmpty,
            "rows of docs/protocol.md that ErrorTable does not have:\n\(extra.joined(separator: "\n"))"
        )
        #expect(specified == table, "same rows, different order")
    }

    @Test("every code the broker can send has at least one row, and row names are unique and start with their code")
    func everyCode() {
        for code in ErrorCode.allCases {
            #expect(!ErrorTable.conditions(of: code).isEmpty, "no row for \(code.rawValue)")
        }
        let ids = ErrorTable.conditions.map(\.id)
        #expect(Set(ids).count == ids.count)
        for row in ErrorTable.conditions {
            #expect(row.id == row.code.rawValue || row.id.hasPrefix(row.code.rawValue + "."), "\(row.id)")
            #expect(!row.condition.contains("|"), "\(row.id): a '|' would split the markdown cell")
        }
        // Rows follow ErrorCode's order, so the specification reads code by code.
        let order = ErrorTable.conditions.map { ErrorCode.allCases.firstIndex(of: $0.code)! }
        #expect(order == order.sorted())
    }
}
