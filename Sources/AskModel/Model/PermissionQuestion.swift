import Foundation

/// A kind of thing a child can ask about.
///
/// Only the topics of this module exist on the wire; ``topicID`` is their stable discriminator. Conforming
/// other types is unsupported: erasing such a question (``AnyPermissionQuestion/init(_:)``) traps.
public protocol QuestionTopic: Codable, Sendable, Hashable {
    /// Stable identifier carried in JSON as `"topicID"` (`"communication"`, `"significantAppUpdate"`).
    static var topicID: String { get }
}

/// One answer a guardian can give.
public struct PermissionChoice: Codable, Sendable, Hashable, Identifiable {
    /// Whether choosing this grants or refuses the request.
    public enum Answer: String, Codable, Sendable, Hashable, CaseIterable {
        case approval
        case denial
    }

    /// Identifier of the choice. It must be globally unique: a guardian's answer names the choice only by
    /// this id. Custom choices should use a reverse-DNS or UUID-based id.
    public var id: String
    /// Text shown to the guardian. At most 256 characters (Unicode scalars).
    public var title: String
    /// What choosing it means.
    public var answer: Answer

    /// Creates a choice.
    public init(id: String, title: String, answer: Answer) {
        self.id = id
        self.title = title
        self.answer = answer
    }

    /// The well-known approval choice, id `"askrelay.approve"`. Apps must not reuse this id for other choices.
    public static let approve = PermissionChoice(id: "askrelay.approve", title: "Approve", answer: .approval)
    /// The well-known denial choice, id `"askrelay.decline"`. Apps must not reuse this id for other choices.
    public static let decline = PermissionChoice(id: "askrelay.decline", title: "Decline", answer: .denial)

    /// The binary choices used by the convenience initialisers: approve, then decline.
    public static let defaultChoices: [PermissionChoice] = [.approve, .decline]

    /// The most restrictive of `choices`: the first denial, else the first choice, else ``decline``.
    public static func mostRestrictive(of choices: [PermissionChoice]) -> PermissionChoice {
        choices.first { $0.answer == .denial } ?? choices.first ?? .decline
    }
}

/// A question a child asks a guardian about a topic (PermissionKit's `PermissionQuestion`).
///
/// `expirationDate` is stored truncated to whole milliseconds (see ``WireDate``), so a question that went
/// through JSON compares equal to the original.
public struct PermissionQuestion<Topic: QuestionTopic>: Sendable, Hashable, Identifiable {
    /// Unique identifier of the question; the broker's ledger key.
    public var id: UUID
    /// What the child asks about.
    public var topic: Topic
    /// The answers the guardian can pick from.
    public var choices: [PermissionChoice]
    /// The answer assumed when none is given; must be one of ``choices``.
    public var defaultChoice: PermissionChoice
    /// When the question stops accepting answers, truncated to milliseconds; `nil` means no expiry of its own.
    public var expirationDate: Date? {
        didSet { expirationDate = expirationDate?.truncatedToWireMilliseconds }
    }

    /// Creates a question with every field given.
    /// - Parameters:
    ///   - id: identifier; a fresh UUID by default.
    ///   - topic: what is asked about.
    ///   - choices: the possible answers; approve/decline by default.
    ///   - defaultChoice: the assumed answer; the most restrictive choice (first denial) when `nil`.
    ///   - expirationDate: when answering stops; truncated to milliseconds.
    public init(
        id: UUID = .pooledRandom(),
        topic: Topic,
        choices: [PermissionChoice] = PermissionChoice.defaultChoices,
        defaultChoice: PermissionChoice? = nil,
        expirationDate: Date? = nil
    ) {
        self.id = id
        self.topic = topic
        self.choices = choices
        self.defaultChoice = defaultChoice ?? PermissionChoice.mostRestrictive(of: choices)
        self.expirationDate = expirationDate?.truncatedToWireMilliseconds
    }

    /// Checks the question against the protocol rules.
    /// - Parameter now: the instant an expiry must be after.
    /// - Throws: ``AskError/invalidQuestion(_:)`` naming the first offending field.
    public func validate(now: Date = Date()) throws(AskError) {
        try AnyPermissionQuestion(self).validate(now: now)
    }
}

extension PermissionQuestion where Topic == CommunicationTopic {
    /// Asks to communicate with one handle, with the default actions and approve/decline choices.
    /// - Parameter expirationDate: when answering stops (truncated to milliseconds); `nil`: no expiry of its own.
    public init(handle: CommunicationHandle, expirationDate: Date? = nil) {
        self.init(handles: [handle], expirationDate: expirationDate)
    }

    /// Asks to communicate with several handles at once (one question, one answer for all of them), with
    /// approve/decline choices.
    ///
    /// ```swift
    /// let question = PermissionQuestion(
    ///     handles: [mum, gran], actions: [.message, .audioCall], expirationDate: Date().addingTimeInterval(3600))
    /// ```
    /// - Parameters:
    ///   - handles: the people, in the order the app lists them.
    ///   - actions: what the child wants to do with them; ``CommunicationTopic/defaultActions`` (message) by default.
    ///   - expirationDate: when answering stops (truncated to milliseconds); `nil`: no expiry of its own.
    public init(
        handles: [CommunicationHandle],
        actions: Set<CommunicationTopic.Action> = CommunicationTopic.defaultActions,
        expirationDate: Date? = nil
    ) {
        self.init(
            communicationTopic: CommunicationTopic(
                personInformation: handles.map { .init(handle: $0) },
                actions: actions
            ),
            expirationDate: expirationDate
        )
    }

    /// Asks about a communication topic with approve/decline choices.
    /// - Parameter expirationDate: when answering stops (truncated to milliseconds); `nil`: no expiry of its own.
    public init(communicationTopic: CommunicationTopic, expirationDate: Date? = nil) {
        self.init(topic: communicationTopic, expirationDate: expirationDate)
    }
}

extension PermissionQuestion where Topic == SignificantAppUpdateTopic {
    /// Asks about a significant app update with approve/decline choices.
    /// - Parameter expirationDate: when answering stops (truncated to milliseconds); `nil`: no expiry of its own.
    public init(significantAppUpdateTopic: SignificantAppUpdateTopic, expirationDate: Date? = nil) {
        self.init(topic: significantAppUpdateTopic, expirationDate: expirationDate)
    }
}

/// JSON keys shared by typed and erased questions, which encode identically.
enum QuestionCodingKeys: String, CodingKey {
    case id, topicID, topic, choices, defaultChoice, expirationDate
}

extension PermissionQuestion: Codable {
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: QuestionCodingKeys.self)
        let topicID = try c.decode(String.self, forKey: .topicID)
        guard topicID == Topic.topicID else {
            throw DecodingError.dataCorruptedError(
                forKey: .topicID,
                in: c,
                debugDescription: "expected topicID \(Topic.topicID), got \(topicID)"
            )
        }
        self.init(
            id: try c.decode(UUID.self, forKey: .id),
            topic: try c.decode(Topic.self, forKey: .topic),
            choices: try c.decode([PermissionChoice].self, forKey: .choices),
            defaultChoice: try c.decode(PermissionChoice.self, forKey: .defaultChoice),
            expirationDate: try c.decodeIfPresent(Date.self, forKey: .expirationDate)
        )
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: QuestionCodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(Topic.topicID, forKey: .topicID)
        try c.encode(topic, forKey: .topic)
        try c.encode(choices, forKey: .choices)
        try c.encode(defaultChoice, forKey: .defaultChoice)
        try c.encodeIfPresent(expirationDate, forKey: .expirationDate)
    }
}

/// A guardian's answer to a question (PermissionKit's `PermissionResponse`).
public struct PermissionResponse<Topic: QuestionTopic>: Codable, Sendable, Hashable {
    /// The question that was answered.
    public var question: PermissionQuestion<Topic>
    /// The choice the guardian made; one of `question.choices`.
    public var choice: PermissionChoice

    /// Creates a response.
    public init(question: PermissionQuestion<Topic>, choice: PermissionChoice) {
        self.question = question
        self.choice = choice
    }
}
