import AskProtocol
import Foundation
import Testing

@testable import AskClient

@Suite("QuestionRefusal: answer, send and cancel refusals by name")
struct RefusalTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("a refusal equals the named value of its code whatever its reason, and no other")
    func equalityIgnoresTheReason() {
        let late = GuardianAnswerError.refused(.alreadyClosed, reason: "question q1 is answered")
        #expect(late == .alreadyClosed)
        #expect(late != .expired)
        #expect(late != .timedOut)
        #expect(late.refusal == .alreadyClosed)
        #expect(Set([late, .alreadyClosed]).count == 1)
        #expect(GuardianAnswerError.unknownGuardian("g1") != .unknownGuardian("g2"))
        let sheet = SheetError.refused(code: .expired, reason: "past its deadline")
        #expect(sheet == .expired && sheet != .cancelled && sheet.refusal == .expired)
        #expect(SheetError.refused(code: .badID, reason: "").refusal == nil)
        #expect(SheetError.refused(.busy) == .refused(code: .busy, reason: "retry"))
    }

    @Test("every ledger code the broker refuses a send, a cancel or an answer with has a QuestionRefusal")
    func coversTheErrorTable() {
        let requests = ["`send`", "`cancel`", "`answer`"]
        // A body that does not decode is a defect of the client, not a refusal a program handles.
        let defects: Set<ErrorCode> = [.invalidUTF8, .invalidJSON, .badSubject]
        let named = Set(
            ErrorTable.conditions.filter { condition in
                condition.message.hasPrefix("SEND") && requests.contains { condition.message.contains($0) }
            }.map(\.code)
        ).subtracting(defects)
        // Any SEND can get these two: the broker is full, or its journal failed.
        #expect(Set(QuestionRefusal.allCases.map(\.code)) == named.union([.busy, .storageFailed]))
        for refusal in QuestionRefusal.allCases { #expect(QuestionRefusal(refusal.code) == refusal) }
    }

    @Test("docs/workers.md lists every QuestionRefusal case with its code")
    func documented() throws {
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/workers.md"), encoding: .utf8)
        for refusal in QuestionRefusal.allCases {
            let words = refusal.rawValue.split(separator: "-")
            let name = words[0] + words.dropFirst().map(\.capitalized).joined()
            #expect(page.contains("| `.\(name)` | `\(refusal.rawValue)` |"), "\(refusal.rawValue)")
        }
    }
}
