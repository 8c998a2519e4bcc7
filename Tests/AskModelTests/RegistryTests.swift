import AskModel
import Foundation
import Testing

@Suite("Body registry")
struct RegistryTests {
    @Test("unknown kind")
    func unknownKind() {
        #expect(throws: BodyDecodingError.unknownKind("ask.v2")) {
            try AppMessageBody(kind: "ask.v2", bytes: Array("{}".utf8))
        }
        #expect(AppMessageRegistry.bodyType(for: "nope") == nil)
    }

    @Test("invalid UTF-8 is reported before JSON")
    func invalidUTF8() {
        let bytes: [UInt8] = [
            0x7B, 0x22, 0x70, 0x61, 0x79, 0x6C, 0x6F, 0x61, 0x64, 0x22, 0x3A, 0x22, 0xC3, 0x28, 0x22, 0x7D,
        ]
        #expect(throws: BodyDecodingError.invalidUTF8) { try AppMessageBody(kind: "echo", bytes: bytes) }
        #expect(throws: BodyDecodingError.invalidUTF8) { try AppMessageRegistry.decode(kind: "send", from: [0xFF]) }
    }

    @Test(
        "invalid JSON and wrong shapes",
        arguments: [
            ("echo", "{\"payload\":"),
            ("echo", "not json"),
            ("echo", "{\"payload\":42}"),
            ("send", "{\"questionID\":\"not-a-uuid\"}"),
            ("answer", "{\"questionID\":\"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162\"}"),
            ("closed", "{\"questionID\":\"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162\",\"reason\":\"vanished\"}"),
            (
                "ask.result",
                "{\"questionID\":\"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162\",\"outcome\":{\"case\":\"maybe\"}}"
            ),
            ("question", "{\"child\":\"c\",\"family\":\"f\",\"sentAt\":\"yesterday\",\"question\":{}}"),
            ("ask", "{\"question\":{\"topicID\":\"weather\"}}"),
            ("limits.reply", "[]"),
        ]
    )
    func invalidJSON(kind: String, text: String) {
        do {
            _ = try AppMessageBody(kind: kind, bytes: Array(text.utf8))
            Issue.record("decoded \(text)")
        } catch {
            guard case .invalidJSON(let detail) = error else {
                Issue.record("expected invalidJSON, got \(error)")
                return
            }
            #expect(!detail.isEmpty)
        }
    }

    @Test("every kind maps to a body type with the same kind")
    func kindsAreConsistent() {
        #expect(MessageKind.allCases.count == 16)
        for kind in MessageKind.allCases {
            #expect(kind.bodyType.messageKind == kind)
            #expect(
                ObjectIdentifier(AppMessageRegistry.bodyType(for: kind.rawValue)!) == ObjectIdentifier(kind.bodyType)
            )
        }
        #expect(AskResult.kind == "ask.result")
        #expect(AnyPermissionResponse.kind == "response")
    }

    @Test("decoding by kind returns the typed body")
    func decodeByKind() throws {
        let bytes = try WireJSON.encode(GuardianAnswer(questionID: Samples.questionID, choiceID: "askrelay.decline"))
        let any = try AppMessageRegistry.decode(kind: "answer", from: bytes)
        #expect(any as? GuardianAnswer == GuardianAnswer(questionID: Samples.questionID, choiceID: "askrelay.decline"))
    }

    @Test("subject is the question id where there is one")
    func subjects() {
        for kind in MessageKind.allCases {
            let message = Samples.message(kind)
            switch kind {
            case .limitsQuery, .limitsReply, .limitsAdmin, .limitsRead, .limitsState, .limitsWrite, .echo:
                #expect(message.subject == nil)
            default: #expect(message.subject == Samples.questionID, "\(kind.rawValue)")
            }
        }
    }
}
