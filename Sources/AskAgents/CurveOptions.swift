import AskProtocol
import ZeroMQ

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
}
