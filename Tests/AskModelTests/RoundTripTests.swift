import AskModel
import Foundation
import Testing

/// Encodes, decodes, and re-encodes; the value must survive and the bytes must not change.
func expectRoundTrip<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let bytes = try WireJSON.encode(value)
    let decoded = try WireJSON.decode(T.self, from: bytes)
    #expect(decoded == value, sourceLocation: sourceLocation)
    #expect(try WireJSON.encode(decoded) == bytes, sourceLocation: sourceLocation)
}

@Suite("Round trip")
struct RoundTripTests {
    @Test("every sample type round-trips")
    func samples() throws {
        try expectRoundTrip(Samples.communicationQuestion)
        try expectRoundTrip(Samples.appUpdateQuestion)
        try expectRoundTrip(Samples.communicationQuestion.typed(as: CommunicationTopic.self)!)
        try expectRoundTrip(Samples.appUpdateQuestion.typed(as: SignificantAppUpdateTopic.self)!)
        try expectRoundTrip(
            PermissionResponse(
                question: Samples.communicationQuestion.typed(as: CommunicationTopic.self)!,
                choice: .decline
            )
        )
        try expectRoundTrip(Samples.handles)
        try expectRoundTrip(PermissionChoice.approve)
        try expectRoundTrip(
            PersonName(
                namePrefix: "Dr.",
                givenName: "A",
                middleName: "B",
                familyName: "C",
                nameSuffix: "Jr.",
                nickname: "D"
            )
        )
        try expectRoundTrip(LimitsState(limitsEnabled: false, knownHandles: Set(Samples.handles)))
        try expectRoundTrip(Principal(role: .guardian, id: "g2", family: "f7"))
        try expectRoundTrip(Principal(role: .limits, id: "limits"))
        try expectRoundTrip(try Address.child("c42"))
        try expectRoundTrip(Address.broker)
        for error: AskError in [
            .communicationLimitsNotEnabled, .contactSyncNotSetup, Samples.invalidQuestionError,
            .notAvailable, .systemError("x"), .unknown,
        ] {
            try expectRoundTrip(error)
        }
        for kind in MessageKind.allCases {
            let body = AppMessageBody(Samples.message(kind))!
            #expect(body.kind == kind)
            #expect(try AppMessageBody(kind: kind.rawValue, bytes: body.encoded()) == body)
        }
    }

    @Test("typed and erased questions encode to the same bytes")
    func typedAndErasedAgree() throws {
        let typed = Samples.communicationQuestion.typed(as: CommunicationTopic.self)!
        #expect(try WireJSON.encode(typed) == WireJSON.encode(Samples.communicationQuestion))
        #expect(AnyPermissionQuestion(typed) == Samples.communicationQuestion)
        #expect(Samples.communicationQuestion.typed(as: SignificantAppUpdateTopic.self) == nil)
        // A typed decoder refuses the other topic.
        let bytes = try WireJSON.encode(Samples.appUpdateQuestion)
        #expect(throws: DecodingError.self) {
            try WireJSON.decode(PermissionQuestion<CommunicationTopic>.self, from: bytes)
        }
    }

    @Test("thousands of random questions round-trip byte-identically", arguments: [1, 2, 3] as [UInt64])
    func randomQuestions(seed: UInt64) throws {
        var r = RandomValues(seed: seed)
        for _ in 0..<1500 {
            let q = r.question()
            let bytes = try WireJSON.encode(q)
            let decoded = try WireJSON.decode(AnyPermissionQuestion.self, from: bytes)
            #expect(decoded == q)
            #expect(try WireJSON.encode(decoded) == bytes)
            // The typed view agrees with the erased one, byte for byte.
            switch q.topic {
            case .communication: #expect(try WireJSON.encode(q.typed(as: CommunicationTopic.self)!) == bytes)
            case .significantAppUpdate:
                #expect(try WireJSON.encode(q.typed(as: SignificantAppUpdateTopic.self)!) == bytes)
            }
        }
    }

    @Test("thousands of random messages round-trip through the kind registry", arguments: [11, 12] as [UInt64])
    func randomMessages(seed: UInt64) throws {
        var r = RandomValues(seed: seed)
        for i in 0..<2600 {
            let kind = MessageKind.allCases[i % MessageKind.allCases.count]
            let body = AppMessageBody(r.message(kind))!
            let bytes = try body.encoded()
            let decoded = try AppMessageBody(kind: kind.rawValue, bytes: bytes)
            #expect(decoded == body)
            #expect(try decoded.encoded() == bytes)
        }
    }

    @Test("encoding is stable: keys sorted, sets sorted, slashes unescaped, UUIDs upper-case")
    func canonicalForm() throws {
        let topic = CommunicationTopic(
            personInformation: [.init(handle: .init(value: "a/b", kind: .custom))],
            actions: [.communicate, .message, .call]
        )
        let text = try WireJSON.encodeString(topic)
        #expect(
            text
                == #"{"actions":["message","call","communicate"],"personInformation":[{"handle":{"kind":"custom","value":"a/b"}}]}"#
        )
        let lower = #"{"questionID":"6f1c4a3e-2b7d-4e59-9a0c-1d2e3f405162"}"#
        let send = try WireJSON.decode(SendQuestion.self, from: Array(lower.utf8))
        #expect(try WireJSON.encodeString(send) == #"{"questionID":"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"}"#)
    }

    @Test("dates are truncated to milliseconds so decoded values equal the originals")
    func dateTruncation() throws {
        var r = RandomValues(seed: 99)
        for _ in 0..<2000 {
            let raw = r.date()
            let message = GuardianQuestion(question: Samples.appUpdateQuestion, child: "c", family: "f", sentAt: raw)
            #expect(message.sentAt <= raw)
            #expect(raw.timeIntervalSince(message.sentAt) < 0.001)
            try expectRoundTrip(message)
            var q = Samples.appUpdateQuestion
            q.expirationDate = raw
            #expect(q.expirationDate == message.sentAt)
            try expectRoundTrip(q)
        }
    }
}
