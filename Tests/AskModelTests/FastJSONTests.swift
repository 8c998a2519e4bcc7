import AskModel
import Foundation
import Testing

/// The fast JSON path against Foundation's coders: the same bytes out, the same values in, and for input it does not
/// fully understand, no verdict of its own.
@Suite("Fast JSON path", .timeLimit(.minutes(5)))
struct FastJSONTests {
    // MARK: - Encoding and decoding canonical bytes

    @Test(
        "random values of every body and model type: fast bytes == Foundation bytes, fast value == Foundation value",
        arguments: [101, 102, 103] as [UInt64]
    )
    func randomValuesAgree(seed: UInt64) throws {
        var random = RandomValues(seed: seed)
        for _ in 0..<300 {
            for kind in MessageKind.allCases { try expectAgreement(random.message(kind)) }
            let question = random.question()
            try expectAgreement(question)
            try expectAgreement(AnyPermissionResponse(question: question, choice: random.choice()))
            try expectAgreement(random.askError())
            try expectAgreement(random.choice())
            try expectAgreement(random.handle())
            try expectAgreement(random.person())
            try expectAgreement(
                GuardianQuestion(
                    question: question,
                    child: random.string(),
                    family: random.string(),
                    sentAt: random.date(),
                    expiresAt: random.maybe { $0.date() }
                )
            )
            try expectAgreement(AskResult(questionID: random.uuid(), outcome: .refused(random.askError())))
            if let typed = question.typed(as: CommunicationTopic.self) { try expectAgreement(typed) }
            if let typed = question.typed(as: SignificantAppUpdateTopic.self) { try expectAgreement(typed) }
        }
    }

    @Test("every character below U+0080 and awkward scalars are escaped exactly as Foundation escapes them")
    func stringEscaping() throws {
        var all = ""
        for value in 0..<0x80 { all.unicodeScalars.append(Unicode.Scalar(UInt8(value))) }
        all += "/\\\"\u{7F}\u{80}\u{85}\u{A0}é\u{2028}\u{2029}\u{FEFF}\u{FFFD}\u{FFFF}😀👩‍👩‍👧e\u{301}"
        try expectAgreement(Echo(payload: all))
        try expectAgreement(Echo(payload: ""))
        for scalar in all.unicodeScalars {
            try expectAgreement(Echo(payload: String(scalar)))
            try expectAgreement(
                PermissionChoice(id: "x\(scalar)y", title: String(repeating: String(scalar), count: 3), answer: .denial)
            )
        }
    }

    @Test("empty arrays, absent and present optionals, every action set, every error case")
    func shapes() throws {
        let id = Samples.questionID
        try expectAgreement(ApprovalNotice(child: "", questionID: id, handles: []))
        try expectAgreement(KnownHandlesReply(known: []))
        try expectAgreement(LimitsAdminChange(child: "c"))
        try expectAgreement(
            LimitsAdminChange(
                child: "c",
                limitsEnabled: false,
                contactSyncSetUp: true,
                eligible: false,
                addKnown: [],
                removeKnown: Samples.handles
            )
        )
        try expectAgreement(
            AnyPermissionQuestion(id: id, topic: .communication(.init(personInformation: [], actions: [])), choices: [])
        )
        try expectAgreement(
            CommunicationTopic.PersonInformation(
                handle: Samples.handles[0],
                nameComponents: PersonName(),
                avatarImage: Data()
            )
        )
        for mask in 0..<(1 << CommunicationTopic.Action.allCases.count) {
            let actions = Set(
                CommunicationTopic.Action.allCases.enumerated().filter { mask >> $0.offset & 1 == 1 }.map(\.element)
            )
            try expectAgreement(CommunicationTopic(personInformation: [], actions: actions))
        }
        for error: AskError in [
            .communicationLimitsNotEnabled, .contactSyncNotSetup, Samples.invalidQuestionError, .notAvailable,
            .systemError(""), .unknown,
        ] {
            try expectAgreement(error)
            try expectAgreement(AskResult(questionID: id, outcome: .refused(error)))
        }
        try expectAgreement(AskResult(questionID: id, outcome: .presented))
        for reason in QuestionClosed.Reason.allCases {
            try expectAgreement(QuestionClosed(questionID: id, reason: reason))
            try expectAgreement(QuestionClosed(questionID: id, reason: reason, answeredBy: "g/1"))
        }
        for kind in MessageKind.allCases { try expectAgreement(Samples.message(kind)) }
        try expectAgreement(Samples.appUpdateQuestion)
    }

    @Test("dates at the limits of the wire, and past them the fast encoder leaves the verdict to Foundation")
    func dateLimits() throws {
        let first = Date(wireMilliseconds: -62_167_219_200_000)
        let last = Date(wireMilliseconds: 253_402_300_799_999)
        for date in [
            first, last, Date(wireMilliseconds: 0), Date(wireMilliseconds: -1), Date(wireMilliseconds: 951_782_400_000),
        ] {
            try expectAgreement(
                GuardianQuestion(
                    question: Samples.communicationQuestion,
                    child: "c",
                    family: "f",
                    sentAt: date,
                    expiresAt: date
                )
            )
            try expectAgreement(
                AnyPermissionQuestion(
                    id: Samples.questionID,
                    topic: Samples.communicationQuestion.topic,
                    expirationDate: date
                )
            )
        }
        for date in [
            first.addingTimeInterval(-0.001), last.addingTimeInterval(0.001), Date(timeIntervalSince1970: 1e15),
            Date(timeIntervalSince1970: .infinity),
        ] {
            let question = GuardianQuestion(
                question: Samples.communicationQuestion,
                child: "c",
                family: "f",
                sentAt: date
            )
            #expect(WireJSON.fastEncode(question) == nil)
            #expect(throws: EncodingError.self) { try WireJSON.foundationEncode(question) }
            #expect(throws: EncodingError.self) { try WireJSON.encode(question) }
        }
    }

    // MARK: - Input other than canonical bytes

    @Test("valid variations the fast decoder takes: whitespace, reordered keys, escapes, nulls for optionals")
    func acceptedVariations() throws {
        let id = "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"
        let texts: [(any AppMessage.Type, String)] = [
            (SendQuestion.self, " \r\n\t{ \"questionID\" : \"\(id)\" } \n"),
            (SendQuestion.self, "{\"questionID\":\"\(id.lowercased())\"}"),
            (
                GuardianAnswer.self,
                "{\"questionID\":\"\(id)\",\"choiceID\":\"a\\/b\\u00e9\\ud83d\\ude00\\\"\\\\\\b\\f\\n\\r\\t\\u0000\"}"
            ),
            (QuestionClosed.self, "{\"reason\":\"expired\",\"answeredBy\":null,\"questionID\":\"\(id)\"}"),
            (Echo.self, "{\"payload\":\"caf\u{E9} \\u65e5\\u672C\"}"),
            (
                GuardianQuestion.self,
                "{\"sentAt\":\"2026-11-29T14:15:06.1239+01:00\",\"expiresAt\":null,\"family\":\"f\",\"child\":\"c\",\"question\":"
                    + "{\"topicID\":\"significantAppUpdate\",\"topic\":{\"description\":\"d\"},\"id\":\"\(id)\",\"choices\":[],"
                    + "\"defaultChoice\":{\"title\":\"t\",\"id\":\"i\",\"answer\":\"denial\"},\"expirationDate\":null}}"
            ),
            (
                AskRequest.self,
                "{\"question\":{\"choices\":[ ],\"defaultChoice\":{\"answer\":\"approval\",\"id\":\"i\",\"title\":\"t\"},"
                    + "\"id\":\"\(id)\",\"topic\":{\"actions\":[\"chat\",\"chat\",\"message\"],\"personInformation\":[{\"handle\":"
                    + "{\"kind\":\"custom\",\"value\":\"x\"},\"nameComponents\":{\"givenName\":null,\"nickname\":\"n\"},"
                    + "\"avatarImage\":\"AAEC\"}]},\"topicID\":\"communication\"}}"
            ),
            (LimitsAdminChange.self, "{\"child\":\"c\",\"eligible\":true,\"limitsEnabled\":null,\"addKnown\":null}"),
        ]
        for (type, text) in texts {
            #expect(try fastAcceptsAndAgrees(type, Array(text.utf8)), "\(text)")
        }
    }

    @Test("input the fast decoder declines, leaving the verdict (value or error) to Foundation")
    func declinedInput() throws {
        let id = "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"
        let texts: [(any AppMessage.Type, String)] = [
            (SendQuestion.self, ""),
            (SendQuestion.self, "{\"questionID\":\"\(id)\"} x"),
            (SendQuestion.self, "{\"questionID\":\"\(id)\"}{}"),
            (SendQuestion.self, "\u{FEFF}{\"questionID\":\"\(id)\"}"),
            (SendQuestion.self, "{\"questionID\":\"\(id)\",\"questionID\":\"\(id)\"}"),
            (SendQuestion.self, "{\"questionID\":\"\(id)\",\"extra\":01}"),
            (SendQuestion.self, "{\"questionID\":\"\(id)\",\"extra\":null}"),
            (SendQuestion.self, "{\"question\\u0049D\":\"\(id)\"}"),
            (SendQuestion.self, "{\"questionID\":\"{\(id)}\"}"),
            (SendQuestion.self, "{\"questionID\":null}"),
            (SendQuestion.self, "{\"questionID\":\"\(id)\",}"),
            (SendQuestion.self, "[\"\(id)\"]"),
            (Echo.self, "{\"payload\":\"\\ud800\"}"),
            (Echo.self, "{\"payload\":\"\\udc00\\ud800\"}"),
            (Echo.self, "{\"payload\":\"\\ud800\\u0041\"}"),
            (Echo.self, "{\"payload\":\"\\x\"}"),
            (Echo.self, "{\"payload\":\"\\u12\"}"),
            (Echo.self, "{\"payload\":\"a\tb\"}"),
            (Echo.self, "{\"payload\":12}"),
            (Echo.self, "{\"payload\":\"a\"}\u{0}"),
            (QuestionClosed.self, "{\"questionID\":\"\(id)\",\"reason\":\"vanished\"}"),
            (
                AskResult.self,
                "{\"questionID\":\"\(id)\",\"outcome\":{\"case\":\"presented\",\"error\":{\"case\":\"unknown\"}}}"
            ),
            (
                AskResult.self,
                "{\"questionID\":\"\(id)\",\"outcome\":{\"case\":\"refused\",\"error\":{\"case\":\"newCase\"}}}"
            ),
            (
                AskResult.self,
                "{\"questionID\":\"\(id)\",\"outcome\":{\"case\":\"refused\",\"error\":{\"case\":\"notAvailable\",\"message\":\"m\"}}}"
            ),
            (
                GuardianQuestion.self,
                "{\"child\":\"c\",\"family\":\"f\",\"sentAt\":\"2026-11-29T13:15:06\\u002e123Z\",\"question\":"
                    + "{\"topicID\":\"significantAppUpdate\",\"topic\":{\"description\":\"d\"},\"id\":\"\(id)\",\"choices\":[],"
                    + "\"defaultChoice\":{\"title\":\"t\",\"id\":\"i\",\"answer\":\"denial\"}}}"
            ),
            (
                AskRequest.self,
                "{\"question\":{\"topicID\":\"communication\",\"topic\":{\"description\":\"d\"},\"id\":\"\(id)\",\"choices\":[],"
                    + "\"defaultChoice\":{\"title\":\"t\",\"id\":\"i\",\"answer\":\"denial\"}}}"
            ),
            (LimitsAdminChange.self, "{\"child\":\"c\",\"eligible\":1}"),
        ]
        for (type, text) in texts {
            #expect(try !fastAcceptsAndAgrees(type, Array(text.utf8)), "\(text)")
        }
        // Invalid UTF-8 inside a string (a broken pair, a truncated 4-byte sequence, an encoded surrogate, an overlong
        // slash, a lone continuation byte) and outside one.
        for invalid: [UInt8] in [[0xC3, 0x28], [0xF0, 0x90, 0x80, 0x41], [0xED, 0xA0, 0x80], [0xC0, 0xAF], [0x80]] {
            #expect(try !fastAcceptsAndAgrees(Echo.self, Array("{\"payload\":\"".utf8) + invalid + Array("\"}".utf8)))
            #expect(
                try !fastAcceptsAndAgrees(
                    QuestionClosed.self,
                    Array("{\"questionID\":\"\(id)\",\"reason\":\"".utf8) + invalid + Array("\"}".utf8)
                )
            )
        }
        #expect(try !fastAcceptsAndAgrees(Echo.self, Array("{\"payload\":\"a\"}".utf8) + [0xFF]))
    }

    @Test(
        "mutated and truncated bodies: the fast decoder declines or agrees with Foundation, errors stay Foundation's",
        arguments: [201, 202] as [UInt64]
    )
    func mutatedInput(seed: UInt64) throws {
        var random = RandomValues(seed: seed)
        var accepted = 0
        var declined = 0
        for round in 0..<200 {
            let message = random.message(MessageKind.allCases[round % MessageKind.allCases.count])
            let bodyType: any AppMessage.Type = type(of: message)
            let bytes = try WireJSON.foundationEncode(message)
            for mutant in mutants(of: bytes, &random) {
                if try fastAcceptsAndAgrees(bodyType, mutant) { accepted += 1 } else { declined += 1 }
            }
        }
        // Whitespace between tokens and escaped letters in values are valid and understood; truncations never are.
        #expect(accepted >= 200)
        #expect(declined >= 200)
    }

    @Test("a question decoded by the fast path validates exactly like one decoded by Foundation")
    func validationAfterFastDecoding() throws {
        var random = RandomValues(seed: 301)
        let now = WireDate.parse("2026-11-29T13:15:06.123Z")!
        var invalid = 0
        for _ in 0..<500 {
            let bytes = try WireJSON.foundationEncode(AskRequest(question: random.question()))
            let fast = try #require(WireJSON.fastDecode(AskRequest.self, from: bytes))
            let reference = try WireJSON.foundationDecode(AskRequest.self, from: bytes)
            #expect(fast.question.firstViolation(now: now) == reference.question.firstViolation(now: now))
            if fast.question.firstViolation(now: now) != nil { invalid += 1 }
        }
        #expect(invalid > 0)
    }

    // MARK: - Helpers

    /// `value` encodes to Foundation's bytes through the fast path, and those bytes decode to Foundation's value.
    func expectAgreement<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let reference = try WireJSON.foundationEncode(value)
        let fast = try #require(
            WireJSON.fastEncode(value),
            "no fast encoding of \(T.self)",
            sourceLocation: sourceLocation
        )
        guard fast == reference else {
            Issue.record(
                "fast \(String(decoding: fast, as: UTF8.self)) != Foundation \(String(decoding: reference, as: UTF8.self))",
                sourceLocation: sourceLocation
            )
            return
        }
        let decoded = try #require(
            WireJSON.fastDecode(T.self, from: reference),
            "fast path declined its own bytes",
            sourceLocation: sourceLocation
        )
        #expect(decoded == (try WireJSON.foundationDecode(T.self, from: reference)), sourceLocation: sourceLocation)
    }

    /// Whether the fast decoder takes `bytes`; when it does, Foundation must decode the same value. Either way the
    /// public decoders must give what Foundation alone gives: the value, or the same error.
    func fastAcceptsAndAgrees<T: AppMessage>(
        _ type: T.Type,
        _ bytes: [UInt8],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        let reference = Result { try WireJSON.foundationDecode(T.self, from: bytes) }
        let fast = WireJSON.fastDecode(T.self, from: bytes)
        if let fast {
            #expect(fast == (try? reference.get()), "fast decoded \(text) differently", sourceLocation: sourceLocation)
        }
        #expect(
            sameVerdict(Result { try WireJSON.decode(T.self, from: bytes) }, reference),
            "decode verdict on \(text)",
            sourceLocation: sourceLocation
        )
        let registryReference: Result<T, BodyDecodingError> =
            String(validating: bytes, as: UTF8.self) == nil
            ? .failure(.invalidUTF8) : reference.mapError { .invalidJSON(describeDecoding($0)) }
        #expect(
            sameVerdict(
                Result { () throws(BodyDecodingError) in try AppMessageRegistry.decode(T.self, from: bytes) },
                registryReference
            ),
            "registry verdict on \(text)",
            sourceLocation: sourceLocation
        )
        return fast != nil
    }

    /// Equal values, or errors with the same description (Foundation's messages name the path and the problem).
    func sameVerdict<T: Equatable, E: Error, F: Error>(_ a: Result<T, E>, _ b: Result<T, F>) -> Bool {
        switch (a, b) {
        case (.success(let x), .success(let y)): x == y
        case (.failure(let x), .failure(let y)): String(describing: x) == String(describing: y)
        default: false
        }
    }

    /// Variations of a body: always two whitespace insertions (valid), then truncations, deletions, replacements and
    /// insertions of bytes that matter to JSON (mostly invalid), and a `\u` escape of one string byte (valid).
    func mutants(of bytes: [UInt8], _ random: inout RandomValues) -> [[UInt8]] {
        let interesting: [UInt8] = Array("\"\\{}[],: \tn0u/-".utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xED, 0xFF]
        var out: [[UInt8]] = []
        let structural = bytes.indices.filter { "{}[],:".utf8.contains(bytes[$0]) }
        for _ in 0..<2 {
            var m = bytes
            m.insert(
                contentsOf: [[0x20], [0x0A], [0x09, 0x0D], [0x20, 0x20]][random.int(0...3)],
                at: structural[random.int(0...structural.count - 1)] + 1
            )
            out.append(m)
        }
        out.append(Array(bytes.prefix(random.int(0...bytes.count - 1))))
        var m = bytes
        m.remove(at: random.int(0...bytes.count - 1))
        out.append(m)
        m = bytes
        m[random.int(0...bytes.count - 1)] = interesting[random.int(0...interesting.count - 1)]
        out.append(m)
        m = bytes
        m.insert(interesting[random.int(0...interesting.count - 1)], at: random.int(0...bytes.count))
        out.append(m)
        // Escape one plain ASCII letter inside a string value or key as \u00XX.
        var inString = false
        var letters: [Int] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\\") { index += 2; continue }
            if byte == UInt8(ascii: "\"") {
                inString.toggle()
            } else if inString, (0x61...0x7A).contains(byte) {
                letters.append(index)
            }
            index += 1
        }
        if let at = letters.randomElement(using: &random.rng) {
            m = bytes
            m.replaceSubrange(at...at, with: Array(String(format: "\\u%04X", Int(bytes[at])).utf8))
            out.append(m)
        }
        return out
    }
}
