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

    /// Runs `body` in the trait's scope as a test that fails on purpose. - Returns: the kept folder's
    /// `failed-flows.html` (`nil` when there is none) and the id `body` returns; the folder is removed.
    func failedFlows(
        of trait: AskRelayClusterTrait,
        _ body: @escaping @Sendable (FlowWatch) async throws -> UUID
    ) async throws -> (page: String?, question: UUID) {
        let kept = Mutex<(String, UUID)?>(nil)
        await withKnownIssue("the body fails on purpose") {
            _ = try await clusterFolder(of: trait) {
                let cluster = try currentCluster()
                try await withClients(cluster) { children, guardians in
                    let question = try await body(FlowWatch(children: children, guardians: guardians))
                    kept.withLock { $0 = (cluster.folder, question) }
                }
            }
        }
        let (folder, question) = try #require(kept.withLock { $0 })
        defer { try? FileManager.default.removeItem(atPath: folder) }
        return (try? String(contentsOfFile: folder + "/failed-flows.html", encoding: .utf8), question)
    }

    @Test("a failed FlowWatch expectation: failed-flows.html draws its question's flow with the expectation's band")
    func failedExpectationDiagram() async throws {
        let (page, question) = try await failedFlows(of: .askRelayCluster()) { watch in
            let question = PermissionQuestion(handle: friend)
            try await watch.children.child("c1-1").ask(question)
            try await watch.children.child("c1-1").send(question.id)
            let delivered = try await watch.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
            try await delivered.answer(PermissionChoice.decline.id)
            _ = try? await watch.expectResponse(to: question.id, choice: .approve, within: .seconds(10))
            return question.id
        }
        let html = try #require(page, "no failed-flows.html in the kept folder")
        let id = question.uuidString.lowercased()
        #expect(html.contains("<figcaption>question \(id)</figcaption>"), "\(html)")
        #expect(html.components(separatedBy: "<svg ").count == 2, "one diagram: \(html)")
        for lane in ["askcenter-1", "broker", "limits", "guardiancenter-1"] {
            #expect(html.contains("data-process=\"\(lane)\""), "no lane \(lane)")
        }
        #expect(html.contains(">response</text>"), "no response hop")
        let expected =
            "expected a response to \(question.uuidString) with choice askrelay.approve; got choice askrelay.decline"
        #expect(html.contains("<g class=\"mark\"><title>\(expected)</title>"), "\(html)")
        #expect(html.contains("<p class=\"step\" id=\"failed-step\">\(expected)</p>"))
    }

    @Test("an issue about no question: the flows just before it, the issue a line; without trace, no page")
    func failedIssueDiagram() async throws {
        let body: @Sendable (FlowWatch) async throws -> UUID = { watch in
            let question = PermissionQuestion(handle: friend)
            try await watch.children.child("c1-1").ask(question)
            try await watch.children.child("c1-1").send(question.id)
            try await watch.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
            Issue.record("deliberate failure after the question")
            return question.id
        }
        let (page, question) = try await failedFlows(of: .askRelayCluster(), body)
        let html = try #require(page, "no failed-flows.html in the kept folder")
        #expect(html.contains("a flow near the failure (\(question.uuidString.lowercased()))"), "\(html)")
        #expect(html.contains("deliberate failure after the question</title>"), "\(html)")
        let (untraced, _) = try await failedFlows(of: .askRelayCluster(trace: false), body)
        #expect(untraced == nil)
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
