import AskProtocol
import Foundation
import ZeroMQ

/// The keys of a deployment: the broker's pair, one pair per principal, and `principals.json`.
public struct KeySet: Sendable {
    public var broker: KeyFile
    public var principals: PrincipalsFile
    /// Key files by file name (`guardian-g1-1.key`, `child-host-2.key`, ...).
    public var keyFiles: [String: KeyFile]

    /// File names inside a key folder.
    public static let brokerKeyFile = "broker.key"
    public static let brokerPublicFile = "broker.public"
    public static let principalsFileName = "principals.json"

    /// Writes everything into `directory` (created mode 0700): secret key files mode 0600, `broker.public` and
    /// `principals.json` readable.
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(
            atPath: directory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        try broker.save(path: directory + "/" + Self.brokerKeyFile)
        try (broker.publicKey + "\n").write(
            toFile: directory + "/" + Self.brokerPublicFile,
            atomically: true,
            encoding: .utf8
        )
        try principals.save(path: directory + "/" + Self.principalsFileName)
        for (name, file) in keyFiles { try file.save(path: directory + "/" + name) }
    }
}

/// Generates the keys of a deployment whose ids follow the generated rosters: families `f1...fN`, guardians
/// `<guardianPrefix><f>-<g>`, children `<childPrefix><f>-<c>` (docs/workers.md).
public enum KeyGenerator {
    public struct Plan: Sendable {
        public var families = 0
        public var guardiansPerFamily = 0
        public var childrenPerFamily = 0
        public var guardianPrefix = "g"
        public var childPrefix = "c"
        /// Limits workers: keys `limits-<i>` serving `limits/limits-<i>`.
        public var limits = 1
        /// Observers: keys `observer-<i>`.
        public var observers = 1
        /// When > 0, one key per parent process instead of per guardian: host `i` serves the guardians of every
        /// family `f` with `(f - 1) % parentHosts == i - 1`.
        public var parentHosts = 0
        /// The same for child processes.
        public var childHosts = 0

        public init() {}
    }

    public static func generate(_ plan: Plan) throws -> KeySet {
        var keyFiles: [String: KeyFile] = [:]
        var entries: [PrincipalEntry] = []
        func add(role: SessionRole, id: String, family: String?, endpoints: [EndpointClaim], file: String) throws {
            let keys = try CurveKeyPair.generate()
            let entry = PrincipalEntry(
                publicKey: keys.publicKey,
                role: role,
                id: id,
                family: family,
                endpoints: endpoints
            )
            keyFiles[file] = KeyFile(
                keys: keys,
                role: role.rawValue,
                id: id,
                family: family,
                endpoints: entry.allowedEndpoints
            )
            entries.append(entry)
        }
        let families = plan.families > 0 ? Array(1...plan.families) : []
        let guardians = families.flatMap { f in
            (plan.guardiansPerFamily > 0 ? Array(1...plan.guardiansPerFamily) : []).map {
                (f, "\(plan.guardianPrefix)\(f)-\($0)")
            }
        }
        let children = families.flatMap { f in
            (plan.childrenPerFamily > 0 ? Array(1...plan.childrenPerFamily) : []).map {
                (f, "\(plan.childPrefix)\(f)-\($0)")
            }
        }
        if plan.parentHosts > 0 {
            for host in 1...plan.parentHosts {
                let mine = guardians.filter { ($0.0 - 1) % plan.parentHosts == host - 1 }
                try add(
                    role: .guardian,
                    id: "parent-\(host)",
                    family: nil,
                    endpoints: mine.map { EndpointClaim(address: "guardian/\($0.1)", family: "f\($0.0)") },
                    file: "parent-\(host).key"
                )
            }
        } else {
            for (f, id) in guardians {
                try add(role: .guardian, id: id, family: "f\(f)", endpoints: [], file: "guardian-\(id).key")
            }
        }
        if plan.childHosts > 0 {
            for host in 1...plan.childHosts {
                let mine = children.filter { ($0.0 - 1) % plan.childHosts == host - 1 }
                try add(
                    role: .child,
                    id: "child-\(host)",
                    family: nil,
                    endpoints: mine.map { EndpointClaim(address: "child/\($0.1)", family: "f\($0.0)") },
                    file: "child-\(host).key"
                )
            }
        } else {
            for (f, id) in children {
                try add(role: .child, id: id, family: "f\(f)", endpoints: [], file: "child-\(id).key")
            }
        }
        for index in (plan.limits > 0 ? Array(1...plan.limits) : []) {
            try add(role: .limits, id: "limits-\(index)", family: nil, endpoints: [], file: "limits-\(index).key")
        }
        for index in (plan.observers > 0 ? Array(1...plan.observers) : []) {
            try add(role: .observer, id: "observer-\(index)", family: nil, endpoints: [], file: "observer-\(index).key")
        }
        let broker = KeyFile(keys: try CurveKeyPair.generate(), role: "broker", id: "broker")
        return KeySet(broker: broker, principals: PrincipalsFile(principals: entries), keyFiles: keyFiles)
    }
}

/// How a worker finds its CURVE settings: its own key file and the broker's public key.
public enum CurveClientSettings {
    /// Reads `--curve-key FILE` and `--broker-key FILE` (the broker's `broker.public`, or a key file of
    /// `askrelay keys generate`).
    public static func load(keyFile: String, brokerKey: String) throws -> (keys: CurveKeyPair, serverKey: String) {
        let keys = try KeyFile.load(path: keyFile).keyPair
        return (keys, try brokerPublicKey(file: brokerKey))
    }

    /// The broker's public key from the file at `path`: 40 characters of Z85 (`broker.public`), or a key file's
    /// public key. Always a file: a key given as the value itself could not be told from a path of 40 characters
    /// of the Z85 alphabet (`/tmp/tmp.XXXXXXXXXX/s/keys/broker.public` is one).
    public static func brokerPublicKey(file path: String) throws -> String {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), !isFolder.boolValue,
            let data = FileManager.default.contents(atPath: path)
        else {
            throw KeyFileError(
                "--broker-key \(path): no readable file there; give the broker's public key file "
                    + "(keys/broker.public from askrelay keys generate)"
            )
        }
        if let file = try? JSONDecoder().decode(KeyFile.self, from: data) { return file.publicKey }
        let content = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard content.utf8.count == 40, (try? Z85.decode(content)) != nil else {
            throw KeyFileError(
                "--broker-key \(path): holds no public key (40 characters of Z85, as in keys/broker.public, "
                    + "or a key file of askrelay keys generate)"
            )
        }
        return content
    }
}
