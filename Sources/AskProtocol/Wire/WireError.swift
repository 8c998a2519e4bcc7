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
    case wrongShard = "wrong-shard"
    case moved = "moved"
    case forbidden = "forbidden"
    case noRoute = "no-route"
    case busy = "busy"
    case storageFailed = "storage-failed"
    case moving = "moving"

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

extension WireError {
    /// The refusal of an `ask` whose question fails validation: the reason frame is the reason's canonical JSON
    /// (`{"code":…,"field":…,"message":…}`, docs/protocol.md §7.2), so programs read `field` and `code` without
    /// parsing text. A message that would take the JSON past the reason limit is shortened (at a character).
    public static func invalidQuestion(_ reason: InvalidQuestionReason, limit: Int = Wire.Limits.standard.maxReason)
        -> WireError
    {
        var reason = reason
        while true {
            let json = (try? WireJSON.encode(reason)).map { String(decoding: $0, as: UTF8.self) }
            if let json, json.utf8.count <= limit { return WireError(.invalidQuestion, json) }
            guard !reason.message.isEmpty else {
                // Field and code alone are over the limit (they never are: both are short names).
                return WireError(.invalidQuestion, #"{"code":"invalid","field":"question","message":""}"#)
            }
            let scalars = reason.message.unicodeScalars
            reason.message = String(scalars.dropLast(max(1, scalars.count / 8)))
        }
    }

    /// The structured reason of an `invalid-question` refusal (docs/protocol.md §7.2); `nil` for other codes, or a
    /// reason frame that is not the documented JSON.
    public var invalidQuestionReason: InvalidQuestionReason? {
        guard code == .invalidQuestion else { return nil }
        return try? WireJSON.decode(InvalidQuestionReason.self, from: Array(reason.utf8))
    }
}
