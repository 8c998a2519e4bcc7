@testable import AskBroker
import AskProtocol
import Foundation
import Testing

@Suite("A body that cannot be encoded is an error, never an empty frame")
struct BrokerEncodeFailureTests {
    /// Year 12000: outside what the wire's dates can carry (0000...9999).
    static let farFuture = Date(timeIntervalSince1970: 315_537_897_600 + 100 * 365 * 86_400)

    @Test("WireJSON.encodeBody names the type and keeps the code")
    func encodeBody() throws {
        let question = AnyPermissionQuestion(
            PermissionQuestion(handle: CommunicationHandle(value: "a@example.org", kind: .emailAddress))
        )
        let body = GuardianQuestion(
            question: question,
            child: "c1",
            family: "f1",
            sentAt: Date(),
            expiresAt: Self.farFuture
        )
        #expect(throws: EncodingError.self) { try WireJSON.encode(body) }
        do {
            _ = try WireJSON.encodeBody(body, code: .storageFailed)
            Issue.record("encoded a date of year 12000")
        } catch {
            #expect(error.code == .storageFailed)
            #expect(error.reason.contains("could not encode the GuardianQuestion body"), "\(error.reason)")
        }
    }

    @Test("the ledger's question body for a date the wire cannot carry is storage-failed, not []")
    func guardianQuestionBody() throws {
        let question = AnyPermissionQuestion(
            PermissionQuestion(handle: CommunicationHandle(value: "a@example.org", kind: .emailAddress))
        )
        let json = try WireJSON.encode(question)
        do {
            let body = try LedgerBodies.guardianQuestion(
                question: json,
                child: "c1",
                family: "f1",
                sentAt: Date(),
                expiresAt: Self.farFuture
            )
            Issue.record("got a body of \(body.count) bytes")
        } catch {
            #expect(error.code == .storageFailed)
            #expect(error.reason.contains("could not encode"), "\(error.reason)")
        }
    }
}
