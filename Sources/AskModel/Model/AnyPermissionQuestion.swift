import Foundation

/// The topic of a question whose topic type is known only at run time.
public enum AnyQuestionTopic: Sendable, Hashable {
    case communication(CommunicationTopic)
    case significantAppUpdate(SignificantAppUpdateTopic)

    /// Every topic ID the protocol knows.
    public static let knownTopicIDs = [CommunicationTopic.topicID, SignificantAppUpdateTopic.topicID]

    /// Wraps a typed topic.
    public init<T: QuestionTopic>(_ topic: T) {
        switch topic {
        case let t as CommunicationTopic: self = .communication(t)
        case let t as SignificantAppUpdateTopic: self = .significantAppUpdate(t)
        default: preconditionFailure("QuestionTopic \(T.self) is not part of the AskRelay protocol")
        }
    }

    /// The stable topic identifier.
    public var topicID: String {
        switch self {
        case .communication: CommunicationTopic.topicID
        case .significantAppUpdate: SignificantAppUpdateTopic.topicID
        }
    }

    /// The topic as `T`, or `nil` if it is another kind.
    public func typed<T: QuestionTopic>(as type: T.Type = T.self) -> T? {
        switch self {
        case .communication(let t): t as? T
        case .significantAppUpdate(let t): t as? T
        }
    }

    /// The handles of a communication topic; empty for other topics.
    public var handles: [CommunicationHandle] {
        if case .communication(let t) = self { return t.handles }
        return []
    }
}

/// A question of any topic, for routing, storage and validation.
///
/// Encodes exactly like ``PermissionQuestion`` of the same topic, with `"topicID"` telling which.
public struct AnyPermissionQuestion: Codable, Sendable, Hashable, Identifiable {
    /// Unique identifier of the question.
    public var id: UUID
    /// What is asked about.
    public var topic: AnyQuestionTopic
    /// The answers the guardian can pick from.
    public var choices: [PermissionChoice]
    /// The assumed answer; must be one of ``choices``.
    public var defaultChoice: PermissionChoice
    /// When answering stops, truncated to milliseconds.
    public var expirationDate: Date? {
        didSet { expirationDate = expirationDate?.truncatedToWireMilliseconds }
    }

    /// The stable topic identifier (`"communication"` or `"significantAppUpdate"`).
    public var topicID: String { topic.topicID }

    /// Creates a question with every field given; `defaultChoice` defaults to the most restrictive choice.
    public init(
        id: UUID = .pooledRandom(),
        topic: AnyQuestionTopic,
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

    /// Erases a typed question.
    public init<T: QuestionTopic>(_ question: PermissionQuestion<T>) {
        self.init(
            id: question.id,
            topic: AnyQuestionTopic(question.topic),
            choices: question.choices,
            defaultChoice: question.defaultChoice,
            expirationDate: question.expirationDate
        )
    }

    /// The question with its topic typed as `T`, or `nil` if its topic is another kind.
    public func typed<T: QuestionTopic>(as type: T.Type = T.self) -> PermissionQuestion<T>? {
        guard let t = topic.typed(as: T.self) else { return nil }
        return PermissionQuestion(
            id: id,
            topic: t,
            choices: choices,
            defaultChoice: defaultChoice,
            expirationDate: expirationDate
        )
    }

    /// The choice with the given id, if the question offers it.
    public func choice(withID choiceID: String) -> PermissionChoice? {
        choices.first { $0.id == choiceID }
    }

    /// Whether answers are no longer accepted at `now` (expiry is inclusive: at the expiration instant the
    /// question is already expired).
    public func isExpired(at now: Date) -> Bool {
        guard let expirationDate else { return false }
        return now.truncatedToWireMilliseconds >= expirationDate
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: QuestionCodingKeys.self)
        let topicID = try c.decode(String.self, forKey: .topicID)
        let topic: AnyQuestionTopic
        switch topicID {
        case CommunicationTopic.topicID:
            topic = .communication(try c.decode(CommunicationTopic.self, forKey: .topic))
        case SignificantAppUpdateTopic.topicID:
            topic = .significantAppUpdate(try c.decode(SignificantAppUpdateTopic.self, forKey: .topic))
        default:
            throw DecodingError.dataCorruptedError(
                forKey: .topicID,
                in: c,
                debugDescription: "unknown topicID \(topicID)"
            )
        }
        self.init(
            id: try c.decode(UUID.self, forKey: .id),
            topic: topic,
            choices: try c.decode([PermissionChoice].self, forKey: .choices),
            defaultChoice: try c.decode(PermissionChoice.self, forKey: .defaultChoice),
            expirationDate: try c.decodeIfPresent(Date.self, forKey: .expirationDate)
        )
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: QuestionCodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(topicID, forKey: .topicID)
        switch topic {
        case .communication(let t): try c.encode(t, forKey: .topic)
        case .significantAppUpdate(let t): try c.encode(t, forKey: .topic)
        }
        try c.encode(choices, forKey: .choices)
        try c.encode(defaultChoice, forKey: .defaultChoice)
        try c.encodeIfPresent(expirationDate, forKey: .expirationDate)
    }
}

/// A guardian's answer to a question of any topic; the body of the `"response"` message.
public struct AnyPermissionResponse: AppMessage, Hashable {
    public static let messageKind = MessageKind.response
    public var subject: UUID? { question.id }

    /// The question that was answered.
    public var question: AnyPermissionQuestion
    /// The guardian's choice; one of `question.choices`.
    public var choice: PermissionChoice

    /// Creates a response.
    public init(question: AnyPermissionQuestion, choice: PermissionChoice) {
        self.question = question
        self.choice = choice
    }

    /// Erases a typed response.
    public init<T: QuestionTopic>(_ response: PermissionResponse<T>) {
        self.init(question: AnyPermissionQuestion(response.question), choice: response.choice)
    }

    /// The response with its topic typed as `T`, or `nil` if its topic is another kind.
    public func typed<T: QuestionTopic>(as type: T.Type = T.self) -> PermissionResponse<T>? {
        question.typed(as: T.self).map { PermissionResponse(question: $0, choice: choice) }
    }
}
