import AskRelayProcesses
import AskTestKit
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

    /// The folder of the built executables, by the one lookup (`ASKRELAY_BIN_DIR`, else next to the test bundle).
    static var binDirectory: URL { URL(fileURLWithPath: Executables.directoryOrFirstCandidate()) }

    struct Run {
        var status: ProcessExitStatus
        var stdout: [String]
        var stderr: String
    }

    /// Runs `askrelay test ARGUMENTS` in a fresh folder to its end (at most 8 minutes).
    func askrelay(_ arguments: [String], environment: [String: String] = [:], in folder: URL) throws -> Run {
        let running = try RunningTest(arguments, environment: environment, in: folder)
        return try running.end()
    }

    /// `askrelay test` started and not yet ended: killed when released, if it is still running.
    final class RunningTest {
        let process: RelayProcess
        let log: String

        /// - Parameter mergingStderr: stderr joins stdout (`exec ... 2>&1` through sh, so the process is still
        ///   askrelay's), so that a test can wait for a stderr line as it waits for a stdout line.
        init(_ arguments: [String], environment: [String: String], mergingStderr: Bool = false, in folder: URL) throws {
            log = folder.appendingPathComponent("askrelay-test-\(UUID().uuidString.prefix(8)).stderr").path
            let askrelay = AskRelayTestCommandTests.binDirectory.appendingPathComponent("askrelay").path
            process = try RelayProcess(
                name: "askrelay",
                executable: mergingStderr ? "/bin/sh" : askrelay,
                arguments: mergingStderr
                    ? ["-c", "exec \"$0\" test \"$@\" 2>&1", askrelay] + arguments : ["test"] + arguments,
                environment: environment,
                logPath: log
            )
        }

        deinit { _ = try? process.kill() }

        /// Waits (at most 8 minutes) for the end of the process and of its output.
        func end() throws -> Run {
            let status = try process.wait(timeout: .seconds(480))
            let stderr = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            return Run(status: status, stdout: process.output, stderr: stderr)
        }
    }

    /// The `testcase` elements of a JUnit file: their attributes, and whether each holds a `failure` (its message,
    /// and its text).
    final class Cases: NSObject, XMLParserDelegate {
        var cases: [[String: String]] = []
        var failures: [String] = []
        var failureTexts: [String] = []
        var skipped = 0
        private var inFailure = false
        func parser(
            _ parser: XMLParser,
            didStartElement name: String,
            namespaceURI: String?,
            qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            if name == "testcase" { cases.append(attributes) }
            if name == "failure" || name == "error" {
                failures.append(attributes["message"] ?? "")
                failureTexts.append("")
                inFailure = true
            }
            if name == "skipped" { skipped += 1 }
        }
        func parser(_ parser: XMLParser, foundCharacters string: String) {
            if inFailure { failureTexts[failureTexts.count - 1] += string }
        }
        func parser(
            _ parser: XMLParser,
            didEndElement name: String,
            namespaceURI: String?,
            qualifiedName: String?
        ) {
            if name == "failure" || name == "error" { inFailure = false }
        }
    }

    @Test("docs/stories passes: exit 0, one PASS line and one testcase per story, the summary line")
    func docsStoriesPass() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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

    @Test("a story written to fail: exit 1, its step named, its diagram (the flow, the step marked) named too")
    func failingStory() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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
        // The diagram: named by the text output and the JUnit failure's text, beside the story's logs.
        let logs = folder.appendingPathComponent("logs/01-failing-story").path
        let diagram = logs + "/failed-step.html"
        #expect(run.stdout.contains("  diagram: \(diagram)"), "\(run.stdout)")
        #expect(cases.failureTexts.first?.contains("\ndiagram: \(diagram)") == true, "\(cases.failureTexts)")
        // The kept folder's trace files, merged for Perfetto: every process a track.
        let merged = try JSONSerialization.jsonObject(
            with: Data(contentsOf: URL(fileURLWithPath: logs + "/trace.json"))
        )
        let events = try #require((merged as? [String: Any])?["traceEvents"] as? [[String: Any]])
        let tracks = Set(
            events.filter { $0["name"] as? String == "process_name" }.compactMap {
                ($0["args"] as? [String: Any])?["name"] as? String
            }
        )
        #expect(tracks.isSuperset(of: ["askcenter-1", "broker", "limits", "guardiancenter-1"]), "\(tracks)")
        let page = try String(contentsOfFile: diagram, encoding: .utf8)
        let marked = "failed: " + step.dropFirst(2).replacingOccurrences(of: "\"", with: "&quot;")
        #expect(page.contains("<p class=\"step\" id=\"failed-step\">\(marked.dropFirst(8))</p>"), "\(page)")
        // One diagram, of q1: a well-formed SVG with a lane per process, its hops, and the step's band.
        let start = try #require(page.range(of: "<svg "))
        let end = try #require(page.range(of: "</svg>"))
        let svg = String(page[start.lowerBound..<end.upperBound])
        #expect(page.components(separatedBy: "<svg ").count == 2)
        let parser2 = XMLParser(data: Data(svg.utf8))
        #expect(parser2.parse(), "the diagram is not well-formed XML: \(String(describing: parser2.parserError))")
        for lane in ["askcenter-1", "broker", "limits", "guardiancenter-1"] {
            #expect(svg.contains("data-process=\"\(lane)\""), "no lane \(lane)")
        }
        for hop in [">ask</text>", ">question</text>", ">answer</text>", ">response</text>"] {
            #expect(svg.contains(hop), "no hop \(hop)")
        }
        #expect(svg.contains("<g class=\"mark\"><title>\(marked)</title>"), "\(svg)")
        #expect(FileManager.default.fileExists(atPath: logs + "/trace/broker.jsonl"))
    }

    @Test("a story failing after a kill: its diagram draws the kill and the restart as bands on the question's flow")
    func failingAfterFault() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let run = try askrelay(
            [
                Self.fixtures.appendingPathComponent("failing-after-kill-story.json").path, "--logs",
                folder.appendingPathComponent("logs").path,
            ],
            in: folder
        )
        #expect(run.status == .exited(1), "\(run.stdout)\n\(run.stderr)")
        let step = "step 5 \"a response nobody gave\" (expectResponse): expected a response to q1 within 1s, got none"
        #expect(run.stdout.contains("  " + step), "\(run.stdout)")
        let logs = folder.appendingPathComponent("logs/01-failing-after-kill-story").path
        #expect(run.stdout.contains("  diagram: \(logs)/failed-step.html"), "\(run.stdout)")
        // The story's own trace file holds its faults; the diagram draws them within the flow's span.
        let faults = try String(contentsOfFile: logs + "/trace/story.jsonl", encoding: .utf8)
            .split(separator: "\n")
        #expect(faults.count == 2 && faults.allSatisfy { $0.contains("\"event\":\"fault\"") }, "\(faults)")
        #expect(faults.first?.contains("\"to\":\"broker\",\"code\":\"kill\"") == true, "\(faults)")
        let page = try String(contentsOfFile: logs + "/failed-step.html", encoding: .utf8)
        #expect(page.contains(">fault: kill broker</text>"), "\(page)")
        #expect(page.contains(">fault: restart broker</text>"), "\(page)")
        #expect(
            page.contains("<g class=\"mark\"><title>failed: \(step.replacingOccurrences(of: "\"", with: "&quot;"))")
        )
    }

    @Test("a malformed story: exit 64 naming the file and the field, and nothing run, not even the good stories")
    func malformedStory() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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
            unwritable.stderr.contains("--junit' '/nonexistent/out.xml': the folder '/nonexistent' does not exist"),
            "\(unwritable.stderr)"
        )
        #expect(run.stderr.contains("the logs folder '\(logs.path)' is not empty (it holds 01-limits-not-enabled)"))
        #expect(run.stdout.isEmpty, "\(run.stdout)")
    }

    @Test("the caller's ASKRELAY_* variables do not reach the story's processes")
    func callerEnvironmentIsNotTheStorys() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
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

    static func story(_ name: String) -> String { root.appendingPathComponent("docs/stories/\(name).json").path }

    /// The folders and files directly in `folder`.
    func names(in folder: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
    }

    /// The processes whose command line mentions `text` (a story's cluster folder is in every argument list).
    func processes(mentioning text: String) -> [String] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return pids.filter { $0.allSatisfy(\.isNumber) }.filter { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            return String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self).contains(text)
        }
    }

    @Test("a bad --junit (a folder, a missing folder, one nobody can write into): exit 64 before anything starts")
    func badJUnitPaths() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let existing = folder.appendingPathComponent("emptydir")
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        let missing = folder.appendingPathComponent("nodir/x.xml").path
        let cases = [
            (existing.path, "option '--junit' '\(existing.path)' is a folder; give --junit the path of a file"),
            (missing, "option '--junit' '\(missing)': the folder '\(folder.path)/nodir' does not exist"),
            // Not writable even for root: nothing can be created in /proc.
            ("/proc/askrelay-junit.xml", "option '--junit' '/proc/askrelay-junit.xml' cannot be written ("),
        ]
        let logs = folder.appendingPathComponent("logs")
        for (junit, message) in cases {
            let run = try askrelay(
                [Self.story("limits-not-enabled"), "--junit", junit, "--logs", logs.path],
                in: folder
            )
            #expect(run.status == .exited(64), "\(junit): \(run.stdout)\n\(run.stderr)")
            #expect(run.stderr.contains(message), "\(run.stderr)")
            #expect(run.stdout.isEmpty, "\(run.stdout)")
            #expect(!FileManager.default.fileExists(atPath: logs.path), "a refused run started a story")
        }
        #expect(names(in: existing).isEmpty)
        // The same run with a good --junit plays the story (makes its logs folder) and writes the file.
        let good = folder.appendingPathComponent("out.xml")
        let run = try askrelay(
            [Self.story("limits-not-enabled"), "--junit", good.path, "--logs", logs.path],
            in: folder
        )
        #expect(run.status == .exited(0), "\(run.stdout)\n\(run.stderr)")
        #expect(FileManager.default.fileExists(atPath: logs.path))
        #expect(FileManager.default.fileExists(atPath: good.path))
    }

    @Test("a bad value in ASKRELAY_TEST_JUNIT or ASKRELAY_TEST_LOGS is reported under the variable's name")
    func variablesNamed() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let file = folder.appendingPathComponent("a-file")
        _ = FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8))
        let missing = folder.appendingPathComponent("nodir/x.xml").path
        let junit = try askrelay(
            [Self.story("limits-not-enabled")],
            environment: ["ASKRELAY_TEST_JUNIT": missing],
            in: folder
        )
        #expect(junit.status == .exited(64))
        #expect(
            junit.stderr.contains("environment variable ASKRELAY_TEST_JUNIT (for --junit) '\(missing)': the folder"),
            "\(junit.stderr)"
        )
        let logs = try askrelay(
            [Self.story("limits-not-enabled")],
            environment: ["ASKRELAY_TEST_LOGS": file.path],
            in: folder
        )
        #expect(logs.status == .exited(64))
        #expect(
            logs.stderr.contains("environment variable ASKRELAY_TEST_LOGS (for --logs) '\(file.path)' is a file"),
            "\(logs.stderr)"
        )
    }

    @Test(
        "SIGINT or SIGTERM while a story plays: it stops, the summary so far and the JUnit file, exit 130",
        arguments: [SIGINT, SIGTERM]
    )
    func interrupted(signal: Int32) throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let temporary = folder.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        let junit = folder.appendingPathComponent("out.xml")
        let running = try RunningTest(
            [
                Self.story("limits-not-enabled"), Self.fixtures.appendingPathComponent("long-story.json").path,
                Self.story("denial-reaches-child"), "--junit", junit.path,
            ],
            environment: ["TMPDIR": temporary.path],
            mergingStderr: true,
            in: folder
        )
        // The run's own line: the second story's processes are up and its steps are being played.
        _ = try running.process.waitForLine(startingWith: "askrelay test: playing 2/3 ", timeout: .seconds(120))
        let cluster = try #require(names(in: temporary).first { $0.hasPrefix("askrelay-story-") })
        #expect(processes(mentioning: temporary.path + "/" + cluster).count >= 2, "the story's broker and limits")
        running.process.signal(signal)
        let run = try running.end()
        let out = run.stdout.joined(separator: "\n")
        #expect(run.status == .exited(130), "\(out)")
        #expect(run.stdout.contains { $0.hasPrefix("PASS limits off for the child") }, "\(out)")
        #expect(run.stdout.contains { $0.hasPrefix("INTERRUPTED waits long enough to be interrupted (") }, "\(out)")
        #expect(run.stdout.contains { $0.hasPrefix("  interrupted at step ") }, "\(out)")
        #expect(!run.stdout.contains { $0.hasPrefix("PASS a denial") }, "\(out)")
        #expect(run.stdout.contains { $0.hasPrefix("1 passed, 0 failed, 1 interrupted, 1 not run (") }, "\(out)")
        #expect(processes(mentioning: temporary.path + "/" + cluster).isEmpty, "the story's processes were stopped")
        #expect(!names(in: temporary).contains(cluster))
        let parser = try #require(XMLParser(contentsOf: junit))
        let cases = Cases()
        parser.delegate = cases
        #expect(parser.parse(), "out.xml is not well-formed")
        #expect(cases.cases.count == 3)
        #expect(cases.failures.count == 1 && cases.failures[0].hasPrefix("interrupted at step "), "\(cases.failures)")
        #expect(cases.skipped == 1)
    }

    @Test("without --logs: the temporary folders go when every story passed; kept, and named once, when one failed")
    func temporaryFolders() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let temporary = folder.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        let pass = try askrelay(
            [Self.fixtures.appendingPathComponent("bell-story.json").path],
            environment: ["TMPDIR": temporary.path],
            in: folder
        )
        #expect(pass.status == .exited(0), "\(pass.stdout)\n\(pass.stderr)")
        #expect(names(in: temporary).isEmpty, "left behind: \(names(in: temporary))")
        #expect(!pass.stdout.contains { $0.contains("logs:") }, "\(pass.stdout)")
        // A control character in a name is printed escaped, the line stays one line.
        #expect(
            pass.stdout.first?.hasPrefix("PASS a bell \\u{7} and a line\\nbreak in the name (") == true,
            "\(pass.stdout)"
        )
        let fail = try askrelay(
            [Self.fixtures.appendingPathComponent("failing-story.json").path],
            environment: ["TMPDIR": temporary.path],
            in: folder
        )
        #expect(fail.status == .exited(1))
        let left = names(in: temporary)
        #expect(left.count == 1 && left.first?.hasPrefix("askrelay-test-") == true, "\(left)")
        let run = temporary.appendingPathComponent(left.first ?? "").path
        #expect(fail.stdout.filter { $0 == "logs: \(run)" }.count == 1, "\(fail.stdout)")
        #expect(FileManager.default.fileExists(atPath: run + "/01-failing-story/broker.log"))
    }
}
