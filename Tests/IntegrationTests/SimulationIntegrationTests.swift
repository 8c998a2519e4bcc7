import AskCLI
import AskLogging
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// `askrelay simulate` end to end: the real askrelay executable starts the real broker and workers.
@Suite("askrelay simulate end to end", .timeLimit(.minutes(3)), .serialized)
struct SimulationIntegrationTests {
    /// Small and quick (about 5 s in a debug build), yet every outcome and AskError case occurs. A flow that expires
    /// or is abandoned waits out its question, so the 240 flows come from many families with two flows each.
    static let small = """
        {"seed": 11, "families": 60, "flowsPerChild": 2, "childThink": "200ms", "grace": "500ms",
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
        // 60 families × 2 child processes × 2 flows.
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

    @Test("SIGINT of askrelay kills every process it started and exits 130 (128 + SIGINT)")
    func interrupted() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenarioPath = directory.path + "/scenario-in.json"
        try Data(Self.small.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let askrelay = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--scenario", scenarioPath, "--report-dir", directory.path + "/report", "--quiet"],
            logPath: directory.path + "/askrelay.log"
        )
        let line = try askrelay.waitForLine(startingWith: "running:", timeout: .seconds(60))
        let pids = line.dropFirst("running:".count).split(separator: " ").compactMap {
            $0.split(separator: "=").last.flatMap { Int32($0) }
        }
        #expect(pids.count == 6, "\(line)")
        defer { for pid in pids { kill(pid, SIGKILL) } }
        for pid in pids { #expect(kill(pid, 0) == 0, "worker \(pid) should be running") }
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(128 + SIGINT))
        // askrelay reaped its workers before exiting, so none of their pids is alive any more.
        for pid in pids { #expect(kill(pid, 0) == -1 && errno == ESRCH, "worker \(pid) survived") }
        // One prefix, and what it did: killed the processes, removed its socket folder, kept the logs.
        let stderr = SimulationRefusalTests.text(directory.path + "/askrelay.log")
        #expect(stderr.contains("askrelay simulate: interrupted by SIGINT while"), "\(stderr)")
        #expect(!stderr.contains("askrelay simulate: askrelay:"), "\(stderr)")
        #expect(stderr.contains("killed its 6 processes"), "\(stderr)")
        #expect(SimulationRefusalTests.socketFolders(of: askrelay.pid ?? 0).isEmpty)
    }

    @Test("bad usage exits 64 and names the problem")
    func badUsage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenarioPath = directory.path + "/bad.json"
        try Data(#"{"families": 0}"#.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let log = directory.path + "/bad.log"
        let askrelay = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--scenario", scenarioPath],
            logPath: log
        )
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(64))
        let text = String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self)
        #expect(text.contains("'families'"))
    }
}

/// The end of a run and the report folder, tried as a new user would (issue 13).
@Suite("askrelay simulate off the default path", .timeLimit(.minutes(3)), .serialized)
struct SimulationEdgeTests {
    func askrelay(_ arguments: [String], directory: TempDirectory) throws -> (
        exit: ProcessExitStatus, stdout: [String], stderr: String
    ) {
        try Self.askrelay(arguments, directory: directory)
    }

    /// Runs `askrelay ARGUMENTS` to its end with `environment` added (its stderr in a log in `directory`).
    /// - Returns: its exit, stdout lines and stderr.
    static func askrelay(
        _ arguments: [String],
        environment: [String: String] = [:],
        directory: TempDirectory
    ) throws -> (exit: ProcessExitStatus, stdout: [String], stderr: String) {
        let log = directory.path + "/askrelay-\(UUID().uuidString.prefix(6)).log"
        let process = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: arguments,
            environment: environment,
            logPath: log
        )
        let exit = try process.wait(timeout: .seconds(150))
        return (
            exit, process.output, String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self)
        )
    }

    /// A duration shorter than the flows: the children drain what they started and exit by themselves.
    @Test(
        "a duration shorter than the flows ends in a drain, not SIGTERM, and every invariant holds",
        arguments: [
            ["--families", "20", "--duration", "5s"], ["--seed", "7", "--families", "50", "--duration", "15s"],
        ]
    )
    func shortDuration(_ flags: [String]) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate("{}", directory: directory, flags: flags, timeout: .seconds(150))
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        #expect(run.exit == .exited(0))
        #expect(!run.notes.contains { $0.contains("SIGTERM") || $0.contains("fault schedule") }, "\(run.notes)")
        for name in ["child-1", "child-2"] {
            let runs = run.runs(of: name)
            #expect(runs.count == 1 && runs.first?["exitCode"] as? Int == 0, "\(name): \(runs)")
            #expect(runs.first?["expectedSignal"] == nil, "\(name) was signalled: \(runs)")
        }
        #expect(run.outcomes.values.reduce(0, +) > 0)
    }

    @Test("a used report folder is refused (exit 64, nothing changed); --clean empties it and the run starts afresh")
    func reusedReportFolder() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenario = #"{"families": 3, "flowsPerChild": 1, "childThink": "100ms", "duration": "20s"}"#
        let first = try FaultSupport.simulate(scenario, directory: directory)
        #expect(first.ok && first.exit == .exited(0), "\(first.violations)")
        let report = directory.path + "/report"
        let before = try FileManager.default.contentsOfDirectory(atPath: report).sorted()
        let journal = try FileManager.default.attributesOfItem(atPath: report + "/records/child-1.jsonl")

        let again = try askrelay(
            ["simulate", "--scenario", directory.path + "/scenario-in.json", "--report-dir", report, "--quiet"],
            directory: directory
        )
        #expect(again.exit == .exited(64))
        #expect(again.stderr.contains("the report folder '\(report)' is not empty"), "\(again.stderr)")
        #expect(again.stderr.contains("--clean"), "\(again.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: report).sorted() == before)
        #expect(
            try FileManager.default.attributesOfItem(atPath: report + "/records/child-1.jsonl")[.modificationDate]
                as? Date == journal[.modificationDate] as? Date
        )

        let cleaned = try FaultSupport.simulate(scenario, directory: directory, flags: ["--clean"])
        #expect(cleaned.ok && cleaned.exit == .exited(0), "\(cleaned.violations)")
        // Only this run's flows: 3 families × 2 child processes × 1 flow, none learnt from the first run.
        #expect(cleaned.outcomes.values.reduce(0, +) == 6, "\(cleaned.outcomes)")
        let throughput = cleaned.report["throughput_flows_per_s"] as? Double ?? 0
        #expect(throughput > 0)

        // --clean never empties a folder holding something askrelay did not write.
        let foreign = directory.path + "/mine"
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        let refused = try askrelay(["simulate", "--report-dir", foreign, "--clean", "--quiet"], directory: directory)
        #expect(refused.exit == .exited(64))
        #expect(refused.stderr.contains("also holds notes.txt"), "\(refused.stderr)")
        #expect(FileManager.default.fileExists(atPath: foreign + "/notes.txt"))
    }

    @Test("a report folder under a file gets one readable message and exit 64")
    func reportFolderUnderAFile() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let file = directory.path + "/file"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        for command in [["simulate", "--quiet"], ["load", "--duration", "1s"]] {
            let run = try askrelay(command + ["--report-dir", file + "/report"], directory: directory)
            #expect(run.exit == .exited(64), "\(command): \(run.exit)")
            #expect(
                run.stderr.contains("cannot create the report folder '\(file)/report': '\(file)' is a file"),
                "\(run.stderr)"
            )
            #expect(!run.stderr.contains("NSCocoaErrorDomain") && !run.stderr.contains("logs:"), "\(run.stderr)")
        }
    }

    @Test("askrelay load refuses a used --report-dir and says where its files went")
    func loadReportFolder() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/load"
        let flags = ["load", "--duration", "1s", "--warmup", "0s", "--connections", "1", "--report-dir", report]
        let first = try askrelay(flags, directory: directory)
        #expect(first.exit == .exited(0), "\(first.stderr)")
        #expect(first.stdout.contains("report: \(report)/load.json"), "\(first.stdout)")
        #expect(first.stdout.contains("        \(report)/load.html"), "\(first.stdout)")
        let again = try askrelay(flags, directory: directory)
        #expect(again.exit == .exited(64))
        #expect(again.stderr.contains("the report folder '\(report)' is not empty"), "\(again.stderr)")
        let cleaned = try askrelay(flags + ["--clean"], directory: directory)
        #expect(cleaned.exit == .exited(0), "\(cleaned.stderr)")
    }

    @Test("a scenario that is not JSON is refused with its line and column, a trailing comma included")
    func scenarioNotJSON() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cases = [
            (#"{"families": 5,}"#, "line 1, column 16"),
            ("{\n  \"families\": 5\n  \"seed\": 3\n}", "line 3, column 3"),
        ]
        for (text, place) in cases {
            let path = directory.path + "/bad.json"
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            let run = try askrelay(
                ["simulate", "--scenario", path, "--report-dir", directory.path + "/r"],
                directory: directory
            )
            #expect(run.exit == .exited(64))
            #expect(run.stderr.contains("\(path): scenario: not valid JSON at \(place)"), "\(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: directory.path + "/r"), "a refused run created its folder")
        }
    }

    @Test("the children are not started before every worker is registered with the broker")
    func childrenWaitForRegistration() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // A broker endpoint nobody serves: the limits worker can never get its WELCOME, so it must never say ready.
        var options = SimulationOptions(scenario: Scenario(), reportDirectory: directory.path + "/report")
        options.externalBroker = "ipc://\(directory.path)/nobody.ipc"
        options.curve = false
        options.quiet = true
        options.readyTimeout = .seconds(3)
        options.executableDirectory = Executables.built
        let simulation = Simulation(options: options, logger: AskLogger(label: "test", level: .error))
        #expect {
            try simulation.run()
        } throws: { error in
            "\(error)".hasPrefix("limits: did not print 'ready ...' within 3s")
        }
        for name in ["parent-1", "child-1"] {
            #expect(
                !FileManager.default.fileExists(atPath: directory.path + "/report/logs/\(name).log"),
                "\(name) was started"
            )
        }
    }
}

/// What the new user's report found: a refused simulate starts nothing and creates nothing; a live run's folder is
/// never emptied; Ctrl-C at any phase cleans up and says what it did.
@Suite("askrelay simulate refuses before it starts, and cleans up after Ctrl-C", .timeLimit(.minutes(3)), .serialized)
struct SimulationRefusalTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// askrelay with `arguments`, running; stderr goes to a file in `directory`.
    static func start(_ arguments: [String], _ directory: TempDirectory) throws -> (
        process: RelayProcess, stderr: String
    ) {
        let log = directory.path + "/askrelay-\(UUID().uuidString.prefix(6)).log"
        let process = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: arguments,
            logPath: log
        )
        return (process, log)
    }

    static func text(_ path: String) -> String {
        String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
    }

    /// The socket folders `/tmp/askrelay-sim-<pid>-*` of the askrelay with `pid`.
    static func socketFolders(of pid: Int32) -> [String] {
        let temporary = NSTemporaryDirectory()
        return ((try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []).filter {
            $0.hasPrefix("askrelay-sim-\(pid)-")
        }
    }

    @Test("a second simulate on a live run's folder, with or without --clean, is refused with the first's pid")
    func liveFolderIsNotEmptied() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenario =
            #"{"families": 3, "flowsPerChild": 3, "childThink": "700ms", "grace": "500ms", "duration": "30s"}"#
        let report = directory.path + "/report"
        var refusals: [(exit: ProcessExitStatus, stderr: String)] = []
        var holder = ""
        let first = try FaultSupport.simulate(scenario, directory: directory) { pids in
            // The first run holds the folder from before its processes start until it ends.
            holder = Self.text(report + "/simulate.lock").trimmingCharacters(in: .whitespacesAndNewlines)
            for flags in [["--clean"], []] {
                let (second, log) = try Self.start(
                    ["simulate", "--scenario", directory.path + "/scenario-in.json", "--report-dir", report, "--quiet"]
                        + flags,
                    directory
                )
                refusals.append((try second.wait(timeout: .seconds(120)), Self.text(log)))
            }
            #expect(FileManager.default.fileExists(atPath: report + "/scenario.json"))
            #expect(FileManager.default.fileExists(atPath: report + "/keys"))
            if let broker = pids["broker"] { #expect(kill(broker, 0) == 0, "the first run's broker is gone") }
        }
        #expect(Int32(holder) != nil, "simulate.lock held '\(holder)'")
        #expect(refusals.count == 2)
        for refusal in refusals {
            #expect(refusal.exit == .exited(64), "\(refusal.stderr)")
            #expect(refusal.stderr.contains("'\(report)' is in use by process \(holder)"), "\(refusal.stderr)")
            #expect(!refusal.stderr.contains("add --clean"), "\(refusal.stderr)")
        }
        #expect(first.exit == .exited(0) && first.ok, "violations: \(first.violations); notes: \(first.notes)")
    }

    @Test("a bad --endpoint for the scenario or a --wrap-* program that does not exist: exit 64, nothing created")
    func badValuesStartNothing() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let faults = Self.root.appendingPathComponent("docs/scenarios/faults.json").path
        let cases: [([String], String)] = [
            (
                ["--endpoint", "tcp://127.0.0.1:*", "--scenario", faults],
                "option '--endpoint': a '*' port cannot go with faults[0]"
            ),
            (["--wrap-child", "nosuchwrapper"], "option '--wrap-child': 'nosuchwrapper' is not a program on PATH"),
        ]
        for (flags, message) in cases {
            let report = directory.path + "/r-\(UUID().uuidString.prefix(6))"
            let (askrelay, log) = try Self.start(
                ["simulate", "--report-dir", report, "--quiet"] + flags,
                directory
            )
            let pid = askrelay.pid ?? 0
            #expect(try askrelay.wait(timeout: .seconds(60)) == .exited(64), "\(flags): \(Self.text(log))")
            #expect(Self.text(log).contains(message), "\(flags): \(Self.text(log))")
            #expect(!FileManager.default.fileExists(atPath: report), "\(flags): the report folder was created")
            #expect(Self.socketFolders(of: pid).isEmpty, "\(flags): a socket folder was made")
        }
        // The same flags with a wrapper that exists start every process, into the report folder.
        let report = directory.path + "/wrapped"
        let (askrelay, _) = try Self.start(
            ["simulate", "--report-dir", report, "--quiet", "--families", "2", "--wrap-child", "env"],
            directory
        )
        _ = try askrelay.waitForLine(startingWith: "running:", timeout: .seconds(60))
        #expect(FileManager.default.fileExists(atPath: report + "/logs/child-1.log"))
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(128 + SIGINT))
    }

    @Test("time scale 1 makes the drain last a day: refused up front with the bound and the flag that accepts it")
    func longDrainIsRefused() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let small = Self.root.appendingPathComponent("docs/scenarios/small.json").path
        let report = directory.path + "/slow"
        let flags = [
            "simulate", "--scenario", small, "--families", "10", "--duration", "3s", "--time-scale", "1",
            "--report-dir", report, "--quiet",
        ]
        let refused = try UsageExitTests.Run(["askrelay"] + flags)
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("with time scale 1"), "\(refused.stderr)")
        #expect(refused.stderr.contains("--allow-long-drain (ASKRELAY_ALLOW_LONG_DRAIN)"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: report))
        // The flag accepts it: the run starts (and is interrupted here).
        let (askrelay, log) = try Self.start(flags + ["--allow-long-drain"], directory)
        _ = try askrelay.waitForLine(startingWith: "running:", timeout: .seconds(60))
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(128 + SIGINT), "\(Self.text(log))")
    }

    @Test("--families' range is in --help; a scenario's families out of it, or a JSON array, is refused with exit 64")
    func scenarioRanges() throws {
        let help = try UsageExitTests.Run(["askrelay", "simulate", "--help"])
        #expect(help.stdout.contains("1...1000000"), "\(help.stdout)")
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cases = [
            (#"{"families": 1e9}"#, "scenario field 'families': needs a whole number in 1...1000000, got 1000000000"),
            ("[]", "scenario: the file holds a JSON array (line 1, column 1), but a scenario is one JSON object"),
        ]
        for (json, message) in cases {
            let path = directory.path + "/scenario.json"
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            let run = try UsageExitTests.Run(
                ["askrelay", "simulate", "--scenario", path, "--report-dir", directory.path + "/r"]
            )
            #expect(run.status == 64, "\(run.stderr)")
            #expect(run.stderr.contains("\(path): \(message)"), "\(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: directory.path + "/r"))
        }
    }

    @Test("Ctrl-C while the processes drain: no report from a cut-short run, the logs kept, and it says so")
    func interruptedWhileDraining() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // The parents run under a wrapper that notes the drain's SIGTERM in a file and does not pass it on, so the
        // drain is held (up to its 15 s) until the SIGINT: the SIGINT lands in the drain by construction. (Stopping
        // a parent does not hold it: the drain's SIGTERM comes with SIGCONT.) Every process of the run is in a
        // process group of its own, killed at the end: the held parents outlive their wrappers' SIGKILL.
        let wrapper = directory.path + "/hold-term.sh"
        try """
        #!/bin/sh
        trap 'touch "$0.term"' TERM
        "$@" &
        child=$!
        while kill -0 "$child" 2>/dev/null; do wait "$child"; done
        """.write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        let scenario = #"{"families": 3, "flowsPerChild": 2, "childThink": "100ms", "grace": "500ms"}"#
        let scenarioPath = directory.path + "/scenario-in.json"
        try Data(scenario.utf8).write(to: URL(fileURLWithPath: scenarioPath))
        let group = try ProcessGroupGuard()
        defer { group.release() }
        let report = directory.path + "/report"
        let log = directory.path + "/askrelay.log"
        let askrelay = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: [
                "simulate", "--scenario", scenarioPath, "--report-dir", report, "--quiet", "--wrap-parent", wrapper,
            ],
            logPath: log,
            processGroup: group.processGroup
        )
        _ = try askrelay.waitForLine(startingWith: "running:", timeout: .seconds(60))
        // The drain has begun once a parent's wrapper got its SIGTERM.
        let deadline = ContinuousClock.now + .seconds(90)
        while !FileManager.default.fileExists(atPath: wrapper + ".term") && askrelay.isRunning
            && ContinuousClock.now < deadline
        {
            _ = try? askrelay.wait(timeout: .milliseconds(20))
        }
        try #require(FileManager.default.fileExists(atPath: wrapper + ".term"), "the drain never began")
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(60)) == .exited(128 + SIGINT))
        let stderr = Self.text(log)
        #expect(stderr.contains("askrelay simulate: interrupted by SIGINT while stopping the processes"), "\(stderr)")
        #expect(stderr.contains("kept \(report) with the logs (no report)"), "\(stderr)")
        #expect(!FileManager.default.fileExists(atPath: report + "/report.json"))
        #expect(FileManager.default.fileExists(atPath: report + "/logs/parent-1.log"))
        #expect(Self.socketFolders(of: askrelay.pid ?? 0).isEmpty)
    }

    @Test("Ctrl-C while the run is set up removes its socket folder and the half-made report folder, and says so")
    func interruptedWhileSettingUp() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/big"
        let (askrelay, log) = try Self.start(
            ["simulate", "--families", "1000000", "--report-dir", report, "--quiet"],
            directory
        )
        let pid = askrelay.pid ?? 0
        // The run's first act is to take its folder's lock, with its pid in it.
        let deadline = ContinuousClock.now + .seconds(60)
        while Self.text(report + "/simulate.lock") != "\(pid)\n" && ContinuousClock.now < deadline
            && askrelay.isRunning
        {
            _ = try? askrelay.wait(timeout: .milliseconds(20))
        }
        #expect(Self.text(report + "/simulate.lock") == "\(pid)\n", "the run never took its folder")
        askrelay.signal(SIGINT)
        #expect(try askrelay.wait(timeout: .seconds(60)) == .exited(128 + SIGINT))
        let stderr = Self.text(log)
        #expect(stderr.contains("askrelay simulate: interrupted by SIGINT while setting up the run"), "\(stderr)")
        #expect(stderr.contains("removed \(report)"), "\(stderr)")
        #expect(!FileManager.default.fileExists(atPath: report), "the half-made report folder is still there")
        #expect(Self.socketFolders(of: pid).isEmpty, "its socket folder is still there")
    }
}
