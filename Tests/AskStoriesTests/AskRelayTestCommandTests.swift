import AskCLI
import Foundation
import Testing

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The real `askrelay test`, run as a user runs it, against real broker and limits processes.
@Suite("askrelay test: the command against real processes", .serialized, .timeLimit(.minutes(10)))
struct AskRelayTestCommandTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let fixtures = root.appendingPathComponent("Tests/AskStoriesTests/Fixtures")

    /// The folder of the built executables: next to the test bundle (.build/debug or .build/release).
    static var binDirectory: URL {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("askrelay").path) {
                return url
            }
        }
        return root.appendingPathComponent(".build/debug")
    }

    struct Run {
        var status: ProcessExitStatus
        var stdout: [String]
        var stderr: String
    }

    /// Runs `askrelay test ARGUMENTS` in a fresh folder to its end (at most 8 minutes).
    func askrelay(_ arguments: [String], environment: [String: String] = [:], in folder: URL) throws -> Run {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let log = folder.appendingPathComponent("askrelay-test.stderr").path
        let process = try supervisor.start(
            name: "askrelay",
            executable: Self.binDirectory.appendingPathComponent("askrelay").path,
            arguments: ["test"] + arguments,
            environment: environment,
            logPath: log
        )
        let status = try process.waitForEnd(timeout: .seconds(480))
        let stderr = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return Run(status: status, stdout: process.lines, stderr: stderr)
    }

    func temporaryFolder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("askrelay-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// The `testcase` elements of a JUnit file: their attributes, and whether each holds a `failure`.
    final class Cases: NSObject, XMLParserDelegate {
        var cases: [[String: String]] = []
        var failures: [String] = []
        func parser(
            _ parser: XMLParser,
            didStartElement name: String,
            namespaceURI: String?,
            qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            if name == "testcase" { cases.append(attributes) }
            if name == "failure" || name == "error" { failures.append(attributes["message"] ?? "") }
        }
    }

    @Test("docs/stories passes: exit 0, one PASS line and one testcase per story, the summary line")
    func docsStoriesPass() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let stories = try FileManager.default.contentsOfDirectory(
            atPath: Self.root.appendingPathComponent("docs/stories").path
        ).filter { $0.hasSuffix(".json") }
        #expect(stories.count >= 15)
        let junit = folder.appendingPathComponent("out.xml")
        let start = ContinuousClock.now
        let run = try askrelay(
            [
                Self.root.appendingPathComponent("docs/stories").path, "--junit", junit.path, "--logs",
                folder.appendingPathComponent("logs").path,
            ],
            in: folder
        )
        let elapsed = ContinuousClock.now - start
        #expect(run.status == .exited(0), "\(run.stdout.joined(separator: "\n"))\n\(run.stderr)")
        #expect(run.stdout.filter { $0.hasPrefix("PASS ") }.count == stories.count)
        #expect(run.stdout.last?.hasPrefix("\(stories.count) passed, 0 failed (") == true, "\(run.stdout)")
        let parser = try #require(XMLParser(contentsOf: junit))
        let cases = Cases()
        parser.delegate = cases
        #expect(parser.parse(), "out.xml is not well-formed: \(String(describing: parser.parserError))")
        #expect(cases.cases.count == stories.count)
        #expect(cases.failures.isEmpty, "\(cases.failures)")
        #expect(Set(cases.cases.compactMap { $0["file"] }.map { ($0 as NSString).lastPathComponent }) == Set(stories))
        print("askrelay test docs/stories: \(stories.count) stories in \(elapsed)")
    }

    @Test("a story written to fail: exit 1, its failing step named with expected and got, in the JUnit file too")
    func failingStory() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let junit = folder.appendingPathComponent("out.xml")
        let run = try askrelay(
            [
                Self.fixtures.appendingPathComponent("failing-story.json").path, "--junit", junit.path, "--logs",
                folder.appendingPathComponent("logs").path,
            ],
            in: folder
        )
        #expect(run.status == .exited(1), "\(run.stdout)\n\(run.stderr)")
        let step =
            "  step 4 \"expects the wrong choice\" (expectResponse): expected choice askrelay.approve, got askrelay.decline"
        #expect(run.stdout.first?.hasPrefix("FAIL written to fail: ") == true, "\(run.stdout)")
        #expect(run.stdout.contains(step), "\(run.stdout)")
        #expect(run.stdout.contains { $0.hasPrefix("0 passed, 1 failed (") }, "\(run.stdout)")
        let parser = try #require(XMLParser(contentsOf: junit))
        let cases = Cases()
        parser.delegate = cases
        #expect(parser.parse())
        #expect(cases.cases.count == 1)
        #expect(cases.failures == [String(step.dropFirst(2))])
    }

    @Test("a malformed story: exit 64 naming the file and the field, and nothing run, not even the good stories")
    func malformedStory() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let malformed = Self.fixtures.appendingPathComponent("malformed-story.json").path
        let logs = folder.appendingPathComponent("logs")
        let run = try askrelay(
            [Self.root.appendingPathComponent("docs/stories").path, malformed, "--logs", logs.path],
            in: folder
        )
        #expect(run.status == .exited(64))
        #expect(
            run.stderr.hasPrefix(
                "askrelay test: \(malformed): steps[3].expect: unknown value \"approved\"; expected one of accepted, "
            ),
            "\(run.stderr)"
        )
        #expect(run.stdout.isEmpty, "\(run.stdout)")
        #expect(!FileManager.default.fileExists(atPath: logs.path), "a refused run started something")
    }

    @Test(
        "a --logs folder that holds anything, or a --junit file in no writable folder: exit 64 before anything starts"
    )
    func logsFolderNotEmpty() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let logs = folder.appendingPathComponent("logs")
        try FileManager.default.createDirectory(
            at: logs.appendingPathComponent("01-limits-not-enabled/broker-data"),
            withIntermediateDirectories: true
        )
        let run = try askrelay(
            [Self.root.appendingPathComponent("docs/stories/limits-not-enabled.json").path, "--logs", logs.path],
            in: folder
        )
        #expect(run.status == .exited(64))
        let unwritable = try askrelay(
            [
                Self.root.appendingPathComponent("docs/stories/limits-not-enabled.json").path, "--junit",
                "/nonexistent/out.xml",
            ],
            in: folder
        )
        #expect(unwritable.status == .exited(64))
        #expect(
            unwritable.stderr.contains("--junit '/nonexistent/out.xml': '/nonexistent' is not a folder"),
            "\(unwritable.stderr)"
        )
        #expect(run.stderr.contains("the logs folder '\(logs.path)' is not empty (it holds 01-limits-not-enabled)"))
        #expect(run.stdout.isEmpty, "\(run.stdout)")
    }

    @Test("the caller's ASKRELAY_* variables do not reach the story's processes")
    func callerEnvironmentIsNotTheStorys() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        // Both would stop the broker at start (exit 64) if they reached it.
        let run = try askrelay(
            [
                Self.root.appendingPathComponent("docs/stories/limits-not-enabled.json").path, "--logs",
                folder.appendingPathComponent("logs").path,
            ],
            environment: ["ASKRELAY_DURABILITY": "bogus", "ASKRELAY_MAX_QUEUE": "-1"],
            in: folder
        )
        #expect(run.status == .exited(0), "\(run.stdout)\n\(run.stderr)")
    }

    @Test("processes that cannot start: exit 2, the story shown as ERROR with the reason")
    func processesCannotStart() throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let empty = folder.appendingPathComponent("no-executables")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        let run = try askrelay(
            [
                Self.root.appendingPathComponent("docs/stories/limits-not-enabled.json").path, "--logs",
                folder.appendingPathComponent("logs").path,
            ],
            environment: ["ASKRELAY_BIN_DIR": empty.path],
            in: folder
        )
        #expect(run.status == .exited(2), "\(run.stdout)\n\(run.stderr)")
        #expect(run.stdout.first?.hasPrefix("ERROR limits off for the child") == true, "\(run.stdout)")
        #expect(run.stdout.contains { $0.contains("askrelay-broker not found in \(empty.path)") }, "\(run.stdout)")
    }
}
