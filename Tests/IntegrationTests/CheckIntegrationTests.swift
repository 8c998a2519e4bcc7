import AskCLI
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// `askrelay check REPORT_DIR` end to end: a real `askrelay simulate` run, then the real askrelay checks its folder.
@Suite("askrelay check: a run's folder gives the run's own verdict", .timeLimit(.minutes(3)), .serialized)
struct CheckIntegrationTests {
    /// Small and quick: 5 families, a few seconds.
    static let small = """
        {"seed": 4, "families": 5, "flowsPerChild": 3, "childThink": "100ms", "grace": "500ms", "duration": "10s"}
        """

    typealias Run = FaultSupport.Run

    func check(_ folder: String, directory: TempDirectory) throws -> (
        exit: ProcessExitStatus, stdout: [String], stderr: String
    ) {
        try SimulationEdgeTests.askrelay(["check", folder], directory: directory)
    }

    /// The summary lines from `invariants` on: the verdict, every violation and note.
    func verdictLines(_ stdout: [String]) -> [String] {
        guard let start = stdout.firstIndex(where: { $0.hasPrefix("invariants ") }) else { return [] }
        return Array(stdout[start...].prefix { !$0.isEmpty })
    }

    @Test("a passing run: check exits 0 and prints the run's own summary")
    func passingRun() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.small, directory: directory, timeout: .seconds(150))
        #expect(run.exit == .exited(0) && run.ok, "violations: \(run.violations)")
        let checked = try check(run.directory, directory: directory)
        #expect(checked.exit == .exited(0), "stderr: \(checked.stderr)")
        #expect(verdictLines(checked.stdout) == ["invariants       OK"], "\(checked.stdout)")
        // The whole summary table is simulate's, line for line (simulate adds its running: and report: lines).
        let table = run.stdout.filter { !$0.hasPrefix("running:") }.prefix { !$0.hasPrefix("report: ") }
        #expect(Array(checked.stdout.prefix(table.count)) == Array(table))
        #expect(checked.stdout.last?.hasPrefix("checked: \(run.directory)") == true, "\(checked.stdout)")
    }

    @Test("a run that broke an invariant: check exits 1 with the same violation lines")
    func failingRun() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // The checker's test hook (debug builds): every guardian answers after expiry.
        let scenario = """
            {"seed": 3, "families": 5, "flowsPerChild": 2, "childThink": "100ms", "grace": "500ms",
             "cancelProbability": 0, "abandonProbability": 0, "invalidRatio": 0, "answerAfterExpiry": true,
             "guardians": {"neverAnswerRatio": 0}}
            """
        let run = try FaultSupport.simulate(scenario, directory: directory, timeout: .seconds(150))
        #expect(run.exit == .exited(1) && !run.ok)
        let checked = try check(run.directory, directory: directory)
        #expect(checked.exit == .exited(1), "stderr: \(checked.stderr)")
        let lines = verdictLines(checked.stdout)
        #expect(lines == verdictLines(run.stdout), "\(checked.stdout)")
        #expect(lines.contains { $0.hasPrefix("  ✗ [guardians-honour-expiry]") }, "\(lines)")
    }

    @Test("a record edited after a passing run (an accepted answer taken away): check exits 1 and names the invariant")
    func editedRecords() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.small, directory: directory, timeout: .seconds(150))
        #expect(run.exit == .exited(0) && run.ok, "violations: \(run.violations)")
        // The guardians' acceptances are gone: every approved or denied flow lacks its accepted answer.
        var edited = 0
        for index in 1...2 {
            let path = run.directory + "/records/parent-\(index).jsonl"
            let text = try String(contentsOfFile: path, encoding: .utf8)
            edited += text.components(separatedBy: #""result":"accepted""#).count - 1
            try Data(
                text.replacingOccurrences(of: #""result":"accepted""#, with: #""result":"already-closed""#).utf8
            )
            .write(to: URL(fileURLWithPath: path))
        }
        #expect(edited > 0, "the run had no accepted answer to take away: \(run.outcomes)")
        let checked = try check(run.directory, directory: directory)
        #expect(checked.exit == .exited(1), "stderr: \(checked.stderr)")
        let lines = verdictLines(checked.stdout)
        #expect(lines.first?.hasPrefix("invariants       FAILED") == true, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("  ✗ [response-needs-accepted-answer]") }, "\(lines)")
    }

    @Test("a folder of an older build (no run-facts.json, or an older format) is refused with 65, in one line")
    func olderReport() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // What an older build left: scenario.json, report.json, records, no run-facts.json.
        let folder = directory.path + "/old"
        try FileManager.default.createDirectory(atPath: folder + "/records", withIntermediateDirectories: true)
        try Data(Self.small.utf8).write(to: URL(fileURLWithPath: folder + "/scenario.json"))
        try Data(#"{"invariants": {"ok": true, "violations": [], "checked": [], "notes": []}}"#.utf8)
            .write(to: URL(fileURLWithPath: folder + "/report.json"))
        let missing = try check(folder, directory: directory)
        #expect(missing.exit == .exited(RunCheck.incompatibleExitCode))
        #expect(missing.stdout.isEmpty, "\(missing.stdout)")
        let line = missing.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!line.contains("\n"), "\(line)")
        #expect(line.hasPrefix("askrelay check: '\(folder)' was written by an older askrelay"), "\(line)")
        #expect(line.contains("run-facts.json") && line.contains("askrelay simulate --scenario"), "\(line)")

        try Data(#"{"format": 0}"#.utf8).write(to: URL(fileURLWithPath: folder + "/run-facts.json"))
        let older = try check(folder, directory: directory)
        #expect(older.exit == .exited(65))
        #expect(
            older.stderr.contains("run-facts.json has format 0, but this build reads format \(RunFacts.currentFormat)"),
            "\(older.stderr)"
        )
    }

    @Test("a missing folder is bad usage (64); a folder a live simulate holds is refused (75)")
    func missingOrLive() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let missing = try check(directory.path + "/nothing-here", directory: directory)
        #expect(missing.exit == .exited(64))
        #expect(missing.stderr.contains("no such folder '\(directory.path)/nothing-here'"), "\(missing.stderr)")
        let none = try SimulationEdgeTests.askrelay(["check"], directory: directory)
        #expect(none.exit == .exited(64))
        // This test process holds the folder as a live simulate does (the same lock).
        let folder = directory.path + "/live"
        let claim = try ReportFolder.claim(folder, clean: false)
        let live = try check(folder, directory: directory)
        withExtendedLifetime(claim) {}
        #expect(live.exit == .exited(RunCheck.liveRunExitCode))
        #expect(live.stderr.contains("is still being written by process \(getpid())"), "\(live.stderr)")
    }
}
