import AskKeys
import AskProtocol
internal import ZeroMQ

/// Why a worker's configuration (CURVE key files, policy, think time, offline period or roster text) is not
/// acceptable.
public struct AgentConfigurationError: Error, CustomStringConvertible, Sendable, Hashable {
    /// One sentence naming the input and what to do.
    public let message: String
    /// An error with `message`.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The CURVE flags every worker takes, and how they become connection settings.
public enum CurveOptions {
    /// The addresses a key file says its principal may serve (empty when it does not say), for workers that host
    /// exactly what their key allows.
    public static func endpoints(keyFile: String?) throws -> [EndpointClaim] {
        guard let keyFile else { return [] }
        return try KeyFile.load(path: keyFile).endpoints ?? []
    }

    /// Reads both flags (both or neither).
    /// - Returns: `nil` without CURVE. - Throws: ``KeyFileError`` naming the flag and the problem.
    public static func load(keyFile: String?, brokerKey: String?) throws -> (keys: CurveKeyPair, serverKey: String)? {
        switch (keyFile, brokerKey) {
        case (nil, nil): return nil
        case (let keyFile?, let brokerKey?): return try CurveClientSettings.load(keyFile: keyFile, brokerKey: brokerKey)
        default: throw KeyFileError("CURVE needs both --curve-key and --broker-key")
        }
    }

    /// Checks, before connecting, what the broker would refuse at HELLO (`forbidden`, forever): the key file
    /// belongs to `role`, and lists every address the worker is about to claim (the broker's rule: a key without
    /// addresses serves `role/id` only). Without a key file, or with an older one that does not say, it passes.
    /// - Parameters:
    ///   - worker: the executable, for the message (`askrelay-parent`).
    ///   - hint: what to do when an address is not allowed (for example which flag to drop).
    /// - Throws: ``AgentConfigurationError`` naming the key file, its principal and the first address it may not serve.
    public static func check(
        keyFile: String?,
        role: SessionRole,
        worker: String,
        claims: [EndpointClaim],
        hint: String
    ) throws(AgentConfigurationError) {
        guard let keyFile else { return }
        let file: KeyFile
        do { file = try KeyFile.load(path: keyFile) } catch {
            throw AgentConfigurationError("--curve-key \(keyFile): \(error)")
        }
        guard file.role == role.rawValue else {
            throw AgentConfigurationError(
                "--curve-key \(keyFile) is the key of a \(file.role) ('\(file.id)'), not of a \(role.rawValue): "
                    + "\(worker) needs a \(role.rawValue) key (askrelay keys generate writes \(keyNames(role)))"
            )
        }
        guard let listed = file.endpoints else { return }
        let allowed =
            listed.isEmpty
            ? [role.addressPrefix + file.id: file.family]
            : Dictionary(listed.map { ($0.address, $0.family) }, uniquingKeysWith: { first, _ in first })
        for claim in claims {
            guard let family = allowed[claim.address] else {
                throw AgentConfigurationError(
                    "--curve-key \(keyFile) ('\(file.id)') may serve \(allowed.count) address(es), "
                        + "not '\(claim.address)'; the broker would refuse this worker (forbidden): \(hint)"
                )
            }
            guard family == claim.family else {
                throw AgentConfigurationError(
                    "--curve-key \(keyFile) ('\(file.id)') serves '\(claim.address)' in family '\(family ?? "none")', "
                        + "not '\(claim.family ?? "none")': \(hint)"
                )
            }
        }
    }

    static func keyNames(_ role: SessionRole) -> String {
        switch role {
        case .guardian: "parent-<n>.key or guardian-<id>.key for parent workers"
        case .child: "child-<n>.key or child-<id>.key for child workers"
        case .limits: "limits-<n>.key for limits workers"
        case .observer: "observer-<n>.key for observers"
        case .echo, .client: "no keys for load-test roles"
        }
    }
}
