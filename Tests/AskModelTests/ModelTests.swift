import AskModel
import Foundation
import Testing

@Suite("Model")
struct ModelTests {
    @Test("convenience initialisers give approve/decline with decline as default")
    func defaults() {
        let h = CommunicationHandle(value: "+15550100", kind: .phoneNumber)
        let q = PermissionQuestion(handle: h)
        #expect(q.choices == [.approve, .decline])
        #expect(q.defaultChoice == .decline)
        #expect(q.topic.actions == [.message])
        #expect(q.topic.handles == [h])
        #expect(q.expirationDate == nil)
        let many = PermissionQuestion(handles: [h, .init(value: "a@b.co", kind: .emailAddress)])
        #expect(many.topic.personInformation.count == 2)
        #expect(PermissionQuestion(significantAppUpdateTopic: .init(description: "x")).defaultChoice == .decline)
        #expect(PermissionChoice.approve.id == "askrelay.approve")
        #expect(PermissionChoice.decline.id == "askrelay.decline")
        #expect(CommunicationTopic.topicID == "communication")
        #expect(SignificantAppUpdateTopic.topicID == "significantAppUpdate")
    }

    @Test("a question is built with its contacts, actions and expiry at once; the expiry is kept to the millisecond")
    func builtWhole() throws {
        let mum = CommunicationHandle(value: "+15550100", kind: .phoneNumber)
        let gran = CommunicationHandle(value: "gran@example.org", kind: .emailAddress)
        let expiry = Date(timeIntervalSince1970: 1_800_000_000.123_456)
        let q = PermissionQuestion(handles: [mum, gran], actions: [.message, .audioCall], expirationDate: expiry)
        #expect(q.topic.handles == [mum, gran])
        #expect(q.topic.actions == [.message, .audioCall])
        let milliseconds = try #require(q.expirationDate).timeIntervalSince1970 * 1000
        #expect(milliseconds.rounded() == 1_800_000_000_123 && abs(milliseconds - milliseconds.rounded()) < 0.001)
        #expect(q.choices == [.approve, .decline] && q.defaultChoice == .decline)
        // The same as setting the property afterwards.
        var set = PermissionQuestion(handles: [mum, gran], actions: [.message, .audioCall])
        set.id = q.id
        set.expirationDate = expiry
        #expect(set == q)
        #expect(PermissionQuestion(handle: mum, expirationDate: expiry).expirationDate == q.expirationDate)
        let update = PermissionQuestion(significantAppUpdateTopic: .init(description: "v2"), expirationDate: expiry)
        #expect(update.expirationDate == q.expirationDate)
        let topic = PermissionQuestion(communicationTopic: q.topic, expirationDate: expiry)
        #expect(topic.topic == q.topic && topic.expirationDate == q.expirationDate)
        try q.validate(now: expiry.addingTimeInterval(-1))
    }

    @Test("the default choice is the most restrictive one")
    func mostRestrictive() {
        let yes = PermissionChoice(id: "y", title: "Y", answer: .approval)
        let no1 = PermissionChoice(id: "n1", title: "N1", answer: .denial)
        let no2 = PermissionChoice(id: "n2", title: "N2", answer: .denial)
        #expect(
            AnyPermissionQuestion(topic: .significantAppUpdate(.init(description: "d")), choices: [yes, no1, no2])
                .defaultChoice == no1
        )
        #expect(
            AnyPermissionQuestion(topic: .significantAppUpdate(.init(description: "d")), choices: [yes]).defaultChoice
                == yes
        )
        #expect(PermissionChoice.mostRestrictive(of: []) == .decline)
    }

    @Test("expiry is inclusive and compared at millisecond precision")
    func expiry() {
        var q = Samples.appUpdateQuestion
        let t = Date(wireMilliseconds: 1_000_000)
        q.expirationDate = t
        #expect(!q.isExpired(at: t.addingTimeInterval(-0.001)))
        #expect(q.isExpired(at: t))
        #expect(q.isExpired(at: t.addingTimeInterval(0.0009)))
        q.expirationDate = nil
        #expect(!q.isExpired(at: .distantFuture))
        #expect(Samples.communicationQuestion.choice(withID: "askrelay.approve") == .approve)
        #expect(Samples.communicationQuestion.choice(withID: "nope") == nil)
    }

    @Test("AskError JSON forms and descriptions")
    func askErrorForms() throws {
        #expect(try WireJSON.encodeString(AskError.notAvailable) == #"{"case":"notAvailable"}"#)
        #expect(try WireJSON.encodeString(AskError.systemError("boom")) == #"{"case":"systemError","message":"boom"}"#)
        #expect(
            try WireJSON.encodeString(Samples.invalidQuestionError)
                == #"{"case":"invalidQuestion","reason":{"code":"not-email","field":"topic.personInformation[1].handle.value","message":"not an e-mail address"}}"#
        )
        #expect(try WireJSON.decode(AskError.self, from: Array(#"{"case":"fromTheFuture"}"#.utf8)) == .unknown)
        let all: [AskError] = [
            .communicationLimitsNotEnabled, .contactSyncNotSetup, Samples.invalidQuestionError,
            .notAvailable, .systemError("disk full"), .unknown,
        ]
        #expect(Set(all.map(\.description)).count == all.count)
        #expect(AskError.systemError("disk full").description.contains("disk full"))
        #expect(Samples.invalidQuestionError.description.contains("topic.personInformation[1].handle.value"))
    }

    @Test("handles normalize and sort")
    func handles() {
        #expect(CommunicationHandle(value: "+1 (555) 010-0100", kind: .phoneNumber).normalized.value == "+15550100100")
        #expect(
            CommunicationHandle(value: "Sam@Example.ORG", kind: .emailAddress).normalized.value == "sam@example.org"
        )
        #expect(CommunicationHandle(value: "Sam", kind: .custom).normalized.value == "Sam")
        let sorted = [
            CommunicationHandle(value: "b", kind: .custom), .init(value: "z@z.z", kind: .emailAddress),
            .init(value: "a", kind: .custom), .init(value: "+2", kind: .phoneNumber),
        ].sorted()
        #expect(sorted.map(\.value) == ["+2", "z@z.z", "a", "b"])
    }
}

@Suite("Address and Principal")
struct AddressTests {
    @Test(
        "valid addresses parse",
        arguments: [
            "child/c42", "guardian/G-1.x_y", "observer/t", "limits", "broker",
            "child/" + String(repeating: "a", count: 64),
        ]
    )
    func valid(text: String) throws {
        let a = try Address(parsing: text)
        #expect(a.rawValue == text)
        #expect(Address(rawValue: text) == a)
        try expectRoundTrip(a)
    }

    @Test(
        "invalid addresses are refused with a reason",
        arguments: [
            ("", Address.ParseError.unknownRole("")),
            ("parent/p1", .unknownRole("parent")),
            ("child", .missingID(.child)),
            ("child/", .invalidID("")),
            ("child/a b", .invalidID("a b")),
            ("child/a/b", .invalidID("a/b")),
            ("guardian/é", .invalidID("é")),
            ("child/" + String(repeating: "a", count: 65), .invalidID(String(repeating: "a", count: 65))),
            ("limits/1", .unexpectedID(.limits)),
            ("broker/x", .unexpectedID(.broker)),
        ]
    )
    func invalid(text: String, error: Address.ParseError) {
        #expect(throws: error) { try Address(parsing: text) }
        #expect(Address(rawValue: text) == nil)
        #expect(throws: DecodingError.self) { try WireJSON.decode(Address.self, from: Array("\"\(text)\"".utf8)) }
    }

    @Test("helpers and principals")
    func helpers() throws {
        #expect(try Address.child("c1").rawValue == "child/c1")
        #expect(try Address.guardian("g1").id == "g1")
        #expect(Address.limits.rawValue == "limits")
        #expect(Address.broker.role == .broker)
        #expect(Principal(role: .child, id: "c1", family: "f").address == (try Address.child("c1")))
        #expect(Principal(role: .limits, id: "limits").address == .limits)
        #expect(Principal(role: .guardian, id: "bad id").address == nil)
        #expect(
            try WireJSON.encodeString(Principal(role: .guardian, id: "g2", family: "f7"))
                == #"{"family":"f7","id":"g2","role":"guardian"}"#
        )
    }
}

@Suite("LimitsState")
struct LimitsStateTests {
    @Test("admission order and known handles")
    func admission() {
        var s = LimitsState()
        #expect(s.admissionError == nil)
        s.contactSyncSetUp = false
        #expect(s.admissionError == .contactSyncNotSetup)
        s.limitsEnabled = false
        #expect(s.admissionError == .communicationLimitsNotEnabled)
        s.eligible = false
        #expect(s.admissionError == .notAvailable)

        let spaced = CommunicationHandle(value: "+41 79 555 01 23", kind: .phoneNumber)
        let compact = CommunicationHandle(value: "+41795550123", kind: .phoneNumber)
        let other = CommunicationHandle(value: "x@y.z", kind: .emailAddress)
        s.learn([spaced])
        #expect(s.isKnownHandle(compact))
        #expect(s.knownHandles(in: [other, compact, compact]) == [compact])
        s.apply(
            LimitsAdminChange(
                child: "c",
                limitsEnabled: true,
                eligible: true,
                addKnown: [other],
                removeKnown: [compact]
            )
        )
        #expect(s.limitsEnabled && s.eligible && !s.contactSyncSetUp)
        #expect(s.knownHandles == [other])
    }
}
