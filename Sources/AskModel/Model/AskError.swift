/// Why a question is invalid, in a form programs can act on.
///
/// `field` is a path into the question's JSON, for example `"topic.personInformation[1].handle.value"`;
/// `code` is one of the ``Code`` constants; `message` is for people and may change between versions.
public struct InvalidQuestionReason: Codable, Sendable, Hashable, CustomStringConvertible {
    /// A machine-readable reason code. Unknown codes from newer peers decode unchanged.
    public struct Code: RawRepresentable, Codable, Sendable, Hashable, ExpressibleByStringLiteral,
        CustomStringConvertible
    {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }
        public init(from decoder: any Decoder) throws {
            rawValue = try decoder.singleValueContainer().decode(String.self)
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            try c.encode(rawValue)
        }
        public var description: String { rawValue }

        /// A required collection has no elements (no people, no actions, no choices).
        public static let missing: Code = "missing"
        /// A text field is empty or only whitespace.
        public static let empty: Code = "empty"
        /// A text field is longer than its limit.
        public static let tooLong: Code = "too-long"
        /// A binary field (the avatar) is larger than its limit.
        public static let tooLarge: Code = "too-large"
        /// A phone number is not `+` followed by 7...15 digits.
        public static let notE164: Code = "not-e164"
        /// An e-mail handle is not an address.
        public static let notEmail: Code = "not-email"
        /// A handle or choice id appears twice.
        public static let duplicate: Code = "duplicate"
        /// The default choice is not one of the choices.
        public static let notAmongChoices: Code = "not-among-choices"
        /// The expiration date is not after `now`.
        public static let inPast: Code = "in-past"
    }

    /// JSON path of the offending field.
    public var field: String
    /// Machine-readable reason.
    public var code: Code
    /// Human-readable explanation.
    public var message: String

    /// Creates a reason.
    public init(field: String, code: Code, message: String) {
        self.field = field
        self.code = code
        self.message = message
    }

    public var description: String { "\(field): \(code) (\(message))" }
}

/// Why `ask` refused a question (PermissionKit's `AskError`).
///
/// JSON form: `{"case":"<name>"}` plus `"reason"` for ``invalidQuestion(_:)`` and `"message"` for
/// ``systemError(_:)``. An unrecognised case name decodes as ``unknown`` so that newer peers stay readable.
public enum AskError: Error, Codable, Sendable, Hashable, CustomStringConvertible {
    /// Communication limits are not turned on for the child, so there is nobody to ask.
    case communicationLimitsNotEnabled
    /// Contact sync is not set up for the child, so known handles cannot be established.
    case contactSyncNotSetup
    /// The question breaks a protocol rule.
    case invalidQuestion(InvalidQuestionReason)
    /// Asking is not available on this device or for this child.
    case notAvailable
    /// The system failed; the text says how.
    case systemError(String)
    /// An error nobody could classify.
    case unknown

    /// The `"case"` name used in JSON.
    public var caseName: String {
        switch self {
        case .communicationLimitsNotEnabled: "communicationLimitsNotEnabled"
        case .contactSyncNotSetup: "contactSyncNotSetup"
        case .invalidQuestion: "invalidQuestion"
        case .notAvailable: "notAvailable"
        case .systemError: "systemError"
        case .unknown: "unknown"
        }
    }

    public var description: String {
        switch self {
        case .communicationLimitsNotEnabled: "communication limits are not enabled for this child"
        case .contactSyncNotSetup: "contact sync is not set up for this child"
        case .invalidQuestion(let reason): "invalid question: \(reason)"
        case .notAvailable: "asking is not available for this child or device"
        case .systemError(let message): "system error: \(message)"
        case .unknown: "unknown error"
        }
    }

    private enum CodingKeys: String, CodingKey { case `case`, reason, message }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        switch try c.decode(String.self, forKey: .case) {
        case "communicationLimitsNotEnabled": self = .communicationLimitsNotEnabled
        case "contactSyncNotSetup": self = .contactSyncNotSetup
        case "invalidQuestion": self = .invalidQuestion(try c.decode(InvalidQuestionReason.self, forKey: .reason))
        case "notAvailable": self = .notAvailable
        case "systemError": self = .systemError(try c.decode(String.self, forKey: .message))
        default: self = .unknown
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(caseName, forKey: .case)
        switch self {
        case .invalidQuestion(let reason): try c.encode(reason, forKey: .reason)
        case .systemError(let message): try c.encode(message, forKey: .message)
        default: break
        }
    }
}
