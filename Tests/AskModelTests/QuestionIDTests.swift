@testable import AskModel
import Foundation
import Testing

@Suite("A new question's id")
struct QuestionIDTests {
    @Test("is a random version-4 UUID (RFC 9562 variant), different every time, also across threads")
    func pooledRandomIDs() async {
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
        var ids = [question.id, AnyPermissionQuestion(question).id]
        ids += await withTaskGroup(of: [UUID].self) { group in
            for _ in 0..<4 { group.addTask { (0..<3_000).map { _ in UUID.pooledRandom() } } }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(Set(ids).count == ids.count - 1, "only the question and its type-erased copy share an id")
        for id in ids {
            let text = Array(id.uuidString)
            #expect(text[14] == "4", "version nibble of \(id)")
            #expect("89AB".contains(text[19]), "variant of \(id)")
        }
        // Every bit outside the version and variant varies (a constant byte would show here).
        let bytes = ids.map { id in withUnsafeBytes(of: id.uuid) { Array($0) } }
        for index in 0..<16 {
            let fixed: UInt8 = index == 6 ? 0xF0 : index == 8 ? 0xC0 : 0
            #expect(Set(bytes.map { $0[index] & ~fixed }).count > 1, "byte \(index) never changes")
        }
    }
}
