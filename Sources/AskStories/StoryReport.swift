import Foundation

/// How one story ended.
public struct StoryResult: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case passed
        /// A step did not get what it expected.
        case failed(StepFailure)
        /// The processes could not be started (or restarted): the story could not be played.
        case error(String)
    }

    public var name: String
    public var file: String
    public var outcome: Outcome
    /// Wall-clock time of the story, processes included.
    public var seconds: Double
    /// The folder holding the story's process logs.
    public var logs: String

    public init(name: String, file: String, outcome: Outcome, seconds: Double, logs: String) {
        self.name = name
        self.file = file
        self.outcome = outcome
        self.seconds = seconds
        self.logs = logs
    }

    public var passed: Bool { outcome == .passed }
}

/// A run of stories: each one's result and the whole run's time.
public struct StoryRun: Sendable, Equatable {
    public var results: [StoryResult]
    public var seconds: Double

    public init(results: [StoryResult], seconds: Double) {
        self.results = results
        self.seconds = seconds
    }

    /// 0 when every story passed, 2 when a story's processes could not be started, else 1.
    public var exitCode: Int32 {
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
    /// `PASS name (1.2 s)`, or `FAIL name (3.4 s)` followed by the failing step and the logs' folder.
    public static func lines(for result: StoryResult) -> [String] {
        let time = String(format: "%.1f s", result.seconds)
        switch result.outcome {
        case .passed:
            return ["PASS \(result.name) (\(time))"]
        case .failed(let failure):
            return ["FAIL \(result.name) (\(time))", "  \(failure)", "  logs: \(result.logs)"]
        case .error(let message):
            return ["ERROR \(result.name) (\(time))", "  \(message)", "  logs: \(result.logs)"]
        }
    }

    /// `3 passed, 1 failed (12.3 s)`; stories that could not start are counted as `N could not start`.
    public static func summary(_ results: [StoryResult], seconds: Double) -> String {
        let passed = results.filter(\.passed).count
        let errors = results.filter { if case .error = $0.outcome { true } else { false } }.count
        let failed = results.count - passed - errors
        let extra = errors > 0 ? ", \(errors) could not start" : ""
        return "\(passed) passed, \(failed) failed\(extra) (\(String(format: "%.1f", seconds)) s)"
    }

    /// JUnit XML as Jenkins, GitLab and GitHub read it: one `<testsuite>` for the run, one `<testcase>` per story,
    /// a `<failure>` (a step failed) or `<error>` (could not start) with the step and the logs' folder, and the
    /// story's lines in `<system-out>`.
    public static func junit(_ results: [StoryResult], suite: String = "askrelay test", seconds: Double) -> String {
        let failures = results.filter { if case .failed = $0.outcome { true } else { false } }.count
        let errors = results.filter { if case .error = $0.outcome { true } else { false } }.count
        var xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        let counts =
            "tests=\"\(results.count)\" failures=\"\(failures)\" errors=\"\(errors)\" time=\"\(time(seconds))\""
        xml += "<testsuites name=\"\(escape(suite))\" \(counts)>\n"
        xml += "  <testsuite name=\"\(escape(suite))\" \(counts)>\n"
        for result in results {
            let classname = escape(((result.file as NSString).deletingLastPathComponent as NSString).lastPathComponent)
            xml +=
                "    <testcase name=\"\(escape(result.name))\" classname=\"\(classname.isEmpty ? "stories" : classname)\""
            xml += " file=\"\(escape(result.file))\" time=\"\(time(result.seconds))\">\n"
            switch result.outcome {
            case .passed: break
            case .failed(let failure):
                xml += "      <failure message=\"\(escape(failure.description))\" type=\"step\">"
                xml += escape("\(failure)\nlogs: \(result.logs)") + "</failure>\n"
            case .error(let message):
                xml += "      <error message=\"\(escape(message))\" type=\"start\">"
                xml += escape("\(message)\nlogs: \(result.logs)") + "</error>\n"
            }
            xml += "      <system-out>" + escape(lines(for: result).joined(separator: "\n")) + "</system-out>\n"
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
