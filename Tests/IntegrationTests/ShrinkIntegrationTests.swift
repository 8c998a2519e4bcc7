import AskCLI
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// `askrelay simulate --shrink` and `askrelay shrink` end to end: every replay is a real simulation (the real
/// broker and workers), on a run the checker's test hook breaks (`answerAfterExpiry`, debug builds only).
@Suite("shrinking a failing simulation end to end", .timeLimit(.minutes(8)), .serialized)
struct ShrinkIntegrationTests {
    /// Every guardian answers after expiry, so `guardians-honour-expiry` breaks whatever else happens; the 8 faults
    /// and 120 families have nothing to do with it. Two quick flows per child keep each replay a few seconds long;
    /// the faults play while they run.
    static let broken = """
        {"seed": 7, "families": 120, "flowsPerChild": 2, "childThink": "200ms", "grace": "500ms",
         "answerAfterExpiry": true,
         "faults": [
          {"at": "500ms", "process": "broker", "action": "kill", "restartAfter": "300ms"},
          {"at": "1s", "process": "parent-1", "action": "stop", "continueAfter": "300ms"},
          {"at": "1500ms", "process": "limits", "action": "term", "restartAfter": "300ms"},
          {"at": "2s", "process": "child-1", "action": "kill", "restartAfter": "300ms"},
          {"at": "2500ms", "process": "parent-2", "action": "term", "restartAfter": "300ms"},
          {"at": "3s", "process": "broker", "action": "stop", "continueAfter": "300ms"},
          {"at": "3500ms", "process": "child-2", "action": "stop", "continueAfter": "300ms"},
          {"at": "4s", "process": "limits", "action": "kill", "restartAfter": "300ms"}]}
        """

    static func json(_ path: String) throws -> [String: Any] {
        let data = try #require(FileManager.default.contents(atPath: path), "no \(path)")
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func broke(_ run: FaultSupport.Run, _ invariant: String) -> Bool {
        run.violations.contains { ($0 as? [String: Any])?["invariant"] as? String == invariant }
    }

    @Test("8 unrelated faults and 120 families shrink to no fault and a handful of families; its replay still fails")
    func brokenRunShrinks() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let started = ContinuousClock.now
        let run = try FaultSupport.simulate(
            Self.broken,
            directory: directory,
            flags: ["--shrink"],
            timeout: .seconds(420)
        )
        #expect(run.exit == .exited(1), "the run's exit code stays the failed run's")
        #expect(Self.broke(run, "guardians-honour-expiry"), "\(run.violations)")
        // The faults are unrelated, not absent: each played with questions in flight on its process.
        let coverage = run.stdout.first { $0.hasPrefix("coverage ") } ?? "no coverage line"
        #expect(coverage.contains("8 faults, 0 vacuous"), "\(coverage)")
        let shrinkFolder = run.directory + "/shrink"
        let summary = try Self.json(shrinkFolder + "/shrink.json")
        #expect(summary["invariant"] as? String == "guardians-honour-expiry")
        #expect(summary["stopped"] == nil, "the default budget is not spent: \(summary["stopped"] ?? "")")
        let replays = try #require(summary["replays"] as? [[String: Any]])
        #expect(replays.first?["tried"] as? String == "faults 8 → 0 (kept none)")
        for replay in replays {
            let folder = try #require(replay["folder"] as? String)
            #expect(folder.hasPrefix(shrinkFolder + "/replay-"))
            #expect(FileManager.default.fileExists(atPath: folder + "/report.json"), "\(folder)")
        }
        #expect(
            run.stdout.contains { $0.hasPrefix("replay 1: faults 8 → 0 (kept none): fails [guardians-honour-expiry]") }
        )
        let last = try #require(run.stdout.firstIndex { $0.hasPrefix("shrunk [guardians-honour-expiry] in ") })
        #expect(run.stdout[last].contains("faults 8 → 0 (8 removed)"), "\(run.stdout[last])")
        #expect(
            run.stdout.contains("replay it:        askrelay simulate --scenario \(shrinkFolder)/minimal-scenario.json")
        )

        let minimalPath = shrinkFolder + "/minimal-scenario.json"
        let minimal = try Scenario.load(path: minimalPath)
        #expect(minimal.faults.isEmpty)
        #expect(minimal.families <= 5, "\(minimal.families) families")
        #expect(minimal.seed == 7 && minimal.answerAfterExpiry)
        let minimalReport = try #require(summary["minimalReport"] as? String)
        #expect(Self.broke(try Self.readRun(minimalReport), "guardians-honour-expiry"))

        // The written file, played as a user would: it fails the same invariant.
        let replayDirectory = TempDirectory()
        defer { replayDirectory.cleanup() }
        let text = try String(contentsOfFile: minimalPath, encoding: .utf8)
        let replay = try FaultSupport.simulate(text, directory: replayDirectory, timeout: .seconds(120))
        #expect(replay.exit == .exited(1))
        #expect(Self.broke(replay, "guardians-honour-expiry"), "\(replay.violations)")
        let seconds = (ContinuousClock.now - started).seconds
        print("shrink proof: \(replays.count) replays, \(summary["seconds"] ?? 0) s shrinking, \(seconds) s in all")
    }

    static func readRun(_ folder: String) throws -> FaultSupport.Run {
        FaultSupport.Run(exit: .exited(1), report: try json(folder + "/report.json"), stdout: [], directory: folder)
    }

    /// Broken too, and quick: a few seconds per replay.
    static let small = """
        {"seed": 3, "families": 4, "flowsPerChild": 1, "childThink": "100ms", "grace": "500ms",
         "cancelProbability": 0, "abandonProbability": 0, "invalidRatio": 0, "answerAfterExpiry": true,
         "guardians": {"neverAnswerRatio": 0}}
        """

    @Test("askrelay shrink REPORT_DIR with a spent budget stops after one replay with the best so far")
    func subcommandBudget() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.small, directory: directory, timeout: .seconds(120))
        #expect(Self.broke(run, "guardians-honour-expiry"), "\(run.violations)")
        let output = directory.path + "/shrunk"
        let shrink = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: ["shrink", run.directory, "--shrink-dir", output, "--shrink-budget", "1s"],
            logPath: directory.path + "/shrink.log"
        )
        #expect(try shrink.wait(timeout: .seconds(120)) == .exited(0))
        let lines = shrink.output
        #expect(
            lines.first?.hasPrefix("shrink: looking for the smallest scenario that still breaks [guardians-") == true
        )
        #expect(lines.contains { $0.hasPrefix("replay 1: families 4 → 1: ") }, "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("replay 2:") }, "\(lines)")
        #expect(lines.contains("shrink: the budget is spent; stopped with the best scenario so far"), "\(lines)")
        let summary = try Self.json(output + "/shrink.json")
        #expect(summary["stopped"] as? String == "budget")
        #expect(FileManager.default.fileExists(atPath: output + "/replay-01/report.json"))
        #expect(try Scenario.load(path: output + "/minimal-scenario.json").seed == 3)
        // Nothing was written into the run's own folder.
        #expect(!FileManager.default.fileExists(atPath: run.directory + "/shrink"))
    }

    @Test("SIGINT during a replay kills its processes and ends the shrink with the best so far, exit 1")
    func interrupted() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.small, directory: directory, timeout: .seconds(120))
        #expect(Self.broke(run, "guardians-honour-expiry"), "\(run.violations)")
        try Self.interrupt(["shrink", run.directory, "--shrink-dir", directory.path + "/shrunk"], directory.path)
        // simulate --shrink: its own run, then the shrink, under one signal watcher.
        let scenarioPath = directory.path + "/small.json"
        try Data(Self.small.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let report = directory.path + "/again"
        try Self.interrupt(
            ["simulate", "--scenario", scenarioPath, "--report-dir", report, "--quiet", "--shrink"],
            directory.path,
            output: report + "/shrink"
        )
    }

    /// Starts askrelay with `arguments`, sends SIGINT once replay 1 runs every process, checks the ending.
    static func interrupt(_ arguments: [String], _ directory: String, output: String? = nil) throws {
        let output = output ?? arguments[arguments.count - 1]
        let askrelay = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: arguments,
            logPath: directory + "/\(arguments[0])-interrupted.log"
        )
        try askrelay.waitForLine(startingWith: "shrink: looking", timeout: .seconds(90))
        // The children start last: once their log exists, every process of replay 1 runs.
        let childLog = output + "/replay-01/logs/child-1.log"
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: childLog) && ContinuousClock.now < deadline && askrelay.isRunning
        {
            _ = try? askrelay.wait(timeout: .milliseconds(50))
        }
        #expect(FileManager.default.fileExists(atPath: childLog), "replay 1 did not start its children")
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(1), "\(arguments[0])")
        let lines = askrelay.output
        #expect(lines.contains { $0.hasPrefix("replay 1: families 4 → 1: interrupted, ") }, "\(lines)")
        #expect(lines.contains("shrink: interrupted; stopped with the best scenario so far"), "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("replay 2:") }, "\(lines)")
        #expect(try json(output + "/shrink.json")["stopped"] as? String == "interrupted")
        // No process of the replay outlived it.
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(entry) != nil {
            guard let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { continue }
            let line = String(decoding: data, as: UTF8.self)
            #expect(!line.contains(output + "/replay-01"), "still running: \(entry)")
        }
    }

    @Test("a used --shrink-dir is refused with advice that works: --clean empties a folder askrelay shrink wrote")
    func cleanShrinkFolder() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // A failed run's folder, as askrelay simulate leaves it: askrelay shrink checks it again (records, journals).
        let run = try FaultSupport.simulate(Self.small, directory: directory, timeout: .seconds(120))
        #expect(Self.broke(run, "guardians-honour-expiry"), "\(run.violations)")
        let failed = run.directory
        // A shrink folder an earlier shrink wrote.
        let used = directory.path + "/shrunk"
        try FileManager.default.createDirectory(atPath: used + "/replay-01", withIntermediateDirectories: true)
        try Data("old".utf8).write(to: URL(fileURLWithPath: used + "/replay-01/old.txt"))
        try Data("{}".utf8).write(to: URL(fileURLWithPath: used + "/shrink.json"))

        let refused = try UsageExitTests.Run(["askrelay", "shrink", failed, "--shrink-dir", used])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("give --shrink-dir a new or empty folder, or add --clean"), "\(refused.stderr)")
        #expect(FileManager.default.fileExists(atPath: used + "/replay-01/old.txt"))

        // The advice, followed: the folder is emptied and the shrink starts (interrupted here once it runs).
        let shrink = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: ["shrink", failed, "--shrink-dir", used, "--clean"],
            logPath: directory.path + "/shrink.log"
        )
        _ = try shrink.waitForLine(startingWith: "shrink: looking", timeout: .seconds(60))
        #expect(!FileManager.default.fileExists(atPath: used + "/replay-01/old.txt"), "--clean kept the old replay")
        shrink.signal(SIGINT)
        #expect(try shrink.wait(timeout: .seconds(60)) == .exited(1))

        // Never a folder holding anything else.
        let foreign = directory.path + "/mine"
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        let kept = try UsageExitTests.Run(["askrelay", "shrink", failed, "--shrink-dir", foreign, "--clean"])
        #expect(kept.status == 64, "\(kept.stderr)")
        #expect(kept.stderr.contains("also holds notes.txt"), "\(kept.stderr)")
        #expect(FileManager.default.fileExists(atPath: foreign + "/notes.txt"))
    }

    /// Holds every invariant, and quick: `small` without the checker's test hook.
    static let passing = """
        {"seed": 3, "families": 4, "flowsPerChild": 1, "childThink": "100ms", "grace": "500ms",
         "cancelProbability": 0, "abandonProbability": 0, "invalidRatio": 0, "guardians": {"neverAnswerRatio": 0}}
        """

    @Test("bad usage exits 64, names the problem and writes nothing")
    func badUsage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.passing, directory: directory, timeout: .seconds(120))
        #expect(run.exit == .exited(0) && run.ok, "violations: \(run.violations)")
        let passed = run.directory
        // Not a run's folder: nothing in it, or what an older build left (report.json, no run-facts.json).
        let empty = directory.path + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let older = directory.path + "/older"
        try FileManager.default.createDirectory(atPath: older, withIntermediateDirectories: true)
        try Data(Self.small.utf8).write(to: URL(fileURLWithPath: older + "/scenario.json"))
        let violation = #"{"invariant": "guardians-honour-expiry", "questions": [], "processes": [], "message": "x"}"#
        try Data(#"{"invariants": {"ok": false, "violations": [\#(violation)], "checked": [], "notes": []}}"#.utf8)
            .write(to: URL(fileURLWithPath: older + "/report.json"))
        let cases: [([String], String)] = [
            (["askrelay", "shrink"], "give the report folder of a failed askrelay simulate run (REPORT_DIR)"),
            (
                ["askrelay", "shrink", directory.path + "/none"],
                "no such folder '\(directory.path)/none': give the report folder"
            ),
            (["askrelay", "shrink", empty], "'\(empty)' holds no scenario.json"),
            (["askrelay", "shrink", older], "'\(older)' was written by an older askrelay"),
            (["askrelay", "shrink", passed], "every invariant held in that run; there is nothing to shrink"),
            (
                ["askrelay", "shrink", passed, "--shrink-invariant", "no-such"],
                "option '--shrink-invariant' must be one of ends-exactly-once,"
            ),
            (
                ["askrelay", "shrink", passed, "--shrink-budget", "0s"],
                "option '--shrink-budget' must be from 1s to 100d, got '0s'"
            ),
            (["askrelay", "simulate", "--shrink-budget", "1m"], "--shrink-budget goes with --shrink"),
        ]
        for (command, message) in cases {
            let run = try UsageExitTests.Run(command)
            #expect(run.status == 64, "\(command): exit \(run.status); stderr: \(run.stderr)")
            #expect(run.stderr.contains(message), "\(command): \(run.stderr)")
        }
        for folder in [passed, empty, older] {
            #expect(!FileManager.default.fileExists(atPath: folder + "/shrink"), "a refused command wrote nothing")
        }
    }

    @Test("a passing run whose report.json claims a violation has nothing to shrink: the records give the verdict")
    func verdictFromRecords() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.passing, directory: directory, timeout: .seconds(120))
        #expect(run.exit == .exited(0) && run.ok, "violations: \(run.violations)")
        // report.json edited by hand to say the run broke guardians-honour-expiry; the records do not show it.
        let reportPath = run.directory + "/report.json"
        var report = try Self.json(reportPath)
        var invariants = try #require(report["invariants"] as? [String: Any])
        invariants["ok"] = false
        invariants["violations"] = [
            [
                "invariant": "guardians-honour-expiry", "questions": [String](), "processes": [String](),
                "message": "claimed by hand",
            ] as [String: Any]
        ]
        report["invariants"] = invariants
        try JSONSerialization.data(withJSONObject: report).write(to: URL(fileURLWithPath: reportPath))
        #expect(Self.broke(try Self.readRun(run.directory), "guardians-honour-expiry"), "the edit did not take")

        for extra in [[], ["--shrink-invariant", "guardians-honour-expiry"]] {
            let refused = try UsageExitTests.Run(["askrelay", "shrink", run.directory] + extra)
            #expect(refused.status == 64, "\(extra): exit \(refused.status); stderr: \(refused.stderr)")
            #expect(
                refused.stderr.contains("every invariant held in that run; there is nothing to shrink"),
                "\(extra): \(refused.stderr)"
            )
            #expect(refused.stderr.contains("report.json is not read"), "\(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: run.directory + "/shrink"), "a refused command wrote nothing")
    }
}
