/// Machine-readable refusal codes carried in NACK frames. The raw value is the token on the wire.
///
/// Codes fall in three groups: framing (the message could not be read), session (who may say what), and ledger
/// (what the question's state allows). docs/protocol.md lists each with its meaning.
public enum ErrorCode: String, Sendable, CaseIterable, Codable {
    // Framing: the message is refused before anything else looks at it.
    case badSignature = "bad-signature"
    case unsupportedVersion = "unsupported-version"
    case unknownCommand = "unknown-command"
    case missingFrames = "missing-frames"
    case extraFrames = "extra-frames"
    case oversizeFrame = "oversize-frame"
    case badID = "bad-id"
    case badAddress = "bad-address"
    case badKind = "bad-kind"
    case invalidUTF8 = "invalid-utf8"
    case invalidJSON = "invalid-json"
    case unknownKind = "unknown-kind"
    case badSubject = "bad-subject"
    case badHeader = "bad-header"

    // Session and routing.
    case notRegistered = "not-registered"
    case badHello = "bad-hello"
    case addressTaken = "address-taken"
    case forbidden = "forbidden"
    case noRoute = "no-route"
    case busy = "busy"
    case storageFailed = "storage-failed"

    // Question ledger.
    case invalidQuestion = "invalid-question"
    case duplicateQuestion = "duplicate-question"
    case unknownQuestion = "unknown-question"
    case notPresented = "not-presented"
    case notSent = "not-sent"
    case alreadySent = "already-sent"
    case alreadyClosed = "already-closed"
    case expired = "expired"
    case cancelled = "cancelled"
    case notGuardian = "not-guardian"
    case invalidChoice = "invalid-choice"
}

/// A refusal: the code for programs and a sentence for people.
public struct WireError: Error, Sendable, Hashable, CustomStringConvertible {
    public let code: ErrorCode
    public let reason: String

    public init(_ code: ErrorCode, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code.rawValue): \(reason)" }
}
