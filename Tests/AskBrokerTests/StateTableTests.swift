@testable import AskBroker
import AskProtocol
import Foundation
import Testing

/// docs/protocol.md §10's table of what each state does with `send`, `cancel` and `answer` is checked against the
/// ledger's refusals, and every code it names against the error table (§7), so the three cannot drift apart. The
/// conformance suite provokes the same cells against a real broker.
@Suite("docs/protocol.md §10 state table")
struct StateTableTests {
    static let specification: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/protocol.md"), encoding: .utf8)) ?? ""
    }()

    /// The table's cells by state and request, as written.
    static var cells: [(state: String, request: String, cell: String)] {
        let lines = specification.components(separatedBy: "\n")
        guard let header = lines.firstIndex(of: "| state \\ request | `send` | `cancel` | `answer` |") else {
            return []
        }
        var cells: [(String, String, String)] = []
        for line in lines[(header + 2)...].prefix(while: { $0.hasPrefix("| ") }) {
            let columns = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard columns.count == 4 else { continue }
            for (request, cell) in zip(["send", "cancel", "answer"], columns.dropFirst()) {
                for state in columns[0].split(separator: ",") {
                    cells.append((state.trimmingCharacters(in: .whitespaces), request, cell))
                }
            }
        }
        return cells
    }

    @Test("every state has a row, and every refusal cell names the code the ledger sends")
    func matchesLedger() throws {
        let cells = Self.cells
        #expect(
            Set(cells.map(\.state)) == Set(QuestionState.allCases.map(\.rawValue)),
            "the table needs one row per state"
        )
        for (stateName, request, cell) in cells {
            let state = try #require(QuestionState(rawValue: stateName))
            // A cell that starts with an arrow is a transition the ledger allows; the others are refusals.
            guard !cell.hasPrefix("→") else { continue }
            let code = cell.split(separator: "`", omittingEmptySubsequences: false).dropFirst().first.map(String.init)
            #expect(
                code == QuestionLedger.refusal(for: state, wanted: request).code.rawValue,
                "\(stateName) | \(request): \(cell)"
            )
        }
    }

    @Test("every code in the table is a row of the error table for that request")
    func codesAreInTheErrorTable() {
        for (stateName, request, cell) in Self.cells {
            let tokens = cell.split(separator: "`", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 1 }.map { String($0.element) }
            for token in tokens where !["send", "cancel", "answer"].contains(token) {
                let code = ErrorCode(rawValue: token)
                #expect(code != nil, "\(stateName) | \(request): `\(token)` is not an error code")
                let rows = code.map(ErrorTable.conditions(of:)) ?? []
                #expect(
                    rows.contains { $0.message.contains("`\(request)`") },
                    "\(stateName) | \(request): `\(token)` has no row for \(request)"
                )
            }
        }
    }
}
