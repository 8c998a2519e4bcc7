import Foundation

/// The parts of a person's name, a small portable stand-in for `PersonNameComponents`.
///
/// `PersonNameComponents` encodes differently across Foundation implementations, so the protocol carries
/// this struct instead. Every part is optional; absent parts are omitted from JSON.
public struct PersonName: Codable, Sendable, Hashable {
    /// Honorific before the name, such as "Dr.".
    public var namePrefix: String?
    /// The given (first) name.
    public var givenName: String?
    /// A middle name.
    public var middleName: String?
    /// The family (last) name.
    public var familyName: String?
    /// A suffix after the name, such as "Jr.".
    public var nameSuffix: String?
    /// A nickname.
    public var nickname: String?

    /// Creates a name; every part defaults to absent.
    public init(
        namePrefix: String? = nil,
        givenName: String? = nil,
        middleName: String? = nil,
        familyName: String? = nil,
        nameSuffix: String? = nil,
        nickname: String? = nil
    ) {
        self.namePrefix = namePrefix
        self.givenName = givenName
        self.middleName = middleName
        self.familyName = familyName
        self.nameSuffix = nameSuffix
        self.nickname = nickname
    }

    /// Converts Foundation name components (phonetic parts are dropped).
    public init(_ components: PersonNameComponents) {
        self.init(
            namePrefix: components.namePrefix,
            givenName: components.givenName,
            middleName: components.middleName,
            familyName: components.familyName,
            nameSuffix: components.nameSuffix,
            nickname: components.nickname
        )
    }

    /// The parts in display order with their JSON field names, for validation and display.
    public var parts: [(field: String, value: String?)] {
        [
            ("namePrefix", namePrefix), ("givenName", givenName), ("middleName", middleName),
            ("familyName", familyName), ("nameSuffix", nameSuffix), ("nickname", nickname),
        ]
    }

    /// "given middle family", falling back to the nickname; empty if nothing is set.
    public var displayName: String {
        let full = [givenName, middleName, familyName].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " ")
        return full.isEmpty ? (nickname ?? "") : full
    }
}

/// A request to communicate with one or more people (PermissionKit's `CommunicationTopic`).
public struct CommunicationTopic: QuestionTopic {
    public static let topicID = "communication"

    /// One person the child wants to communicate with.
    public struct PersonInformation: Codable, Sendable, Hashable {
        /// Largest accepted ``avatarImage``, in bytes (64 KiB).
        public static let maximumAvatarBytes = 64 * 1024

        /// How to reach the person.
        public var handle: CommunicationHandle
        /// The person's name, if the app knows it.
        public var nameComponents: PersonName?
        /// Encoded image bytes (PNG/JPEG/HEIC) shown to the guardian; at most ``maximumAvatarBytes``.
        public var avatarImage: Data?

        /// Creates the information for one person.
        public init(handle: CommunicationHandle, nameComponents: PersonName? = nil, avatarImage: Data? = nil) {
            self.handle = handle
            self.nameComponents = nameComponents
            self.avatarImage = avatarImage
        }
    }

    /// A way of communicating that the child asks permission for.
    public enum Action: String, Codable, Sendable, Hashable, CaseIterable, Comparable {
        case message, audioCall, videoCall, call, chat, follow, beFollowed, friend, connect, communicate

        /// Declaration order, which is also the order actions are encoded in.
        public static func < (lhs: Action, rhs: Action) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    /// The actions used when none are given: sending messages.
    public static let defaultActions: Set<Action> = [.message]

    /// The people involved, in the order the app listed them.
    public var personInformation: [PersonInformation]
    /// What the child wants to do with them. Encoded as an array in ``Action`` declaration order.
    public var actions: Set<Action>

    /// Creates a topic with the default actions (``defaultActions``).
    public init(personInformation: [PersonInformation]) {
        self.init(personInformation: personInformation, actions: Self.defaultActions)
    }

    /// Creates a topic.
    public init(personInformation: [PersonInformation], actions: Set<Action>) {
        self.personInformation = personInformation
        self.actions = actions
    }

    private enum CodingKeys: String, CodingKey { case personInformation, actions }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        personInformation = try c.decode([PersonInformation].self, forKey: .personInformation)
        actions = Set(try c.decode([Action].self, forKey: .actions))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(personInformation, forKey: .personInformation)
        try c.encode(actions.sorted(), forKey: .actions)
    }

    /// The handles of every person, in order.
    public var handles: [CommunicationHandle] { personInformation.map(\.handle) }
}

/// A request to keep using an app after a significant update (PermissionKit's `SignificantAppUpdateTopic`).
public struct SignificantAppUpdateTopic: QuestionTopic {
    public static let topicID = "significantAppUpdate"

    /// What changed, shown to the guardian. At most 4096 characters (Unicode scalars).
    public var description: String

    /// Creates the topic.
    public init(description: String) {
        self.description = description
    }
}
