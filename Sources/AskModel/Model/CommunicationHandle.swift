/// A way to reach a person: a phone number, an e-mail address, or an app-specific identifier.
///
/// Mirrors PermissionKit's `CommunicationHandle`. Equality is exact (value and kind); use
/// ``normalized`` to compare handles the way the system does (so `"+1 555-0100"` and `"+15550100"` match).
public struct CommunicationHandle: Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// What the handle's value is.
    public enum Kind: String, Codable, Sendable, Hashable, CaseIterable {
        /// An E.164-like phone number (`+` and 7...15 digits; spaces, dashes and parentheses allowed).
        case phoneNumber
        /// An e-mail address.
        case emailAddress
        /// An app-specific identifier such as a user name.
        case custom
    }

    /// The handle text as the app supplied it.
    public var value: String
    /// How to interpret ``value``.
    public var kind: Kind

    /// Creates a handle.
    /// - Parameters:
    ///   - value: the handle text.
    ///   - kind: how to interpret it.
    public init(value: String, kind: Kind) {
        self.value = value
        self.kind = kind
    }

    /// The handle in the form used to compare handles: phone numbers keep `+` and digits only, e-mail
    /// addresses are lower-cased, custom handles are unchanged.
    public var normalized: CommunicationHandle {
        switch kind {
        case .phoneNumber:
            return CommunicationHandle(
                value: String(value.filter { $0 == "+" || $0.isASCII && $0.isNumber }),
                kind: kind
            )
        case .emailAddress:
            return CommunicationHandle(value: value.lowercased(), kind: kind)
        case .custom:
            return self
        }
    }

    public static func < (lhs: CommunicationHandle, rhs: CommunicationHandle) -> Bool {
        if lhs.kind != rhs.kind {
            return Kind.allCases.firstIndex(of: lhs.kind)! < Kind.allCases.firstIndex(of: rhs.kind)!
        }
        return lhs.value.unicodeScalars.lexicographicallyPrecedes(rhs.value.unicodeScalars)
    }

    public var description: String { "\(kind.rawValue):\(value)" }
}
