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
/// - With the cluster's trace on (``AskRelayCluster/Options/trace``, which `.askRelayCluster()` turns on by
///   default), a failed test also gets `failed-flows.html` (attached, and written into the kept folder): the
///   sequence diagram of the question of each ``FlowWatch`` expectation that failed, the expectation marked as a
///   band from when it began waiting to when it failed; when none failed (an `#expect` did, or the body threw),
///   the flows with trace lines in the 2 s before the first failure, the failure a line at its time.
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
        let failures = FailedFlows()
        // Issues recorded by `#expect` do not throw: watch them with an issue handler around the body.
        let watcher = IssueHandlingTrait.compactMapIssues { issue in
            let now = Date()
            failures.add(FailedFlows.Failure(question: nil, began: now, ended: now, text: issue.description))
            return issue
        }
        var thrown: (any Error)?
        do {
            try await FailedFlows.$current.withValue(failures) {
                try await AskRelayCluster.$current.withValue(cluster) {
                    try await watcher.provideScope(for: test, testCase: testCase, performing: function)
                }
            }
        } catch {
            thrown = error
            let now = Date()
            failures.add(FailedFlows.Failure(question: nil, began: now, ended: now, text: "threw \(error)"))
        }
        let keep = !failures.all.isEmpty
        // Stopping the processes flushes their trace files.
        await cluster.shutdown(removingFolder: !keep)
        if keep {
            for log in cluster.logs {
                Attachment.record(log.text, named: "\(log.name).log")
            }
            if let folder = cluster.traceFolder,
                let page = FailedFlows.page(
                    test: test.displayName ?? test.name,
                    failures: failures.all,
                    trace: try? TraceFolder(path: folder)
                )
            {
                Attachment.record(page, named: FailedFlows.fileName)
                try? Data(page.utf8).write(to: URL(fileURLWithPath: cluster.folder + "/" + FailedFlows.fileName))
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
    ///   - trace: every process and center records its trace (``AskRelayCluster/Options/trace``), from which a failed
    ///     test's `failed-flows.html` is drawn.
    ///   - configure: changes to the remaining ``AskRelayCluster/Options``.
    public static func askRelayCluster(
        curve: Bool = false,
        durability: AskRelayCluster.Durability = .batch,
        transport: AskRelayCluster.Transport = .tcp,
        families: Int = 1,
        guardiansPerFamily: Int = 2,
        childrenPerFamily: Int = 1,
        links: Bool = false,
        trace: Bool = true,
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
        options.trace = trace
        configure(&options)
        return AskRelayClusterTrait(options: options)
    }
}
