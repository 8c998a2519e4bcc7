import Foundation

/// Every application message kind, as sent in the envelope's kind header.
public enum MessageKind: String, Codable, Sendable, Hashable, CaseIterable {
    case ask = "ask"
    case askResult = "ask.result"
    case send = "send"
    case cancel = "cancel"
    case question = "question"
    case answer = "answer"
    case response = "response"
    case closed = "closed"
    case approval = "approval"
    case limitsQuery = "limits.query"
    case limitsReply = "limits.reply"
    case limitsAdmin = "limits.admin"
    case limitsRead = "limits.read"
    case limitsState = "limits.state"
    case limitsWrite = "limits.write"
    case echo = "echo"

    /// The body type carried under this kind.
    public var bodyType: any AppMessage.Type {
        switch self {
        case .ask: AskRequest.self
        case .askResult: AskResult.self
        case .send: SendQuestion.self
        case .cancel: CancelQuestion.self
        case .question: GuardianQuestion.self
        case .answer: GuardianAnswer.self
        case .response: AnyPermissionResponse.self
        case .closed: QuestionClosed.self
        case .approval: ApprovalNotice.self
        case .limitsQuery: KnownHandlesQuery.self
        case .limitsReply: KnownHandlesReply.self
        case .limitsAdmin: LimitsAdminChange.self
        case .limitsRead: LimitsStateRead.self
        case .limitsState: LimitsStateReport.self
        case .limitsWrite: LimitsStateWrite.self
        case .echo: Echo.self
        }
    }

    /// Who sends it to whom, for documentation and checks (`"child → limits"`).
    public var direction: (from: [Address.Role], to: [Address.Role]) {
        switch self {
        case .ask: ([.child], [.limits])
        case .askResult: ([.limits], [.child])
        case .send, .cancel: ([.child], [.broker])
        case .question, .closed: ([.broker], [.guardian])
        case .answer: ([.guardian], [.broker])
        case .response: ([.broker], [.child])
        case .approval: ([.broker], [.limits])
        case .limitsQuery: ([.child], [.limits])
        case .limitsReply: ([.limits], [.child])
        case .limitsAdmin: ([.observer], [.limits])
        case .limitsRead, .limitsWrite: ([.broker], [.limits])
        case .limitsState: ([.limits], [.broker])
        case .echo: (Address.Role.allCases, Address.Role.allCases)
        }
    }
}

/// Why a body could not be decoded.
public enum BodyDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind header names no known message kind.
    case unknownKind(String)
    /// The body is not valid UTF-8.
    case invalidUTF8
    /// The body is not JSON, or not the JSON shape of its kind; the text says where.
    case invalidJSON(String)

    public var description: String {
        switch self {
        case .unknownKind(let k): "unknown message kind \"\(k)\""
        case .invalidUTF8: "body is not valid UTF-8"
        case .invalidJSON(let detail): "body is not valid JSON for its kind: \(detail)"
        }
    }
}

/// A decoded body of any kind, for switching on in workers.
public enum AppMessageBody: Sendable, Equatable {
    case ask(AskRequest)
    case askResult(AskResult)
    case send(SendQuestion)
    case cancel(CancelQuestion)
    case question(GuardianQuestion)
    case answer(GuardianAnswer)
    case response(AnyPermissionResponse)
    case closed(QuestionClosed)
    case approval(ApprovalNotice)
    case limitsQuery(KnownHandlesQuery)
    case limitsReply(KnownHandlesReply)
    case limitsAdmin(LimitsAdminChange)
    case limitsRead(LimitsStateRead)
    case limitsState(LimitsStateReport)
    case limitsWrite(LimitsStateWrite)
    case echo(Echo)

    /// Decodes a body received under `kind`.
    /// - Parameters:
    ///   - kind: the envelope's kind header.
    ///   - bytes: the body frame.
    /// - Throws: ``BodyDecodingError``: unknown kind, then invalid UTF-8, then invalid JSON, in that order.
    public init(kind: String, bytes: some Collection<UInt8>) throws(BodyDecodingError) {
        guard let k = MessageKind(rawValue: kind) else { throw .unknownKind(kind) }
        self = try Self.decode(k, bytes)
    }

    /// Wraps a typed body.
    public init?(_ message: any AppMessage) {
        switch message {
        case let m as AskRequest: self = .ask(m)
        case let m as AskResult: self = .askResult(m)
        case let m as SendQuestion: self = .send(m)
        case let m as CancelQuestion: self = .cancel(m)
        case let m as GuardianQuestion: self = .question(m)
        case let m as GuardianAnswer: self = .answer(m)
        case let m as AnyPermissionResponse: self = .response(m)
        case let m as QuestionClosed: self = .closed(m)
        case let m as ApprovalNotice: self = .approval(m)
        case let m as KnownHandlesQuery: self = .limitsQuery(m)
        case let m as KnownHandlesReply: self = .limitsReply(m)
        case let m as LimitsAdminChange: self = .limitsAdmin(m)
        case let m as LimitsStateRead: self = .limitsRead(m)
        case let m as LimitsStateReport: self = .limitsState(m)
        case let m as LimitsStateWrite: self = .limitsWrite(m)
        case let m as Echo: self = .echo(m)
        default: return nil
        }
    }

    /// The wrapped body.
    public var message: any AppMessage {
        switch self {
        case .ask(let m): m
        case .askResult(let m): m
        case .send(let m): m
        case .cancel(let m): m
        case .question(let m): m
        case .answer(let m): m
        case .response(let m): m
        case .closed(let m): m
        case .approval(let m): m
        case .limitsQuery(let m): m
        case .limitsReply(let m): m
        case .limitsAdmin(let m): m
        case .limitsRead(let m): m
        case .limitsState(let m): m
        case .limitsWrite(let m): m
        case .echo(let m): m
        }
    }

    /// The kind of the wrapped body.
    public var kind: MessageKind { type(of: message).messageKind }

    /// Canonical JSON bytes of the wrapped body.
    public func encoded() throws -> [UInt8] {
        try WireJSON.encode(message)
    }

    private static func decode(_ kind: MessageKind, _ bytes: some Collection<UInt8>) throws(BodyDecodingError)
        -> AppMessageBody
    {
        func body<T: AppMessage>(_: T.Type) throws(BodyDecodingError) -> T {
            try AppMessageRegistry.decode(T.self, from: bytes)
        }
        return switch kind {
        case .ask: .ask(try body(AskRequest.self))
        case .askResult: .askResult(try body(AskResult.self))
        case .send: .send(try body(SendQuestion.self))
        case .cancel: .cancel(try body(CancelQuestion.self))
        case .question: .question(try body(GuardianQuestion.self))
        case .answer: .answer(try body(GuardianAnswer.self))
        case .response: .response(try body(AnyPermissionResponse.self))
        case .closed: .closed(try body(QuestionClosed.self))
        case .approval: .approval(try body(ApprovalNotice.self))
        case .limitsQuery: .limitsQuery(try body(KnownHandlesQuery.self))
        case .limitsReply: .limitsReply(try body(KnownHandlesReply.self))
        case .limitsAdmin: .limitsAdmin(try body(LimitsAdminChange.self))
        case .limitsRead: .limitsRead(try body(LimitsStateRead.self))
        case .limitsState: .limitsState(try body(LimitsStateReport.self))
        case .limitsWrite: .limitsWrite(try body(LimitsStateWrite.self))
        case .echo: .echo(try body(Echo.self))
        }
    }
}

/// Decoding bodies by kind, with typed errors.
public enum AppMessageRegistry {
    /// The body type for a kind string, or `nil` if the kind is unknown.
    public static func bodyType(for kind: String) -> (any AppMessage.Type)? {
        MessageKind(rawValue: kind)?.bodyType
    }

    /// Decodes a body of any kind.
    /// - Throws: ``BodyDecodingError``.
    public static func decode(kind: String, from bytes: some Collection<UInt8>) throws(BodyDecodingError)
        -> any AppMessage
    {
        try AppMessageBody(kind: kind, bytes: bytes).message
    }

    /// Decodes a body of a known type, checking UTF-8 first so the error says which layer failed.
    /// - Throws: ``BodyDecodingError/invalidUTF8`` or ``BodyDecodingError/invalidJSON(_:)``.
    public static func decode<T: AppMessage>(_ type: T.Type, from bytes: some Collection<UInt8>)
        throws(BodyDecodingError) -> T
    {
        // Input the fast path takes is valid UTF-8 (it validates every string and allows only ASCII elsewhere).
        if let value = WireJSON.fastDecode(T.self, from: bytes) { return value }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw .invalidUTF8 }
        do {
            return try WireJSON.foundationDecode(T.self, from: bytes)
        } catch let error as DecodingError {
            throw .invalidJSON(describeDecoding(error))
        } catch {
            throw .invalidJSON(String(describing: error))
        }
    }
}
