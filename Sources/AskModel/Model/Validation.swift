import Foundation

/// Size limits enforced by question validation. Text lengths count Unicode scalars, which every language
/// counts the same way.
public enum QuestionLimits {
    /// Longest handle value (any kind).
    public static let handleValue = 256
    /// Longest part of a person's name.
    public static let namePart = 128
    /// Longest app-update description.
    public static let description = 4096
    /// Longest choice title.
    public static let choiceTitle = 256
    /// Longest choice id.
    public static let choiceID = 256
    /// Largest avatar image, in bytes (64 KiB).
    public static let avatarBytes = CommunicationTopic.PersonInformation.maximumAvatarBytes
}

extension CommunicationHandle {
    /// Whether the value is an acceptable phone number: after removing spaces, dashes and parentheses it is
    /// `+` followed by 7...15 ASCII digits (E.164 allows at most 15).
    public static func isPhoneNumber(_ value: String) -> Bool {
        let stripped = value.unicodeScalars.filter { !" -()".unicodeScalars.contains($0) }
        guard stripped.first == "+" else { return false }
        let digits = stripped.dropFirst()
        return (7...15).contains(digits.count) && digits.allSatisfy { ("0"..."9").contains($0) }
    }

    /// Whether the value looks like an e-mail address: exactly one `@`, a non-empty local part, a domain of
    /// at least two non-empty dot-separated labels, and no whitespace anywhere.
    public static func isEmailAddress(_ value: String) -> Bool {
        guard !value.unicodeScalars.contains(where: { CharacterSet.whitespacesAndNewlines.contains($0) }) else {
            return false
        }
        let parts = value.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return false }
        let labels = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { !$0.isEmpty }
    }
}

extension String {
    /// Whether every scalar is in `CharacterSet.whitespacesAndNewlines` (what trimming it would leave empty), with
    /// ASCII answered without Foundation: the broker validates every question it is asked, and trimming through
    /// `NSString` was 3% of its loop.
    var isBlank: Bool {
        for scalar in unicodeScalars {
            if scalar.isASCII {
                switch scalar.value {
                case 0x09...0x0D, 0x20: continue
                default: return false
                }
            }
            if !CharacterSet.whitespacesAndNewlines.contains(scalar) { return false }
        }
        return true
    }
    var scalarCount: Int { unicodeScalars.count }
}

extension AnyPermissionQuestion {
    /// Checks the question against the protocol rules and reports the first violation.
    ///
    /// Checks run in this order: the topic (people in order, each handle, name and avatar, then duplicates;
    /// then actions; or the description), the choices in order, the default choice, the expiry. See
    /// docs/protocol-messages.md for the table of fields and codes.
    ///
    /// - Parameter now: the instant the expiry must be after (compared at millisecond precision).
    /// - Throws: ``AskError/invalidQuestion(_:)`` with the offending field and code.
    public func validate(now: Date = Date()) throws(AskError) {
        if let reason = firstViolation(now: now) {
            throw .invalidQuestion(reason)
        }
    }

    /// The first rule the question breaks, or `nil` if it is valid.
    public func firstViolation(now: Date = Date()) -> InvalidQuestionReason? {
        switch topic {
        case .communication(let t):
            if let r = Self.violation(in: t) { return r }
        case .significantAppUpdate(let t):
            if t.description.isBlank {
                return .init(field: "topic.description", code: .empty, message: "the update description is empty")
            }
            if t.description.scalarCount > QuestionLimits.description {
                return .init(
                    field: "topic.description",
                    code: .tooLong,
                    message: "the update description is longer than \(QuestionLimits.description) characters"
                )
            }
        }
        if choices.isEmpty {
            return .init(field: "choices", code: .missing, message: "the question offers no choices")
        }
        var seenChoiceIDs = Set<String>()
        for (i, choice) in choices.enumerated() {
            let f = "choices[\(i)]"
            if choice.id.isBlank {
                return .init(field: f + ".id", code: .empty, message: "a choice id is empty")
            }
            if choice.id.scalarCount > QuestionLimits.choiceID {
                return .init(
                    field: f + ".id",
                    code: .tooLong,
                    message: "a choice id is longer than \(QuestionLimits.choiceID) characters"
                )
            }
            if choice.title.isBlank {
                return .init(field: f + ".title", code: .empty, message: "a choice title is empty")
            }
            if choice.title.scalarCount > QuestionLimits.choiceTitle {
                return .init(
                    field: f + ".title",
                    code: .tooLong,
                    message: "a choice title is longer than \(QuestionLimits.choiceTitle) characters"
                )
            }
            if !seenChoiceIDs.insert(choice.id).inserted {
                return .init(field: f + ".id", code: .duplicate, message: "choice id \(choice.id) appears twice")
            }
        }
        if !choices.contains(defaultChoice) {
            return .init(
                field: "defaultChoice",
                code: .notAmongChoices,
                message: "the default choice \(defaultChoice.id) is not one of the choices"
            )
        }
        if let expirationDate, expirationDate <= now.truncatedToWireMilliseconds {
            return .init(
                field: "expirationDate",
                code: .inPast,
                message: "the question expires at or before the current time"
            )
        }
        return nil
    }

    private static func violation(in topic: CommunicationTopic) -> InvalidQuestionReason? {
        if topic.personInformation.isEmpty {
            return .init(field: "topic.personInformation", code: .missing, message: "the question names no people")
        }
        var seen = Set<CommunicationHandle>()
        for (i, person) in topic.personInformation.enumerated() {
            let f = "topic.personInformation[\(i)]"
            let value = person.handle.value
            if value.isBlank {
                return .init(field: f + ".handle.value", code: .empty, message: "a handle value is empty")
            }
            if value.scalarCount > QuestionLimits.handleValue {
                return .init(
                    field: f + ".handle.value",
                    code: .tooLong,
                    message: "a handle value is longer than \(QuestionLimits.handleValue) characters"
                )
            }
            switch person.handle.kind {
            case .phoneNumber where !CommunicationHandle.isPhoneNumber(value):
                return .init(
                    field: f + ".handle.value",
                    code: .notE164,
                    message: "a phone number must be + followed by 7 to 15 digits"
                )
            case .emailAddress where !CommunicationHandle.isEmailAddress(value):
                return .init(field: f + ".handle.value", code: .notEmail, message: "not an e-mail address")
            default:
                break
            }
            if let name = person.nameComponents {
                for part in name.parts {
                    if let text = part.value, text.scalarCount > QuestionLimits.namePart {
                        return .init(
                            field: f + ".nameComponents." + part.field,
                            code: .tooLong,
                            message: "a name part is longer than \(QuestionLimits.namePart) characters"
                        )
                    }
                }
            }
            if let avatar = person.avatarImage, avatar.count > QuestionLimits.avatarBytes {
                return .init(
                    field: f + ".avatarImage",
                    code: .tooLarge,
                    message: "the avatar image is larger than \(QuestionLimits.avatarBytes) bytes"
                )
            }
            if !seen.insert(person.handle.normalized).inserted {
                return .init(
                    field: f + ".handle",
                    code: .duplicate,
                    message: "handle \(person.handle) appears twice"
                )
            }
        }
        if topic.actions.isEmpty {
            return .init(field: "topic.actions", code: .missing, message: "the question asks for no actions")
        }
        return nil
    }
}
