import AskModel
import Foundation

/// The hash every rendezvous choice of AskRelay uses: the shard of a family over a broker list, and the limits
/// worker a broker sticks a child to. Specified to the bit (docs/scaling.md) so that a worker written in another
/// language computes the same choice.
public enum Rendezvous {
    /// 64-bit FNV-1a over `bytes`, from the offset basis `0xcbf29ce484222325` with the prime `0x100000001b3`.
    public static func fnv1a64<Bytes: Sequence>(_ bytes: Bytes, from start: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64
    where Bytes.Element == UInt8 {
        var value = start
        for byte in bytes { value = (value ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return value
    }

    /// 64-bit FNV-1a over the UTF-8 bytes of `text`.
    public static func fnv1a64(_ text: String) -> UInt64 { fnv1a64(text.utf8) }

    /// The SplitMix64 output for the state `x`: add the gamma `0x9e3779b97f4a7c15`, then the finaliser
    /// (xor-shift 30, × `0xbf58476d1ce4e5b9`, xor-shift 27, × `0x94d049bb133111eb`, xor-shift 31).
    public static func mix64(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    /// The score of broker `name` for family `family`: `mix64(fnv1a64(UTF-8(family) ‖ 0x00 ‖ UTF-8(name)))`.
    public static func score(family: String, name: String) -> UInt64 {
        let prefix = fnv1a64(CollectionOfOne(0), from: fnv1a64(family))
        return mix64(fnv1a64(name.utf8, from: prefix))
    }
}

/// One broker of a ``BrokerList``: its stable name (hashed) and its endpoint (not hashed: a broker can move host).
public struct BrokerEntry: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    public let endpoint: String

    public init(name: String, endpoint: String) {
        self.name = name
        self.endpoint = endpoint
    }

    public var description: String { "\(name)=\(endpoint)" }
}

/// A ``BrokerList`` that cannot be used, with the one thing wrong in words for an operator.
public struct BrokerListError: Error, Sendable, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The static, ordered list of named brokers every worker of a deployment is given (`--brokers b0=URL,b1=URL`),
/// and the shard of a family over it: rendezvous (highest random weight) hashing of the family and each broker's
/// *name*, ties to the lower name (docs/scaling.md).
public struct BrokerList: Sendable, Hashable, CustomStringConvertible {
    public let entries: [BrokerEntry]

    /// - Throws: ``BrokerListError`` for an empty list, a duplicate name or endpoint, or a name that is not an id.
    public init(_ entries: [BrokerEntry]) throws(BrokerListError) {
        guard !entries.isEmpty else { throw BrokerListError("the broker list is empty: give NAME=URL[,NAME=URL...]") }
        var names: Set<String> = []
        var endpoints: Set<String> = []
        for entry in entries {
            guard Address.isValidID(entry.name) else {
                throw BrokerListError(
                    "broker name '\(entry.name)' is not an id (1-64 of A-Z a-z 0-9 . _ -), in '\(entry)'"
                )
            }
            guard !entry.endpoint.isEmpty else { throw BrokerListError("broker '\(entry.name)' has no endpoint") }
            guard names.insert(entry.name).inserted else {
                throw BrokerListError("broker name '\(entry.name)' is listed twice: every broker needs its own name")
            }
            guard endpoints.insert(entry.endpoint).inserted else {
                throw BrokerListError("endpoint '\(entry.endpoint)' is listed twice: every broker needs its own")
            }
        }
        self.entries = entries
    }

    /// Parses `b0=tcp://…,b1=tcp://…` (order kept; spaces around entries ignored). `endpointProblem` says why an
    /// endpoint is unusable (a command line passes its endpoint syntax check), `nil` when it is fine.
    /// - Throws: ``BrokerListError`` naming the entry at fault (an entry without `=` included).
    public init(parsing text: String, endpointProblem: (String) -> String? = { _ in nil }) throws(BrokerListError) {
        var entries: [BrokerEntry] = []
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        for part in parts {
            let item = part.trimmingCharacters(in: .whitespaces)
            if item.isEmpty && parts.count == 1 { break }
            guard !item.isEmpty else {
                throw BrokerListError("the broker list '\(text)' has an empty entry: remove the extra ','")
            }
            guard let equals = item.firstIndex(of: "=") else {
                throw BrokerListError(
                    "broker list entry '\(item)' has no '=': give NAME=URL, for example b0=tcp://10.0.0.10:5555"
                )
            }
            let endpoint = String(item[item.index(after: equals)...])
            if !endpoint.isEmpty, let problem = endpointProblem(endpoint) {
                throw BrokerListError("broker '\(item[..<equals])': \(problem)")
            }
            entries.append(BrokerEntry(name: String(item[..<equals]), endpoint: endpoint))
        }
        try self.init(entries)
    }

    /// A list of one broker (`--broker URL`): every family is its shard.
    public init(single endpoint: String, name: String = "b0") {
        entries = [BrokerEntry(name: name, endpoint: endpoint)]
    }

    /// The broker named `name`.
    public func entry(named name: String) -> BrokerEntry? { entries.first { $0.name == name } }

    /// The broker that serves `family`: the highest ``Rendezvous/score(family:name:)``, ties to the lower name.
    public func shard(family: String) -> BrokerEntry {
        var best = entries[0]
        var bestScore = Rendezvous.score(family: family, name: best.name)
        for entry in entries.dropFirst() {
            let score = Rendezvous.score(family: family, name: entry.name)
            if score > bestScore || (score == bestScore && entry.name < best.name) {
                best = entry
                bestScore = score
            }
        }
        return best
    }

    /// `b0=URL,b1=URL`, the form ``init(parsing:)`` reads.
    public var description: String { entries.map(\.description).joined(separator: ",") }
}
