import AskClient
import AskRelayCluster
import Foundation

/// The processes a story runs against: an ``AskRelayCluster`` of its own (a real `askrelay-broker` and
/// `askrelay-limits`, fresh journal and store, the broker on an `ipc://` path that stays the same across a
/// restart), seeded with the story's limits state through the limits worker's admin message.
final class StoryProcesses: Sendable {
    let cluster: AskRelayCluster
    /// The story's own folder, where the processes' logs are copied when it ends.
    let logs: String

    private init(cluster: AskRelayCluster, logs: String) {
        self.cluster = cluster
        self.logs = logs
    }

    /// Starts the cluster, then applies each child's starting limits state (`limits.admin`, waiting until the
    /// limits store shows it).
    /// - Throws: ``ClusterError`` naming the process and its log when something does not start.
    static func start(_ story: Story, logs: String, binDirectory: String?) async throws -> StoryProcesses {
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true)
        var options = AskRelayCluster.Options(
            durability: AskRelayCluster.Durability(rawValue: story.broker.durability) ?? .batch,
            transport: .ipc,
            families: 1,
            guardiansPerFamily: 0,
            childrenPerFamily: 0
        )
        options.pendingWindow = story.broker.pendingWindow
        options.binDirectory = binDirectory
        options.folderPrefix = "askrelay-story"
        // A network step faults the link of a child, a guardian or the limits worker.
        options.links = story.usesLinks
        // Every process and center records its trace: a failing step's diagram is drawn from it.
        options.trace = true
        let cluster = try await AskRelayCluster.start(options)
        let processes = StoryProcesses(cluster: cluster, logs: logs)
        do {
            for (child, limits) in story.limits.sorted(by: { $0.key < $1.key }) {
                try await cluster.changeLimits(
                    LimitsAdminChange(
                        child: child,
                        limitsEnabled: limits.limitsEnabled,
                        contactSyncSetUp: limits.contactSyncSetUp,
                        eligible: limits.eligible,
                        addKnown: limits.knownHandles.isEmpty ? nil : limits.knownHandles
                    )
                )
            }
        } catch {
            await processes.stop()
            throw error
        }
        return processes
    }

    var endpoint: String { cluster.endpoint }

    /// Plays a fault step. - Returns: `nil` when it was done, else what went wrong.
    func fault(_ action: FaultAction, on name: StoryProcess) async -> String? {
        let process = name == .broker ? cluster.broker : cluster.limits
        do {
            return try await cluster.run { () throws -> String? in
                switch action {
                case .kill:
                    guard process.isRunning else { return "\(name.rawValue) is not running" }
                    try process.kill()
                case .stop:
                    guard process.isRunning else { return "\(name.rawValue) is not running" }
                    try process.suspend()
                case .cont:
                    guard process.isRunning else { return "\(name.rawValue) is not running" }
                    try process.resume()
                case .term:
                    guard process.isRunning else { return "\(name.rawValue) is not running" }
                    let status = try process.terminate(timeout: .seconds(15))
                    if !status.isSuccess { return "\(name.rawValue) exited \(status) after SIGTERM" }
                case .restart:
                    guard !process.isRunning else { return "\(name.rawValue) is still running; kill or term it first" }
                    try process.restart()
                }
                return nil
            }
        } catch {
            return "\(error)"
        }
    }

    /// Stops every process (SIGTERM, SIGKILL after 10 s), copies their logs and the trace folder (`trace/`) into the
    /// story's folder and removes the cluster's temporary folder.
    func stop() async {
        await cluster.shutdown(removingFolder: false)
        for log in cluster.logs {
            let target = (logs as NSString).appendingPathComponent("\(log.name).log")
            try? FileManager.default.removeItem(atPath: target)
            try? FileManager.default.copyItem(atPath: log.path, toPath: target)
        }
        if let trace = cluster.traceFolder {
            let target = (logs as NSString).appendingPathComponent("trace")
            try? FileManager.default.removeItem(atPath: target)
            try? FileManager.default.copyItem(atPath: trace, toPath: target)
        }
        try? FileManager.default.removeItem(atPath: cluster.folder)
    }
}
