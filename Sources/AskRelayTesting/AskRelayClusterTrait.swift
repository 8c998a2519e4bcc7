@_exported import AskClient
@_exported import AskModel
@_exported import AskRelayCluster
import Foundation
import Synchronization
import Testing

/// A Swift Testing trait that gives a test, or a whole suite, a cluster of real AskRelay processes
/// (``AskRelayCluster``), reachable in the test as ``AskRelayCluster/current``:
///
/// ```swift
/// @Test(.askRelayCluster(curve: true))
/// func limitsOff() async throws {
///     let cluster = try #require(AskRelayCluster.current)
///     ...
/// }
/// ```
///
/// Contracts:
/// - The cluster starts before the test (or the suite's first test) runs and stops after it (or the suite's
///   last test) ended, however it ended; a cluster that cannot start fails the test with the reason.
/// - When the test recorded an issue or threw, each process's log (stdout, then stderr) and the clients' log are
///   attached to it with `Attachment.record`, named `<process>.log`, so a CI page shows them; the cluster's
///   folder is then kept instead of removed, and its path is printed once, on stderr:
///   `AskRelayTesting: "<test>" failed; its cluster's folder is kept: <path>` (``reportKeptFolder``).
/// - On a suite it applies to the suite as a whole (one cluster shared by its tests, which run one at a time
///   then only if the suite is `.serialized`); put it on each `@Test` for a cluster per test.
public struct AskRelayClusterTrait: TestTrait, SuiteTrait, TestScoping {
    /// What the cluster starts with.
    public let options: AskRelayCluster.Options
    /// Where the line naming a failed test's kept folder goes: stderr, unless a test of the trait itself catches it.
    public let reportKeptFolder: @Sendable (String) -> Void

    /// A trait that starts a cluster with `options` around the test or suite; a failed test's kept-folder line goes
    /// to stderr.
    public init(options: AskRelayCluster.Options) {
        self.init(options: options) { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }

    /// A trait whose kept-folder line goes to `reportKeptFolder` instead of stderr.
    public init(options: AskRelayCluster.Options, reportKeptFolder: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.reportKeptFolder = reportKeptFolder
    }

    public var isRecursive: Bool { false }

    public func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        let cluster = try await AskRelayCluster.start(options)
        let failed = Mutex(false)
        // Issues recorded by `#expect` do not throw: watch them with an issue handler around the body.
        let watcher = IssueHandlingTrait.compactMapIssues { issue in
            failed.withLock { $0 = true }
            return issue
        }
        var thrown: (any Error)?
        do {
            try await AskRelayCluster.$current.withValue(cluster) {
                try await watcher.provideScope(for: test, testCase: testCase, performing: function)
            }
        } catch {
            thrown = error
        }
        let keep = thrown != nil || failed.withLock { $0 }
        await cluster.shutdown(removingFolder: !keep)
        if keep {
            for log in cluster.logs {
                Attachment.record(log.text, named: "\(log.name).log")
            }
            reportKeptFolder(
                "AskRelayTesting: \"\(test.displayName ?? test.name)\" failed; its cluster's folder is kept: \(cluster.folder)"
            )
        }
        if let thrown { throw thrown }
    }
}

extension Trait where Self == AskRelayClusterTrait {
    /// A cluster of real AskRelay processes around the test or suite; see ``AskRelayClusterTrait``.
    /// - Parameters:
    ///   - curve: CURVE keys for every process and client.
    ///   - durability: the broker's journal mode.
    ///   - transport: tcp on a port the OS picks, or an ipc path in the cluster's folder.
    ///   - families, guardiansPerFamily, childrenPerFamily: the roster (`f1`, `g1-1`, `c1-1`, ...).
    ///   - links: a ``FaultLink`` between the broker and each worker process and center (``AskRelayCluster/Options/links``).
    ///   - configure: changes to the remaining ``AskRelayCluster/Options``.
    public static func askRelayCluster(
        curve: Bool = false,
        durability: AskRelayCluster.Durability = .batch,
        transport: AskRelayCluster.Transport = .tcp,
        families: Int = 1,
        guardiansPerFamily: Int = 2,
        childrenPerFamily: Int = 1,
        links: Bool = false,
        configure: (inout AskRelayCluster.Options) -> Void = { _ in }
    ) -> Self {
        var options = AskRelayCluster.Options(
            curve: curve,
            durability: durability,
            transport: transport,
            families: families,
            guardiansPerFamily: guardiansPerFamily,
            childrenPerFamily: childrenPerFamily
        )
        options.links = links
        configure(&options)
        return AskRelayClusterTrait(options: options)
    }
}
