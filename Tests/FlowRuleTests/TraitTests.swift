import AskRelayTesting
import Foundation
import Synchronization
import Testing

/// The `.askRelayCluster()` trait itself: a cluster around the body, logs kept and attached when it fails.
@Suite("AskRelayTesting trait", .serialized)
struct TraitTests {
    /// Runs `body` inside the trait's scope, as Swift Testing would for a test, and returns the cluster's folder.
    func clusterFolder(of trait: AskRelayClusterTrait, running body: @escaping @Sendable () async throws -> Void)
        async throws -> String
    {
        let folder = Mutex<String?>(nil)
        try await trait.provideScope(for: try #require(Test.current), testCase: nil) {
            folder.withLock { $0 = AskRelayCluster.current?.folder }
            try await body()
        }
        return try #require(folder.withLock { $0 })
    }

    @Test("a test that passes gets a running cluster, and its folder is removed afterwards")
    func passingTest() async throws {
        let folder = try await clusterFolder(of: .askRelayCluster()) {
            let cluster = try #require(AskRelayCluster.current)
            #expect(cluster.broker.isRunning && cluster.limits.isRunning)
        }
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    @Test("a test that records an issue keeps its cluster's folder with every process's log (and attaches them)")
    func failingTest() async throws {
        let kept = Mutex<String?>(nil)
        await withKnownIssue("the body fails on purpose") {
            let folder = try await clusterFolder(of: .askRelayCluster()) { Issue.record("deliberate failure") }
            kept.withLock { $0 = folder }
        }
        let folder = try #require(kept.withLock { $0 })
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let log = try String(contentsOfFile: folder + "/broker.log", encoding: .utf8)
        #expect(log.contains("broker ready"))
        #expect(FileManager.default.fileExists(atPath: folder + "/limits.log"))
    }

    @Test("a failing test's kept folder is named once; a passing test names none")
    func keptFolderNamedOnce() async throws {
        let lines = Mutex<[String]>([])
        let trait = AskRelayClusterTrait(options: .init()) { line in lines.withLock { $0.append(line) } }
        let kept = Mutex<String?>(nil)
        await withKnownIssue("the body fails on purpose") {
            let folder = try await clusterFolder(of: trait) { Issue.record("deliberate failure") }
            kept.withLock { $0 = folder }
        }
        let folder = try #require(kept.withLock { $0 })
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let said = lines.withLock { $0 }
        #expect(said.count == 1)
        #expect(said.first?.hasSuffix("its cluster's folder is kept: \(folder)") == true, "\(said)")
        #expect(said.first?.contains("keptFolderNamedOnce") == true || said.first?.contains("named once") == true)
        _ = try await clusterFolder(of: trait) {}
        #expect(lines.withLock { $0.count } == 1)
    }

    @Test("a test that throws keeps the folder too, and the error reaches the test")
    func throwingTest() async throws {
        struct Deliberate: Error {}
        let kept = Mutex<String?>(nil)
        await #expect(throws: Deliberate.self) {
            _ = try await clusterFolder(of: .askRelayCluster()) {
                kept.withLock { $0 = AskRelayCluster.current?.folder }
                throw Deliberate()
            }
        }
        let folder = try #require(kept.withLock { $0 })
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(FileManager.default.fileExists(atPath: folder + "/broker.log"))
    }

    @Test("a cluster that cannot start fails the test with the reason, and the body does not run")
    func clusterThatCannotStart() async throws {
        let ran = Mutex(false)
        let trait = AskRelayClusterTrait.askRelayCluster { $0.binDirectory = "/nonexistent-askrelay-bin" }
        let error = await #expect(throws: ClusterError.self) {
            try await trait.provideScope(for: try #require(Test.current), testCase: nil) {
                ran.withLock { $0 = true }
            }
        }
        #expect(error?.description.hasPrefix("askrelay-broker not found in /nonexistent-askrelay-bin;") == true)
        #expect(!ran.withLock { $0 })
    }
}
