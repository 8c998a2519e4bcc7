import AskKeys
import AskProtocol
import Foundation
import ZeroMQ

/// CURVE for a simulation: one key for the broker and one per worker process, each principal listing exactly the
/// addresses that process hosts, so the simulation runs with the same authorization a deployment has.
enum SimulationKeys {
    /// Writes the keys into `directory` and returns the extra arguments of each process by name
    /// (`broker`, `limits`, `parent-<i>`, `child-<i>`).
    static func write(plan: WorkerPlan, scenario: Scenario, directory: String) throws -> [String: [String]] {
        try FileManager.default.createDirectory(
            atPath: directory,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let brokerKeys = try CurveKeyPair.generate()
        let brokerFile = directory + "/" + KeySet.brokerKeyFile
        let publicFile = directory + "/" + KeySet.brokerPublicFile
        try KeyFile(keys: brokerKeys, role: "broker", id: "broker").save(path: brokerFile)
        try (brokerKeys.publicKey + "\n").write(toFile: publicFile, atomically: true, encoding: .utf8)
        var principals: [PrincipalEntry] = []
        var arguments: [String: [String]] = [:]
        func add(_ process: String, role: SessionRole, id: String, endpoints: [EndpointClaim]) throws {
            let keys = try CurveKeyPair.generate()
            let path = directory + "/\(process).key"
            try KeyFile(keys: keys, role: role.rawValue, id: id).save(path: path)
            principals.append(PrincipalEntry(publicKey: keys.publicKey, role: role, id: id, endpoints: endpoints))
            arguments[process] = ["--curve-key", path, "--broker-key", publicFile]
        }
        try add("limits", role: .limits, id: "limits-1", endpoints: [])
        for index in 1...scenario.parentProcesses {
            try add(
                "parent-\(index)",
                role: .guardian,
                id: "parent-\(index)",
                endpoints: plan.roster(index).map { EndpointClaim(address: "guardian/\($0.id)", family: $0.family) }
            )
        }
        for index in 1...scenario.childProcesses {
            try add(
                "child-\(index)",
                role: .child,
                id: "child-\(index)",
                endpoints: plan.childIDs(process: index).map {
                    EndpointClaim(address: "child/\($0.id)", family: $0.family)
                }
            )
        }
        let principalsFile = directory + "/" + KeySet.principalsFileName
        try PrincipalsFile(principals: principals).save(path: principalsFile)
        arguments["broker"] = ["--curve-secret-file", brokerFile, "--principals", principalsFile]
        return arguments
    }
}
