import AskProtocol
import AskModel
import Foundation
import ZeroMQ

/// Who an authenticated CURVE key is, and which addresses it may serve.
///
/// A principal is one key. A worker process hosting many children or guardians uses one key whose principal lists
/// every address it may claim; a single child or guardian's principal lists one.
public struct PrincipalEntry: Codable, Sendable, Hashable {
    /// The CURVE public key, 40 characters of Z85.
    public var publicKey: String
    public var role: SessionRole
    /// A name for the key (the worker or person), for logs and `keys revoke --id`.
    public var id: String
    /// The family, for a single child or guardian.
    public var family: String?
    /// The addresses this key may claim in HELLO, each with its family. Empty means just `role/id` with `family`.
    public var endpoints: [EndpointClaim]
    /// A revoked key fails the CURVE handshake, and its live sessions are dropped.
    public var revoked: Bool

    public init(
        publicKey: String,
        role: SessionRole,
        id: String,
        family: String? = nil,
        endpoints: [EndpointClaim] = [],
        revoked: Bool = false
    ) {
        self.publicKey = publicKey
        self.role = role
        self.id = id
        self.family = family
        self.endpoints = endpoints
        self.revoked = revoked
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        publicKey = try container.decode(String.self, forKey: .publicKey)
        role = try container.decode(SessionRole.self, forKey: .role)
        id = try container.decode(String.self, forKey: .id)
        family = try container.decodeIfPresent(String.self, forKey: .family)
        endpoints = try container.decodeIfPresent([EndpointClaim].self, forKey: .endpoints) ?? []
        revoked = try container.decodeIfPresent(Bool.self, forKey: .revoked) ?? false
    }

    /// The claims this key may make.
    public var allowedEndpoints: [EndpointClaim] {
        endpoints.isEmpty ? [EndpointClaim(address: role.addressPrefix + id, family: family)] : endpoints
    }

    /// Why `hello` is not allowed for this key, or `nil` when it is.
    public func refusal(of hello: Hello) -> String? {
        if revoked { return "the key of '\(id)' is revoked" }
        guard hello.role == role else {
            return "the key of '\(id)' is a \(role.rawValue) key, not \(hello.role.rawValue)"
        }
        let allowed = Dictionary(
            allowedEndpoints.map { ($0.address, $0.family) },
            uniquingKeysWith: { first, _ in first }
        )
        for claim in hello.endpoints {
            guard let family = allowed[claim.address] else {
                return "the key of '\(id)' may not serve '\(claim.address)'"
            }
            guard family == claim.family else {
                return
                    "the key of '\(id)' serves '\(claim.address)' in family '\(family ?? "none")', not '\(claim.family ?? "none")'"
            }
        }
        return nil
    }
}

/// `principals.json`: every key the broker accepts.
public struct PrincipalsFile: Codable, Sendable, Hashable {
    public var version: Int
    public var principals: [PrincipalEntry]

    public init(principals: [PrincipalEntry] = []) {
        version = 1
        self.principals = principals
    }

    /// Reads and checks a principals file.
    /// - Throws: ``KeyFileError`` naming the file, the place (a line and column, or a field) and what to do.
    public static func load(path: String) throws -> PrincipalsFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyFileError("cannot read principals file \(path)")
        }
        // A file a person edits (or one cut short by a full disk): its syntax strictly first, for a line and column.
        let remedy = "fix the file or write it again with 'askrelay keys generate'"
        do { try StrictJSONSyntax.check(data) } catch let failure as StrictJSONSyntax.Failure {
            throw KeyFileError("principals file \(path): \(failure); \(remedy)")
        }
        let file: PrincipalsFile
        do { file = try JSONDecoder().decode(PrincipalsFile.self, from: data) } catch {
            throw KeyFileError("principals file \(path): \(describeDecoding(error)); \(remedy)")
        }
        guard file.version == 1 else {
            throw KeyFileError("principals file \(path) has version \(file.version); this build reads version 1")
        }
        var seen: Set<String> = []
        for entry in file.principals {
            guard entry.publicKey.utf8.count == 40, (try? Z85.decode(entry.publicKey)) != nil else {
                throw KeyFileError(
                    "principals file \(path): '\(entry.id)' has a public key that is not 40 characters of Z85"
                )
            }
            guard seen.insert(entry.publicKey).inserted else {
                throw KeyFileError("principals file \(path): the key of '\(entry.id)' is listed twice")
            }
        }
        return file
    }

    /// Writes the file atomically, mode 0644 (public keys only).
    public func save(path: String) throws {
        let encoder = ReportJSON.encoder()
        try encoder.encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// Live (not revoked) principals by public key.
    public var byKey: [String: PrincipalEntry] {
        Dictionary(principals.map { ($0.publicKey, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// A key file: one principal's key pair (or the broker's), as JSON, mode 0600.
public struct KeyFile: Codable, Sendable, Hashable {
    public var publicKey: String
    public var secretKey: String
    public var role: String
    public var id: String
    public var family: String?
    /// The addresses the key's principal may serve, for a worker that hosts exactly what its key allows
    /// (`askrelay-parent` / `askrelay-child` with only `--curve-key`). Absent in older files.
    public var endpoints: [EndpointClaim]?

    public init(keys: CurveKeyPair, role: String, id: String, family: String? = nil, endpoints: [EndpointClaim]? = nil)
    {
        publicKey = keys.publicKey
        secretKey = keys.secretKey
        self.role = role
        self.id = id
        self.family = family
        self.endpoints = endpoints
    }

    public var keyPair: CurveKeyPair { CurveKeyPair(publicKey: publicKey, secretKey: secretKey) }

    /// Reads a key file and checks that its public key belongs to its secret key.
    public static func load(path: String) throws -> KeyFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyFileError("cannot read key file \(path)")
        }
        let remedy = "fix the file or write it again with 'askrelay keys generate' or 'askrelay keys add'"
        do { try StrictJSONSyntax.check(data) } catch let failure as StrictJSONSyntax.Failure {
            throw KeyFileError("key file \(path): \(failure); \(remedy)")
        }
        let file: KeyFile
        do { file = try JSONDecoder().decode(KeyFile.self, from: data) } catch {
            throw KeyFileError("key file \(path): \(describeDecoding(error)); \(remedy)")
        }
        guard let derived = try? CurveKeyPair(secretKey: file.secretKey), derived.publicKey == file.publicKey else {
            throw KeyFileError("key file \(path): the public key does not belong to the secret key")
        }
        return file
    }

    public func save(path: String) throws {
        let encoder = ReportJSON.encoder(escapingSlashes: true)
        let url = URL(fileURLWithPath: path)
        try encoder.encode(self).write(to: url, options: .atomic)
        chmod(path, 0o600)
    }
}

public struct KeyFileError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
