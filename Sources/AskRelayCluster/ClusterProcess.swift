@_exported import AskRelayProcesses

/// One process of a cluster (the broker, the limits worker, a parent or child worker): a ``RelayProcess`` of the
/// cluster's supervisor, in the cluster's process group, with its stderr in `<folder>/<name>.log` and its stdout kept
/// line by line. Its calls block their thread until their effect is visible; the `async` cluster calls run them off
/// the cooperative pool (``AskRelayCluster/run(_:)``).
public typealias ClusterProcess = RelayProcess

/// One process's log, as ``AskRelayCluster/logs`` returns them.
public struct ClusterLog: Sendable, Hashable {
    /// The process's name (`broker`, `limits`, ...).
    public let name: String
    /// The stderr log file.
    public let path: String
    /// Stdout lines, then the stderr log.
    public let text: String
}
