/// Asking which handles the system already knows (PermissionKit's `CommunicationLimits`).
///
/// These answers say nothing about whether limits are enabled. Implemented by the client library over the
/// `limits.query` / `limits.reply` messages.
public protocol CommunicationLimitsQuerying: Sendable {
    /// The subset of `handles` that are known (approved or synced contacts).
    func knownHandles(in handles: Set<CommunicationHandle>) async throws -> Set<CommunicationHandle>
    /// Whether one handle is known.
    func isKnownHandle(_ handle: CommunicationHandle) async throws -> Bool
}

extension CommunicationLimitsQuerying {
    public func isKnownHandle(_ handle: CommunicationHandle) async throws -> Bool {
        try await knownHandles(in: [handle]).contains(handle)
    }
}

/// The system-limits state of one child, as the limits worker keeps it.
///
/// Known handles are stored normalized (``CommunicationHandle/normalized``), so formatting differences in
/// phone numbers and e-mail case do not matter. Encoded with `knownHandles` as a sorted array.
public struct LimitsState: Codable, Sendable, Hashable {
    /// Whether communication limits are turned on.
    public var limitsEnabled: Bool
    /// Whether contact sync is set up.
    public var contactSyncSetUp: Bool
    /// Whether the device and account can ask at all.
    public var eligible: Bool
    /// Handles the child may already communicate with (normalized).
    public private(set) var knownHandles: Set<CommunicationHandle>

    /// Creates a state; by default a fully set-up child that knows nobody.
    public init(
        limitsEnabled: Bool = true,
        contactSyncSetUp: Bool = true,
        eligible: Bool = true,
        knownHandles: Set<CommunicationHandle> = []
    ) {
        self.limitsEnabled = limitsEnabled
        self.contactSyncSetUp = contactSyncSetUp
        self.eligible = eligible
        self.knownHandles = Set(knownHandles.map(\.normalized))
    }

    /// The refusal `ask` must give for this child, or `nil` if it may ask. Checked in order: eligible
    /// (``AskError/notAvailable``), limits enabled, contact sync set up.
    public var admissionError: AskError? {
        if !eligible { return .notAvailable }
        if !limitsEnabled { return .communicationLimitsNotEnabled }
        if !contactSyncSetUp { return .contactSyncNotSetup }
        return nil
    }

    /// The members of `handles` that are known, in their original spelling and order, without repeats.
    public func knownHandles(in handles: [CommunicationHandle]) -> [CommunicationHandle] {
        var seen = Set<CommunicationHandle>()
        return handles.filter { knownHandles.contains($0.normalized) && seen.insert($0).inserted }
    }

    /// Whether `handle` is known.
    public func isKnownHandle(_ handle: CommunicationHandle) -> Bool {
        knownHandles.contains(handle.normalized)
    }

    /// Adds handles (after an approval or an admin change).
    public mutating func learn(_ handles: some Sequence<CommunicationHandle>) {
        for h in handles { knownHandles.insert(h.normalized) }
    }

    /// Removes handles.
    public mutating func forget(_ handles: some Sequence<CommunicationHandle>) {
        for h in handles { knownHandles.remove(h.normalized) }
    }

    /// Applies an admin change: set flags that are given, then add, then remove handles.
    public mutating func apply(_ change: LimitsAdminChange) {
        if let v = change.limitsEnabled { limitsEnabled = v }
        if let v = change.contactSyncSetUp { contactSyncSetUp = v }
        if let v = change.eligible { eligible = v }
        if let add = change.addKnown { learn(add) }
        if let remove = change.removeKnown { forget(remove) }
    }

    private enum CodingKeys: String, CodingKey { case limitsEnabled, contactSyncSetUp, eligible, knownHandles }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            limitsEnabled: try c.decode(Bool.self, forKey: .limitsEnabled),
            contactSyncSetUp: try c.decode(Bool.self, forKey: .contactSyncSetUp),
            eligible: try c.decode(Bool.self, forKey: .eligible),
            knownHandles: Set(try c.decode([CommunicationHandle].self, forKey: .knownHandles))
        )
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(limitsEnabled, forKey: .limitsEnabled)
        try c.encode(contactSyncSetUp, forKey: .contactSyncSetUp)
        try c.encode(eligible, forKey: .eligible)
        try c.encode(knownHandles.sorted(), forKey: .knownHandles)
    }
}
