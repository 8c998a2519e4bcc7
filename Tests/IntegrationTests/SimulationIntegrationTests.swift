import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// `askrelay simulate` end to end: the real askrelay executable starts the real broker and workers.
@Suite("askrelay simulate end to end", .timeLimit(.minutes(3)), .serialized)
struct SimulationIntegrationTests {
    /// Small and quick (about 15 s in a debug build), yet every outcome and AskError case occurs.
    static let small = """
        {"seed": 11, "families": 30, "flowsPerChild": 4, "childThink": "200ms", "grace": "500ms",
         "ratios": {"limitsEnabled": 0.9, "contactSyncSetUp": 0.9, "eligible": 0.9, "knownHandle": 0.2},
         "invalidRatio": 0.08, "cancelProbability": 0.15, "abandonProbability": 0.06,
         "guardians": {"approveProbability": 0.6, "neverAnswerRatio": 0.2, "think": "exponential:100ms"},
         "duration": "40s"}
        """

    typealias Run = FaultSupport.Run

    /// Runs `askrelay simulate` with `scenario` (JSON) and extra flags; returns its exit and report.json.
    func simulate(_ scenario: String, _ flags: [String] = [], directory: TempDirectory) throws -> Run {
        try FaultSupport.simulate(scenario, directory: directory, flags: flags, timeout: .seconds(150))
    }

    func violations(_ run: Run) -> [[String: Any]] {
        ((run.report["invariants"] as? [String: Any])?["violations"] as? [[String: Any]]) ?? []
    }

    func ok(_ run: Run) -> Bool? { (run.report["invariants"] as? [String: Any])?["ok"] as? Bool }

    @Test("a small seeded simulation shows every outcome and keeps every invariant")
    func everyOutcome() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try simulate(Self.small, directory: directory)
        #expect(ok(run) == true, "violations: \(violations(run))")
        #expect(run.exit == .exited(0))
        let outcomes = try #require(run.report["outcomes"] as? [String: Int])
        for outcome in ["approved", "denied", "cancelled", "expired", "abandoned", "known-handle", "refused"] {
            #expect((outcomes[outcome] ?? 0) > 0, "no '\(outcome)' flow: \(outcomes)")
        }
        let askErrors = try #require(run.report["askErrors"] as? [String: Int])
        for error in ["communicationLimitsNotEnabled", "contactSyncNotSetup", "notAvailable", "invalidQuestion"] {
            #expect((askErrors[error] ?? 0) > 0, "no '\(error)': \(askErrors)")
        }
        // 30 families × 2 child processes × 4 flows.
        #expect(outcomes.values.reduce(0, +) == 240)
        let latency = try #require(run.report["latency_ms"] as? [String: [String: Double]])
        #expect((latency["end_to_end"]?["p50"] ?? 0) > 0)
        // The guardian cannot hold the question before the child sent it (the child's send time is taken before
        // the broker's ACK, which the broker sends after delivering).
        #expect((latency["send_to_delivered"]?["p50"] ?? -1) >= 0, "\(latency)")
        #expect(run.stdout.contains { $0.hasPrefix("invariants       OK") })
        #expect(run.stdout.contains { $0.hasPrefix("report: ") })
        #expect(FileManager.default.fileExists(atPath: run.directory + "/report.html"))
        for name in ["broker", "limits", "parent-1", "parent-2", "child-1", "child-2"] {
            #expect(FileManager.default.fileExists(atPath: run.directory + "/logs/\(name).log"), "\(name).log")
        }
    }

    @Test("SIGKILL of the broker mid-run, then a restart from its journal: every invariant still holds")
    func brokerKilled() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // A 4 s pending window (48h / 43 200) and no earlier expiry: the outage (restart + the workers noticing,
        // about 2 s) does not outlast a question, so nothing expires while nobody could act on it.
        let scenario = """
            {"seed": 5, "families": 30, "flowsPerChild": 4, "childThink": "300ms", "grace": "500ms",
             "expireAfter": null, "timeScale": 43200, "abandonProbability": 0, "duration": "60s",
             "guardians": {"approveProbability": 0.6, "neverAnswerRatio": 0.1, "think": "exponential:100ms"},
             "faults": [{"at": "1s", "process": "broker", "action": "kill", "restartAfter": "200ms"}]}
            """
        let run = try simulate(scenario, directory: directory)
        #expect(ok(run) == true, "violations: \(violations(run))")
        #expect(run.exit == .exited(0))
        let processes = try #require(run.report["processes"] as? [[String: Any]])
        let broker = try #require(processes.first { $0["name"] as? String == "broker" })
        let runs = try #require(broker["runs"] as? [[String: Any]])
        #expect(runs.count == 2, "the broker ran \(runs.count) time(s)")
        #expect(runs.first?["signal"] as? Int == Int(SIGKILL))
        #expect(runs.last?["exitCode"] as? Int == 0)
        let outcomes = try #require(run.report["outcomes"] as? [String: Int])
        #expect((outcomes["approved"] ?? 0) > 0 && (outcomes["expired"] ?? 0) > 0)
    }

    @Test("guardians answering after expiry (--answer-after-expiry) fail the check: the checker can fail")
    func brokenRunIsCaught() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenario = """
            {"seed": 3, "families": 10, "flowsPerChild": 2, "childThink": "100ms", "grace": "500ms",
             "cancelProbability": 0, "abandonProbability": 0, "invalidRatio": 0, "answerAfterExpiry": true,
             "guardians": {"neverAnswerRatio": 0}}
            """
        let run = try simulate(scenario, directory: directory)
        #expect(ok(run) == false)
        #expect(run.exit == .exited(1))
        let broken = violations(run).filter { $0["invariant"] as? String == "guardians-honour-expiry" }
        #expect(!broken.isEmpty, "violations: \(violations(run))")
        #expect((broken.first?["questions"] as? [String])?.isEmpty == false)
        #expect(run.stdout.contains { $0.contains("FAILED") })
    }

    @Test("SIGINT of askrelay kills every process it started and exits 1")
    func interrupted() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenarioPath = directory.path + "/scenario-in.json"
        try Data(Self.small.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let askrelay = try supervisor.start(
            name: "askrelay",
            executable: TestProcess.binDirectory.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--scenario", scenarioPath, "--report-dir", directory.path + "/report", "--quiet"],
            logPath: directory.path + "/askrelay.log"
        )
        let line = try askrelay.waitForLine(prefix: "running:", timeout: .seconds(60))
        let pids = line.dropFirst("running:".count).split(separator: " ").compactMap {
            $0.split(separator: "=").last.flatMap { Int32($0) }
        }
        #expect(pids.count == 6, "\(line)")
        defer { for pid in pids { kill(pid, SIGKILL) } }
        for pid in pids { #expect(kill(pid, 0) == 0, "worker \(pid) should be running") }
        askrelay.signal(SIGINT)
        #expect(try askrelay.waitForExit(timeout: .seconds(30)) == .exited(1))
        // askrelay reaped its workers before exiting, so none of their pids is alive any more.
        for pid in pids { #expect(kill(pid, 0) == -1 && errno == ESRCH, "worker \(pid) survived") }
    }

    @Test("bad usage exits 64 and names the problem")
    func badUsage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let scenarioPath = directory.path + "/bad.json"
        try Data(#"{"families": 0}"#.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let log = directory.path + "/bad.log"
        let askrelay = try supervisor.start(
            name: "askrelay",
            executable: TestProcess.binDirectory.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--scenario", scenarioPath],
            logPath: log
        )
        #expect(try askrelay.waitForExit(timeout: .seconds(30)) == .exited(64))
        let text = String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self)
        #expect(text.contains("'families'"))
    }
}
