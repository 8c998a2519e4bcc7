import Foundation
import Testing

/// docs/performance.md's Figures table is the reference for measured figures; docs/scaling.md's Numbers table quotes
/// it. A figure re-measured in one page and not the other is caught here: every number in a scaling.md row whose
/// source is an `askrelay load` command must stand in performance.md's Figures table as written.
@Suite("docs quote the same figures")
struct DocFiguresTests {
    static func text(_ path: String) throws -> String {
        try String(contentsOf: PackageLayoutTests.root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The lines of the section headed `## <heading>` of a page.
    static func section(_ heading: String, of page: String) throws -> String {
        let text = try Self.text(page)
        let start = try #require(text.range(of: "\n## \(heading)\n"), "\(page) has no section \(heading)")
        let rest = text[start.upperBound...]
        return String(rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)])
    }

    /// The numbers of a table cell as written: `5 640`, `0.36–0.39`, `1 000 000`, `2.20`.
    static func numbers(in cell: String) -> [String] {
        cell.matches(of: /\d+(?: \d{3})*(?:\.\d+)?(?:–\d+(?: \d{3})*(?:\.\d+)?)?/).map { String($0.output) }
    }

    /// scaling.md's rows measured with `askrelay load`: (quantity, value cell).
    static func loadRows() throws -> [(quantity: String, value: String)] {
        try section("Numbers", of: "docs/scaling.md").split(separator: "\n").compactMap { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            guard cells.count >= 4, cells[3].contains("askrelay load"), cells[2].hasPrefix("measured") else {
                return nil
            }
            return (cells[1], cells[2])
        }
    }

    @Test("every figure scaling.md quotes from a load run stands in performance.md's Figures table")
    func scalingQuotesPerformance() throws {
        let figures = try Self.section("Figures", of: "docs/performance.md")
        let rows = try Self.loadRows()
        #expect(rows.count >= 4, "scaling.md's measured load rows: \(rows.map(\.quantity))")
        for row in rows {
            for number in Self.numbers(in: row.value) {
                #expect(
                    figures.contains(number),
                    "docs/scaling.md, \(row.quantity): \(number) is not in docs/performance.md's Figures table"
                )
            }
        }
    }

    @Test("the check finds a figure performance.md does not have, and reads numbers as written")
    func checkCanFail() throws {
        let figures = try Self.section("Figures", of: "docs/performance.md")
        #expect(Self.numbers(in: "measured 8 200–8 500 at 1 000 000, 2.20 s") == ["8 200–8 500", "1 000 000", "2.20"])
        #expect(!figures.contains("8 200–8 500"), "the old flows figure, which scaling.md quoted once")
    }
}
