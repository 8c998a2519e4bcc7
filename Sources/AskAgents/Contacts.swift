import AskClient
import AskProtocol
import Foundation

/// One person in a simulated child's address book.
public struct GeneratedContact: Sendable, Hashable, Codable {
    public var handle: CommunicationHandle
    public var name: PersonName?
    /// Whether the system should know it before the run (the simulation seeds the limits worker's state with these).
    public var known: Bool

    public init(handle: CommunicationHandle, name: PersonName?, known: Bool) {
        self.handle = handle
        self.name = name
        self.known = known
    }
}

/// Deterministic simulated children and their contacts.
///
/// Generated children: family index `f` in `1...families`, child index `c` in `1...childrenPerFamily`; the child id is
/// `<prefix><f>-<c>` and its family `f<f>` (the parent worker names generated guardians' families the same way).
/// Contacts depend only on (seed, child id, count, known ratio), so another process (the simulation seeding the
/// limits state) can compute the same list.
public enum ContactGenerator {
    static let givenNames = [
        "Ada", "Ben", "Chloé", "Dev", "Ela", "Finn", "Grace", "Hiro", "Ines", "Jonas", "Kemal", "Lena", "Mei", "Noor",
        "Olu", "Priya",
    ]
    static let familyNames = [
        "Abe", "Brown", "Costa", "Diallo", "Evans", "Fischer", "García", "Hansen", "Ivanova", "Jensen", "Kim", "López",
        "Müller", "Nakamura",
    ]

    /// The generated children: ids `<idPrefix><f>-<c>`, families `f<f>`, both 1-based like generated guardians.
    public static func children(families: Int, childrenPerFamily: Int, idPrefix: String) -> [ChildIdentity] {
        guard families > 0, childrenPerFamily > 0 else { return [] }
        return (1...families).flatMap { f in
            (1...childrenPerFamily).map { c in ChildIdentity(id: "\(idPrefix)\(f)-\(c)", family: "f\(f)") }
        }
    }

    /// The contacts of `child`: a mix of phone numbers (E.164, some written with spaces and dashes), e-mail
    /// addresses and custom handles, most with names; about `knownRatio` of them marked known.
    public static func contacts(for child: String, seed: UInt64, count: Int, knownRatio: Double) -> [GeneratedContact] {
        var random = SeededGenerator(seed: seed, stream: "contacts/\(child)")
        var seen = Set<CommunicationHandle>()
        var contacts: [GeneratedContact] = []
        while contacts.count < count {
            let given = givenNames[Int(random.next() % UInt64(givenNames.count))]
            let family = familyNames[Int(random.next() % UInt64(familyNames.count))]
            let serial = random.next() % 10_000_000
            let handle: CommunicationHandle
            switch random.next() % 3 {
            case 0:
                let digits = String(format: "%07llu", serial)
                let value =
                    random.chance(0.3)
                    ? "+1 555-\(digits.prefix(3))-\(digits.dropFirst(3))"
                    : "+1555\(digits)"
                handle = CommunicationHandle(value: value, kind: .phoneNumber)
            case 1:
                let local = "\(given).\(family)".folding(options: .diacriticInsensitive, locale: nil).lowercased()
                handle = CommunicationHandle(value: "\(local).\(serial)@example.org", kind: .emailAddress)
            default:
                handle = CommunicationHandle(value: "user_\(String(serial, radix: 36))", kind: .custom)
            }
            guard seen.insert(handle.normalized).inserted else { continue }
            let name = random.chance(0.8) ? PersonName(givenName: given, familyName: family) : nil
            contacts.append(GeneratedContact(handle: handle, name: name, known: random.chance(knownRatio)))
        }
        return contacts
    }
}
