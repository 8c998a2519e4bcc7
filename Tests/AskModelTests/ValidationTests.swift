import AskModel
import Foundation
import Testing

/// A fixed "now" so expiry rows are deterministic.
private let now = WireDate.parse("2026-11-29T13:15:06.123Z")!

private func phone(_ v: String) -> CommunicationHandle { .init(value: v, kind: .phoneNumber) }
private func email(_ v: String) -> CommunicationHandle { .init(value: v, kind: .emailAddress) }
private func custom(_ v: String) -> CommunicationHandle { .init(value: v, kind: .custom) }

private func people(_ handles: CommunicationHandle...) -> AnyPermissionQuestion {
    AnyPermissionQuestion(PermissionQuestion<CommunicationTopic>(handles: handles))
}

private func person(_ info: CommunicationTopic.PersonInformation) -> AnyPermissionQuestion {
    AnyPermissionQuestion(PermissionQuestion(communicationTopic: .init(personInformation: [info])))
}

private func update(_ description: String) -> AnyPermissionQuestion {
    AnyPermissionQuestion(PermissionQuestion(significantAppUpdateTopic: .init(description: description)))
}

private func choices(_ choices: [PermissionChoice], default d: PermissionChoice? = nil) -> AnyPermissionQuestion {
    AnyPermissionQuestion(
        topic: .communication(.init(personInformation: [.init(handle: phone("+15550100"))])),
        choices: choices,
        defaultChoice: d
    )
}

private func expiring(_ date: Date?) -> AnyPermissionQuestion {
    var q = people(phone("+15550100"))
    q.expirationDate = date
    return q
}

private func long(_ n: Int) -> String { String(repeating: "x", count: n) }

struct InvalidRow: Sendable, CustomStringConvertible {
    let name: String
    let question: AnyPermissionQuestion
    let field: String
    let code: InvalidQuestionReason.Code
    var description: String { name }
}

private let p0 = "topic.personInformation[0]"
private let other = PermissionChoice(id: "com.example.other", title: "Other", answer: .denial)

let invalidRows: [InvalidRow] = [
    .init(name: "no people", question: people(), field: "topic.personInformation", code: .missing),
    .init(name: "empty handle", question: people(phone("")), field: p0 + ".handle.value", code: .empty),
    .init(name: "whitespace handle", question: people(custom(" \t\n")), field: p0 + ".handle.value", code: .empty),
    .init(name: "phone without +", question: people(phone("41795550123")), field: p0 + ".handle.value", code: .notE164),
    .init(name: "phone 6 digits", question: people(phone("+123456")), field: p0 + ".handle.value", code: .notE164),
    .init(
        name: "phone 16 digits",
        question: people(phone("+1234567890123456")),
        field: p0 + ".handle.value",
        code: .notE164
    ),
    .init(name: "phone letters", question: people(phone("+1 555 01OO")), field: p0 + ".handle.value", code: .notE164),
    .init(name: "phone dots", question: people(phone("+1.555.010.0100")), field: p0 + ".handle.value", code: .notE164),
    .init(name: "phone two pluses", question: people(phone("++15550100")), field: p0 + ".handle.value", code: .notE164),
    .init(
        name: "phone arabic-indic digits",
        question: people(phone("+١٢٣٤٥٦٧٨")),
        field: p0 + ".handle.value",
        code: .notE164
    ),
    .init(name: "email no @", question: people(email("sam.example.org")), field: p0 + ".handle.value", code: .notEmail),
    .init(
        name: "email two @",
        question: people(email("sam@@example.org")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(
        name: "email empty local",
        question: people(email("@example.org")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(
        name: "email domain without dot",
        question: people(email("sam@localhost")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(
        name: "email with space",
        question: people(email("sam taylor@example.org")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(
        name: "email trailing dot",
        question: people(email("sam@example.")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(
        name: "email leading dot domain",
        question: people(email("sam@.example.org")),
        field: p0 + ".handle.value",
        code: .notEmail
    ),
    .init(name: "custom 257", question: people(custom(long(257))), field: p0 + ".handle.value", code: .tooLong),
    .init(
        name: "phone 257 checked for length first",
        question: people(phone("+" + long(256))),
        field: p0 + ".handle.value",
        code: .tooLong
    ),
    .init(
        name: "second handle empty",
        question: people(phone("+15550100"), email("")),
        field: "topic.personInformation[1].handle.value",
        code: .empty
    ),
    .init(
        name: "second handle not email",
        question: people(phone("+15550100"), email("nobody")),
        field: "topic.personInformation[1].handle.value",
        code: .notEmail
    ),
    .init(
        name: "duplicate handle",
        question: people(custom("sam"), custom("sam")),
        field: "topic.personInformation[1].handle",
        code: .duplicate
    ),
    .init(
        name: "duplicate phone, other formatting",
        question: people(email("a@b.co"), phone("+41 79 555 01 23"), phone("+41795550123")),
        field: "topic.personInformation[2].handle",
        code: .duplicate
    ),
    .init(
        name: "duplicate email, other case",
        question: people(email("Sam@Example.org"), email("sam@example.org")),
        field: "topic.personInformation[1].handle",
        code: .duplicate
    ),
    .init(
        name: "no actions",
        question: AnyPermissionQuestion(
            PermissionQuestion(
                communicationTopic:
                    .init(personInformation: [.init(handle: phone("+15550100"))], actions: [])
            )
        ),
        field: "topic.actions",
        code: .missing
    ),
    .init(
        name: "given name 129",
        question: person(.init(handle: phone("+15550100"), nameComponents: .init(givenName: long(129)))),
        field: p0 + ".nameComponents.givenName",
        code: .tooLong
    ),
    .init(
        name: "nickname 129",
        question: person(.init(handle: phone("+15550100"), nameComponents: .init(nickname: long(129)))),
        field: p0 + ".nameComponents.nickname",
        code: .tooLong
    ),
    .init(
        name: "avatar 64 KiB + 1",
        question: person(.init(handle: phone("+15550100"), avatarImage: Data(count: 65_537))),
        field: p0 + ".avatarImage",
        code: .tooLarge
    ),
    .init(name: "empty description", question: update(""), field: "topic.description", code: .empty),
    .init(name: "whitespace description", question: update(" \n\t "), field: "topic.description", code: .empty),
    .init(name: "description 4097", question: update(long(4097)), field: "topic.description", code: .tooLong),
    .init(name: "no choices", question: choices([]), field: "choices", code: .missing),
    .init(
        name: "empty choice id",
        question: choices([.approve, .init(id: "", title: "No", answer: .denial)]),
        field: "choices[1].id",
        code: .empty
    ),
    .init(
        name: "choice id 257",
        question: choices([.init(id: long(257), title: "No", answer: .denial)]),
        field: "choices[0].id",
        code: .tooLong
    ),
    .init(
        name: "empty choice title",
        question: choices([.init(id: "x.no", title: "  ", answer: .denial)]),
        field: "choices[0].title",
        code: .empty
    ),
    .init(
        name: "choice title 257",
        question: choices([.approve, .init(id: "x.no", title: long(257), answer: .denial)]),
        field: "choices[1].title",
        code: .tooLong
    ),
    .init(
        name: "duplicate choice id",
        question: choices([.decline, .approve, .init(id: "askrelay.approve", title: "Yes!", answer: .approval)]),
        field: "choices[2].id",
        code: .duplicate
    ),
    .init(
        name: "default not among choices",
        question: choices([.approve, .decline], default: other),
        field: "defaultChoice",
        code: .notAmongChoices
    ),
    .init(
        name: "default same id, other title",
        question: choices(
            [.approve, .decline],
            default: .init(id: "askrelay.decline", title: "Nope", answer: .denial)
        ),
        field: "defaultChoice",
        code: .notAmongChoices
    ),
    .init(name: "expiry equals now", question: expiring(now), field: "expirationDate", code: .inPast),
    .init(
        name: "expiry 1 ms ago",
        question: expiring(now.addingTimeInterval(-0.001)),
        field: "expirationDate",
        code: .inPast
    ),
    .init(
        name: "expiry within the current millisecond",
        question: expiring(now.addingTimeInterval(0.0004)),
        field: "expirationDate",
        code: .inPast
    ),
    .init(
        name: "expiry a year ago",
        question: expiring(now.addingTimeInterval(-365 * 86_400)),
        field: "expirationDate",
        code: .inPast
    ),
    .init(
        name: "topic checked before choices",
        question: AnyPermissionQuestion(
            topic: .communication(.init(personInformation: [])),
            choices: []
        ),
        field: "topic.personInformation",
        code: .missing
    ),
]

struct ValidRow: Sendable, CustomStringConvertible {
    let name: String
    let question: AnyPermissionQuestion
    var description: String { name }
}

let validRows: [ValidRow] = [
    .init(name: "one phone", question: people(phone("+15550100"))),
    .init(name: "phone with spaces, dashes, parentheses", question: people(phone("+1 (555) 010-0100"))),
    .init(name: "phone 7 digits", question: people(phone("+1234567"))),
    .init(name: "phone 15 digits", question: people(phone("+123456789012345"))),
    .init(name: "plain email", question: people(email("a@b.co"))),
    .init(name: "email with plus and subdomain", question: people(email("Sam.Taylor+kids@mail.example.org"))),
    .init(name: "custom with spaces and unicode", question: people(custom("Zoë the 🦊"))),
    .init(name: "custom 256", question: people(custom(long(256)))),
    .init(name: "same value, different kinds", question: people(custom("+15550100"), phone("+15550100"))),
    .init(name: "several people", question: people(phone("+15550100"), email("a@b.co"), custom("sam"))),
    .init(
        name: "names at the limit, avatar at 64 KiB",
        question: person(
            .init(
                handle: phone("+15550100"),
                nameComponents: .init(
                    namePrefix: long(128),
                    givenName: long(128),
                    middleName: long(128),
                    familyName: long(128),
                    nameSuffix: long(128),
                    nickname: long(128)
                ),
                avatarImage: Data(count: 65_536)
            )
        )
    ),
    .init(
        name: "empty name parts are allowed",
        question: person(.init(handle: phone("+15550100"), nameComponents: .init(givenName: "")))
    ),
    .init(
        name: "all actions",
        question: AnyPermissionQuestion(
            PermissionQuestion(
                communicationTopic:
                    .init(
                        personInformation: [.init(handle: phone("+15550100"))],
                        actions: Set(CommunicationTopic.Action.allCases)
                    )
            )
        )
    ),
    .init(name: "app update", question: update("New chat feature")),
    .init(name: "app update 4096", question: update(long(4096))),
    .init(
        name: "custom choices, explicit approval default",
        question: choices(
            [.init(id: "x.yes", title: "Yes", answer: .approval), .init(id: "x.no", title: "No", answer: .denial)],
            default: .init(id: "x.yes", title: "Yes", answer: .approval)
        )
    ),
    .init(name: "single approval choice", question: choices([.approve])),
    .init(name: "no expiry", question: expiring(nil)),
    .init(name: "expiry 1 ms from now", question: expiring(now.addingTimeInterval(0.001))),
    .init(name: "expiry in 48 hours", question: expiring(now.addingTimeInterval(48 * 3600))),
]

@Suite("Validation")
struct ValidationTests {
    @Test("invalid questions report the exact field and code", arguments: invalidRows)
    func invalid(row: InvalidRow) {
        #expect(throws: AskError.self) { try row.question.validate(now: now) }
        let reason = row.question.firstViolation(now: now)
        #expect(reason?.field == row.field)
        #expect(reason?.code == row.code)
        #expect(reason?.message.isEmpty == false)
        do {
            try row.question.validate(now: now)
        } catch {
            #expect(error == .invalidQuestion(reason!))
        }
    }

    @Test("valid questions pass", arguments: validRows)
    func valid(row: ValidRow) throws {
        try row.question.validate(now: now)
        #expect(row.question.firstViolation(now: now) == nil)
    }

    @Test("a blank title is exactly one Foundation would trim to nothing: every ASCII character and Unicode spaces")
    func blankMatchesTrimming() {
        var scalars = (0..<128).compactMap(Unicode.Scalar.init)
        scalars += [
            0x85, 0xA0, 0x1680, 0x180E, 0x2000, 0x200A, 0x200B, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0xE9,
        ]
        .compactMap(Unicode.Scalar.init)
        for scalar in scalars {
            for title in [String(scalar), String(scalar) + " ", " " + String(scalar) + "\t"] {
                var question = people(phone("+41795550123"))
                question.choices = [PermissionChoice(id: "c", title: title, answer: .approval), other]
                let blank = title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
                let reason = question.firstViolation(now: now)
                #expect(
                    (reason?.field == "choices[0].title") == blank,
                    "U+\(String(scalar.value, radix: 16)) in \(title.debugDescription): \(String(describing: reason))"
                )
            }
        }
    }

    @Test("table is large enough")
    func tableSize() {
        #expect(invalidRows.count >= 30)
        #expect(Set(invalidRows.map(\.name)).count == invalidRows.count)
    }

    @Test("typed questions validate like erased ones")
    func typedValidation() throws {
        var q = PermissionQuestion<SignificantAppUpdateTopic>(significantAppUpdateTopic: .init(description: "v2"))
        try q.validate(now: now)
        q.expirationDate = now
        #expect(
            throws: AskError.invalidQuestion(
                .init(
                    field: "expirationDate",
                    code: .inPast,
                    message: "the question expires at or before the current time"
                )
            )
        ) {
            try q.validate(now: now)
        }
    }
}
