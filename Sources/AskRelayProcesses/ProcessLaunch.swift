import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What to start: an executable, its arguments and environment, where its stderr goes and the process group it joins.
/// The one launch description that ``ProcessSupervisor/start(_:)``, ``RelayProcess/init(_:supervisor:readyTimeout:)``
/// and ``SupervisedProcess`` take (their labelled forms build one).
public struct ProcessLaunch: Sendable, Hashable {
    /// The process's name in messages and log lines.
    public var name: String
    /// The path of the program.
    public var executable: String
    /// Its arguments (without the program itself).
    public var arguments: [String]
    /// Added to ``ProcessSupervisor/inheritedEnvironment(_:)``; the whole environment with ``replacingEnvironment``.
    public var environment: [String: String]
    /// ``environment`` is the whole environment, not additions to ours.
    public var replacingEnvironment: Bool
    /// Where its stderr goes (appended); `/dev/stderr`: copied to ours; `nil`: dropped (its last lines are still kept
    /// for error messages).
    public var logPath: String?
    /// The process group every run joins (a ``ProcessGroupGuard``'s); `nil`: ours.
    public var processGroup: pid_t?

    /// - Parameter name: default: the executable's file name.
    public init(
        name: String? = nil,
        executable: String,
        arguments: [String] = [],
        environment: [String: String] = [:],
        replacingEnvironment: Bool = false,
        logPath: String? = nil,
        processGroup: pid_t? = nil
    ) {
        self.name = name ?? (executable as NSString).lastPathComponent
        self.executable = executable
        self.arguments = arguments
        self.environment = environment
        self.replacingEnvironment = replacingEnvironment
        self.logPath = logPath
        self.processGroup = processGroup
    }

    /// The environment a run starts with: ``environment`` over ours without `ASKRELAY_*`, or ``environment`` alone.
    public var startingEnvironment: [String: String] {
        replacingEnvironment
            ? environment : ProcessSupervisor.inheritedEnvironment().merging(environment) { _, added in added }
    }
}
