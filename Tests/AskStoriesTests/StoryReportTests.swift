import AskStories
import Foundation
import Testing

#if canImport(FoundationXML)
    import FoundationXML
#endif

@Suite("story reports: runner lines and JUnit XML")
struct StoryReportTests {
    static let results = [
        StoryResult(
            name: "cancel",
            file: "docs/stories/cancel.json",
            outcome: .passed,
            seconds: 1.25,
            logs: "/tmp/l/01"
        ),
        StoryResult(
            name: "first <answer> & \"wins\"",
            file: "docs/stories/first.json",
            outcome: .failed(
                StepFailure(step: "step 3 \"dad's late answer\" (answer)", expected: "already-closed", got: "accepted")
            ),
            seconds: 2.5,
            logs: "/tmp/l/02"
        ),
        StoryResult(
            name: "no broker",
            file: "x/nobroker.json",
            outcome: .error("askrelay-broker not found in /nowhere\u{1}"),
            seconds: 0.01,
            logs: "/tmp/l/03"
        ),
    ]

    @Test("one line per story, the failing step with expected and got, the summary")
    func lines() {
        #expect(StoryReport.lines(for: Self.results[0]) == ["PASS cancel (1.2 s)"])
        #expect(
            StoryReport.lines(for: Self.results[1]) == [
                "FAIL first <answer> & \"wins\" (2.5 s)",
                "  step 3 \"dad's late answer\" (answer): expected already-closed, got accepted",
                "  logs: /tmp/l/02",
            ]
        )
        #expect(StoryReport.summary(Self.results, seconds: 3.76) == "1 passed, 1 failed, 1 could not start (3.8 s)")
        #expect(StoryReport.summary(Array(Self.results.prefix(1)), seconds: 1) == "1 passed, 0 failed (1.0 s)")
    }

    @Test("exit codes: 0 all passed, 1 a story failed, 2 a story could not start (even beside a failure)")
    func exitCodes() {
        #expect(StoryRun(results: [Self.results[0]], seconds: 1).exitCode == 0)
        #expect(StoryRun(results: Array(Self.results.prefix(2)), seconds: 1).exitCode == 1)
        #expect(StoryRun(results: Self.results, seconds: 1).exitCode == 2)
        #expect(StoryRun(results: [], seconds: 0).exitCode == 0)
    }

    /// What XMLParser read back: every element with its attributes and text.
    final class Collector: NSObject, XMLParserDelegate {
        var elements: [(name: String, attributes: [String: String])] = []
        var text: [String: String] = [:]
        var current: [String] = []

        func parser(
            _ parser: XMLParser,
            didStartElement name: String,
            namespaceURI: String?,
            qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            elements.append((name, attributes))
            current.append(name)
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            current.removeLast()
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard let name = current.last else { return }
            text[name, default: ""] += string
        }
    }

    @Test("the JUnit XML is well-formed and says what CI servers read")
    func junitParses() throws {
        let xml = StoryReport.junit(Self.results, seconds: 3.76)
        let parser = XMLParser(data: Data(xml.utf8))
        let collector = Collector()
        parser.delegate = collector
        #expect(parser.parse(), "not well-formed: \(String(describing: parser.parserError))\n\(xml)")
        let names = collector.elements.map(\.name)
        #expect(names.first == "testsuites")
        #expect(names.filter { $0 == "testsuite" }.count == 1)
        #expect(names.filter { $0 == "testcase" }.count == 3)
        let suite = try #require(collector.elements.first { $0.name == "testsuite" }?.attributes)
        #expect(suite["tests"] == "3")
        #expect(suite["failures"] == "1")
        #expect(suite["errors"] == "1")
        #expect(suite["time"] == "3.760")
        let cases = collector.elements.filter { $0.name == "testcase" }.map(\.attributes)
        #expect(cases.map { $0["name"] } == ["cancel", "first <answer> & \"wins\"", "no broker"])
        #expect(cases.map { $0["classname"] } == ["stories", "stories", "x"])
        #expect(cases.map { $0["time"] } == ["1.250", "2.500", "0.010"])
        let failure = try #require(collector.elements.first { $0.name == "failure" }?.attributes)
        #expect(failure["message"] == "step 3 \"dad's late answer\" (answer): expected already-closed, got accepted")
        #expect(collector.text["failure"]?.contains("logs: /tmp/l/02") == true)
        #expect(collector.text["error"]?.contains("askrelay-broker not found in /nowhere\\u{1}") == true)
        #expect(collector.text["system-out"]?.contains("PASS cancel (1.2 s)") == true)
    }

    @Test("escaping: markup, quotes and characters XML cannot hold")
    func escaping() {
        #expect(StoryReport.escape("a<b>&\"c'\n") == "a&lt;b&gt;&amp;&quot;c&apos;\n")
        #expect(StoryReport.escape("bell\u{7}nul\u{0}") == "bell?nul?")
        #expect(StoryReport.escape("é 😀") == "é 😀")
    }

    @Test("control characters in names and messages are escaped on the terminal, and the JUnit XML holds them so")
    func controlCharacters() throws {
        let result = StoryResult(
            name: "bell\u{7}\nline",
            file: "x/b.json",
            outcome: .failed(
                StepFailure(step: "step 0 \"nul\u{0}\" (ask)", expected: "presented", got: "systemError (\u{1B}[31m)")
            ),
            seconds: 1,
            logs: "/tmp/l/01"
        )
        #expect(
            StoryReport.lines(for: result) == [
                "FAIL bell\\u{7}\\nline (1.0 s)",
                "  step 0 \"nul\\u{0}\" (ask): expected presented, got systemError (\\u{1B}[31m)",
                "  logs: /tmp/l/01",
            ]
        )
        let xml = StoryReport.junit([result], seconds: 1)
        let parser = XMLParser(data: Data(xml.utf8))
        let collector = Collector()
        parser.delegate = collector
        #expect(parser.parse(), "not well-formed: \(String(describing: parser.parserError))\n\(xml)")
        let testcase = try #require(collector.elements.first { $0.name == "testcase" }?.attributes)
        #expect(testcase["name"] == "bell\\u{7}\\nline")
        let failure = try #require(collector.elements.first { $0.name == "failure" }?.attributes)
        #expect(failure["message"] == "step 0 \"nul\\u{0}\" (ask): expected presented, got systemError (\\u{1B}[31m)")
    }

    @Test("an interrupted run: the story marked with where it stopped, the rest not run, exit 130, in JUnit too")
    func interruptedRun() throws {
        let results = [
            Self.results[0],
            StoryResult(
                name: "long",
                file: "x/long.json",
                outcome: .interrupted("at step 3 (expectNoResponse)"),
                seconds: 4,
                logs: "/tmp/l/02"
            ),
            StoryResult(name: "later", file: "x/later.json", outcome: .notRun, seconds: 0, logs: "/tmp/l/03"),
        ]
        #expect(
            StoryReport.lines(for: results[1]) == [
                "INTERRUPTED long (4.0 s)", "  interrupted at step 3 (expectNoResponse)", "  logs: /tmp/l/02",
            ]
        )
        #expect(StoryReport.lines(for: results[2]).isEmpty)
        #expect(StoryReport.summary(results, seconds: 5.25) == "1 passed, 0 failed, 1 interrupted, 1 not run (5.2 s)")
        #expect(StoryRun(results: results, seconds: 5).exitCode == 130)
        #expect(StoryRun(results: results + [Self.results[1], Self.results[2]], seconds: 5).exitCode == 130)
        let xml = StoryReport.junit(results, seconds: 5.25)
        let parser = XMLParser(data: Data(xml.utf8))
        let collector = Collector()
        parser.delegate = collector
        #expect(parser.parse(), "not well-formed: \(String(describing: parser.parserError))\n\(xml)")
        let suite = try #require(collector.elements.first { $0.name == "testsuite" }?.attributes)
        #expect(suite["tests"] == "3")
        #expect(suite["errors"] == "1")
        #expect(suite["skipped"] == "1")
        let error = try #require(collector.elements.first { $0.name == "error" }?.attributes)
        #expect(error["type"] == "interrupted")
        #expect(error["message"] == "interrupted at step 3 (expectNoResponse)")
        let skipped = try #require(collector.elements.first { $0.name == "skipped" }?.attributes)
        #expect(skipped["message"] == "not run: the run was interrupted")
    }
}
