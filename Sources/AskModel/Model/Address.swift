/// A logical endpoint address: `child/<id>`, `guardian/<id>`, `observer/<id>`, `limits` or `broker`.
///
/// Addresses name endpoints, never sockets: one worker process may host thousands of them. An `<id>` is
/// 1...64 characters from `A-Z a-z 0-9 . _ -`. In JSON an address is a plain string; decoding validates it.
public struct Address: RawRepresentable, Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// What kind of endpoint an address names.
    public enum Role: String, Codable, Sendable, Hashable, CaseIterable {
        /// A child (the asking app), `child/<id>`.
        case child
        /// A guardian (parent), `guardian/<id>`.
        case guardian
        /// A read-only observer such as a test harness, `observer/<id>`.
        case observer
        /// The system-limits service, `limits`.
        case limits
        /// The broker itself, whose ledger answers `send`/`cancel`/`answer`, `broker`.
        case broker

        /// Whether addresses of this role carry an `<id>`.
        public var hasID: Bool { self == .child || self == .guardian || self == .observer }
    }

    /// Why a string is not an address.
    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        case unknownRole(String)
        case missingID(Role)
        case unexpectedID(Role)
        case invalidID(String)

        public var description: String {
            switch self {
            case .unknownRole(let r): "unknown address role \"\(r)\""
            case .missingID(let r): "address role \(r.rawValue) needs an id: \(r.rawValue)/<id>"
            case .unexpectedID(let r): "address \(r.rawValue) takes no id"
            case .invalidID(let id): "address id \"\(id)\" must be 1-64 characters of A-Z a-z 0-9 . _ -"
            }
        }
    }

    /// The address text, for example `"child/c42"`.
    public let rawValue: String
    /// The role part.
    public let role: Role
    /// The id part, `nil` for `limits` and `broker`.
    public let id: String?

    /// The system-limits service.
    public static let limits = Address(uncheckedRole: .limits, id: nil)
    /// The broker's own endpoint (the question ledger).
    public static let broker = Address(uncheckedRole: .broker, id: nil)

    private init(uncheckedRole role: Role, id: String?) {
        self.role = role
        self.id = id
        self.rawValue = id.map { "\(role.rawValue)/\($0)" } ?? role.rawValue
    }

    /// Builds an address from its parts.
    /// - Throws: ``ParseError`` if the id is missing, unexpected or malformed.
    public init(role: Role, id: String?) throws(ParseError) {
        switch (role.hasID, id) {
        case (true, nil): throw .missingID(role)
        case (false, .some): throw .unexpectedID(role)
        case (true, .some(let id)) where !Self.isValidID(id): throw .invalidID(id)
        default: self.init(uncheckedRole: role, id: id)
        }
    }

    /// Parses address text.
    /// - Throws: ``ParseError`` describing what is wrong.
    public init(parsing text: String) throws(ParseError) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let role = Role(rawValue: String(parts[0])) else { throw .unknownRole(String(parts[0])) }
        try self.init(role: role, id: parts.count == 2 ? String(parts[1]) : nil)
    }

    /// Parses address text, returning `nil` if it is not an address.
    public init?(rawValue: String) {
        guard let a = try? Address(parsing: rawValue) else { return nil }
        self = a
    }

    /// `child/<id>`.
    public static func child(_ id: String) throws(ParseError) -> Address { try Address(role: .child, id: id) }
    /// `guardian/<id>`.
    public static func guardian(_ id: String) throws(ParseError) -> Address { try Address(role: .guardian, id: id) }
    /// `observer/<id>`.
    public static func observer(_ id: String) throws(ParseError) -> Address { try Address(role: .observer, id: id) }

    /// Whether `id` is 1...64 characters of `A-Z a-z 0-9 . _ -`.
    public static func isValidID(_ id: some StringProtocol) -> Bool {
        let bytes = id.utf8
        return (1...64).contains(bytes.count)
            && bytes.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                    || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
            }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        do {
            self = try Address(parsing: text)
        } catch {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }

    public static func < (lhs: Address, rhs: Address) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { rawValue }
}

/// An authenticated party: who a connection speaks for, as established by the broker (from the CURVE key),
/// never as claimed by a worker.
public struct Principal: Codable, Sendable, Hashable, CustomStringConvertible {
    /// What the principal may do.
    public enum Role: String, Codable, Sendable, Hashable, CaseIterable {
        /// Asks questions; receives responses.
        case child
        /// Answers questions of children in the same family.
        case guardian
        /// The system-limits service.
        case limits
        /// Read-only access (tests, dashboards).
        case observer
    }

    /// The role.
    public var role: Role
    /// The principal's id, the `<id>` of its address (for `limits`, conventionally `"limits"`).
    public var id: String
    /// The family a child or guardian belongs to; `nil` for services and observers.
    public var family: String?

    /// Creates a principal.
    public init(role: Role, id: String, family: String? = nil) {
        self.role = role
        self.id = id
        self.family = family
    }

    /// The address this principal owns, or `nil` if its id is not a valid address id.
    public var address: Address? {
        switch role {
        case .child: try? .child(id)
        case .guardian: try? .guardian(id)
        case .observer: try? .observer(id)
        case .limits: .limits
        }
    }

    public var description: String {
        "\(role.rawValue)/\(id)" + (family.map { " (family \($0))" } ?? "")
    }
}
