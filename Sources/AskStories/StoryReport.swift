import AskLogging
import Foundation

/// How one story ended.
public struct StoryResult: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case passed
        /// A step did not get what it expected.
        case failed(StepFailure)
        /// The processes could not be started (or restarted): the story could not be played.
        case error(String)
        /// SIGINT or SIGTERM stopped the story; where it was (`at step 3 "..." (expectNoResponse)`).
        case interrupted(String)
        /// The run was interrupted before this story's turn.
        case notRun
    }

    public var name: String
    public var file: String
    public var outcome: Outcome
    /// Wall-clock time of the story, processes included.
    public var seconds: Double
    /// The folder holding the story's process logs (and `trace/`, its processes' and centers' trace files).
    public var logs: String
    /// For a failed step: the page (`failed-step.html`, in ``logs``) with the diagram of the flows the step concerns
    /// and the step marked on them; `nil` when none was written.
    public var diagram: String?

    public init(name: String, file: String, outcome: Outcome, seconds: Double, logs: String, diagram: String? = nil) {
        self.name = name
        self.file = file
        self.outcome = outcome
        self.seconds = seconds
        self.logs = logs
        self.diagram = diagram
    }

    public var passed: Bool { outcome == .passed }

    /// Stopped by an interruption, or never started because of one.
    public var interrupted: Bool {
        switch outcome {
        case .interrupted, .notRun: true
        default: false
        }
    }
}

/// A run of stories: each one's result and the whole run's time.
public struct StoryRun: Sendable, Equatable {
    public var results: [StoryResult]
    public var seconds: Double

    public init(results: [StoryResult], seconds: Double) {
        self.results = results
        self.seconds = seconds
    }

    /// The exit code of an interrupted run (128 + SIGINT, as a shell reports a command SIGINT ended), also when
    /// SIGTERM interrupted it.
    public static let interruptedExitCode: Int32 = 130

    /// 130 when SIGINT or SIGTERM interrupted the run, else 0 when every story passed, 2 when a story's processes
    /// could not be started, else 1.
    public var exitCode: Int32 {
        if results.contains(where: \.interrupted) { return Self.interruptedExitCode }
        if results.allSatisfy(\.passed) { return 0 }
        return results.contains { if case .error = $0.outcome { true } else { false } } ? 2 : 1
    }
}

/// The step that failed, what it expected and what came.
public struct StepFailure: Sendable, Equatable, CustomStringConvertible {
    public var step: String
    public var expected: String
    public var got: String

    public init(step: String, expected: String, got: String) {
        self.step = step
        self.expected = expected
        self.got = got
    }

    public var description: String { "\(step): expected \(expected), got \(got)" }
}

/// The test-runner text and the JUnit XML of a run.
public enum StoryReport {
    /// `PASS name (1.2 s)`, or `FAIL name (3.4 s)` followed by the failing step, the logs' folder and the step's
    /// diagram; nothing for a story that did not run. Control characters in names and messages are escaped (``printable(_:)``).
    public static func lines(for result: StoryResult) -> [String] {
        let time = String(format: "%.1f s", result.seconds)
        let name = printable(result.name)
        switch result.outcome {
        case .passed:
            return ["PASS \(name) (\(time))"]
        case .failed(let failure):
            return ["FAIL \(name) (\(time))", "  \(printable(failure.description))", "  logs: \(result.logs)"]
                + (result.diagram.map { ["  diagram: \($0)"] } ?? [])
        case .error(let message):
            return ["ERROR \(name) (\(time))", "  \(printable(message))", "  logs: \(result.logs)"]
        case .interrupted(let place):
            return ["INTERRUPTED \(name) (\(time))", "  interrupted \(printable(place))", "  logs: \(result.logs)"]
        case .notRun:
            return []
        }
    }

    /// Text from a story file or a process, on one line with its control characters visible: a name with a BEL or
    /// an escape sequence in it neither rings nor recolours the terminal, and a newline does not split a report
    /// line. Escaped as the logs escape (`\u{7}`, `\n`, `\\`).
    public static func printable(_ text: String) -> String { AskLogger.escape(text) }

    /// `3 passed, 1 failed (12.3 s)`; stories that could not start are counted as `N could not start`, and in an
    /// interrupted run `N interrupted, N not run`.
    public static func summary(_ results: [StoryResult], seconds: Double) -> String {
        let passed = results.filter(\.passed).count
        let errors = results.filter { if case .error = $0.outcome { true } else { false } }.count
        let interrupted = results.filter { if case .interrupted = $0.outcome { true } else { false } }.count
        let notRun = results.filter { $0.outcome == .notRun }.count
        let failed = results.count - passed - errors - interrupted - notRun
        var extra = errors > 0 ? ", \(errors) could not start" : ""
        if interrupted > 0 || notRun > 0 { extra += ", \(interrupted) interrupted, \(notRun) not run" }
        return "\(passed) passed, \(failed) failed\(extra) (\(String(format: "%.1f", seconds)) s)"
    }

    /// JUnit XML as Jenkins, GitLab and GitHub read it: one `<testsuite>` for the run, one `<testcase>` per story,
    /// a `<failure>` (a step failed) or `<error>` (could not start, or interrupted) with the step and the logs'
    /// folder (and a failed step's diagram), `<skipped>` for a story an interruption kept from running, and the story's lines in `<system-out>`.
    public static func junit(_ results: [StoryResult], suite: String = "askrelay test", seconds: Double) -> String {
        let failures = results.filter { if case .failed = $0.outcome { true } else { false } }.count
        let errors = results.filter {
            switch $0.outcome {
            case .error, .interrupted: true
            default: false
            }
        }.count
        let skipped = results.filter { $0.outcome == .notRun }.count
        var xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        let counts =
            "tests=\"\(results.count)\" failures=\"\(failures)\" errors=\"\(errors)\" skipped=\"\(skipped)\""
            + " time=\"\(time(seconds))\""
        xml += "<testsuites name=\"\(escape(suite))\" \(counts)>\n"
        xml += "  <testsuite name=\"\(escape(suite))\" \(counts)>\n"
        for result in results {
            let classname = escape(
                printable(((result.file as NSString).deletingLastPathComponent as NSString).lastPathComponent)
            )
            xml += "    <testcase name=\"\(escape(printable(result.name)))\""
            xml += " classname=\"\(classname.isEmpty ? "stories" : classname)\""
            xml += " file=\"\(escape(printable(result.file)))\" time=\"\(time(result.seconds))\">\n"
            switch result.outcome {
            case .passed: break
            case .failed(let failure):
                let text = printable(failure.description)
                xml += "      <failure message=\"\(escape(text))\" type=\"step\">"
                let diagram = result.diagram.map { "\ndiagram: \($0)" } ?? ""
                xml += escape("\(text)\nlogs: \(result.logs)\(diagram)") + "</failure>\n"
            case .error(let message):
                let text = printable(message)
                xml += "      <error message=\"\(escape(text))\" type=\"start\">"
                xml += escape("\(text)\nlogs: \(result.logs)") + "</error>\n"
            case .interrupted(let place):
                let text = "interrupted " + printable(place)
                xml += "      <error message=\"\(escape(text))\" type=\"interrupted\">"
                xml += escape("\(text)\nlogs: \(result.logs)") + "</error>\n"
            case .notRun:
                xml += "      <skipped message=\"not run: the run was interrupted\"/>\n"
            }
            let lines = lines(for: result)
            if !lines.isEmpty {
                xml += "      <system-out>" + escape(lines.joined(separator: "\n")) + "</system-out>\n"
            }
            xml += "    </testcase>\n"
        }
        xml += "  </testsuite>\n</testsuites>\n"
        return xml
    }

    static func time(_ seconds: Double) -> String { String(format: "%.3f", seconds) }

    /// Escapes text for an XML attribute or element; characters XML 1.0 cannot hold at all (most control
    /// characters, lone surrogates cannot occur in a Swift String) become `?`.
    public static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\n", "\t": out.unicodeScalars.append(scalar)
            case "\r": out += "&#13;"
            default:
                let value = scalar.value
                let allowed =
                    (value >= 0x20 && value <= 0xD7FF) || (value >= 0xE000 && value <= 0xFFFD)
                    || (value >= 0x10000 && value <= 0x10FFFF)
                out += allowed ? String(scalar) : "?"
            }
        }
        return out
    }
}
