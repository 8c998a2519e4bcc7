import AskCLI
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// `askrelay load --mode flows` and `--sweep` end to end: the real askrelay executable starts the real broker,
/// limits and parent processes and drives complete ask flows through them.
@Suite("askrelay load flows end to end", .timeLimit(.minutes(2)), .serialized)
struct FlowLoadTests {
    struct Run {
        var exit: ProcessExitStatus
        var report: [String: Any]
        var html: String
        var stdout: [String]
    }

    /// Runs `askrelay load <flags> --report-dir <tmp>`; returns its exit, load.json, load.html and stdout.
    func load(_ flags: [String], directory: TempDirectory) throws -> Run {
        let reportDirectory = directory.path + "/report"
        let askrelay = try RelayProcess(
            "askrelay",
            ["load"] + flags + ["--report-dir", reportDirectory],
            logPath: directory.path + "/askrelay.log"
        )
        // The last stdout line is read by then (stdout is read on another thread than the exit is seen on).
        _ = try? askrelay.waitForLine(startingWith: "throughput=", timeout: .seconds(60))
        let exit = try askrelay.wait(timeout: .seconds(60))
        let log = String(
            decoding: FileManager.default.contents(atPath: directory.path + "/askrelay.log") ?? Data(),
            as: UTF8.self
        )
        let data = try #require(
            FileManager.default.contents(atPath: reportDirectory + "/load.json"),
            "no load.json; askrelay \(exit); stderr:\n\(log.suffix(3000))"
        )
        let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let html = String(
            decoding: FileManager.default.contents(atPath: reportDirectory + "/load.html") ?? Data(),
            as: UTF8.self
        )
        return Run(exit: exit, report: report, html: html, stdout: askrelay.output)
    }

    func percentilesOrdered(_ latency: [String: Any]?) -> Bool {
        guard let latency else { return false }
        let values = ["min_us", "p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"].map { latency[$0] as? Double ?? -1 }
        return values.allSatisfy { $0 >= 0 } && zip(values, values.dropFirst()).allSatisfy { $0 <= $1 }
    }

    @Test(
        "a small pending fill: every question pending, the broker killed and restarted on its journal, figures present"
    )
    func smallPendingFill() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let reportDirectory = directory.path + "/report"
        let askrelay = try RelayProcess(
            "askrelay",
            [
                "load", "--mode", "pending", "--endpoints", "30", "--families", "10", "--questions", "120",
                "--inflight", "20",
                "--report-dir", reportDirectory,
            ],
            logPath: directory.path + "/askrelay.log"
        )
        let last = try askrelay.waitForLine(startingWith: "pending=", timeout: .seconds(90))
        #expect(try askrelay.wait(timeout: .seconds(30)) == .exited(0))
        #expect(last.hasPrefix("pending=120 "), "last line: \(last)")
        let data = try #require(FileManager.default.contents(atPath: reportDirectory + "/load.json"))
        let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let fill = try #require(report["fill"] as? [String: Any])
        #expect(fill["pending"] as? Int == 120)
        #expect(fill["asked"] as? Int == 120)
        #expect(fill["refused"] as? Int == 0, "refusals: \(fill["error_samples"] ?? "")")
        #expect(fill["reregistered"] as? Int == 0)
        #expect((report["recovery_s"] as? Double ?? 0) > 0)
        for key in [
            "broker_rss_start_kib", "broker_rss_registered_kib", "broker_rss_filled_kib", "broker_rss_recovered_kib",
        ] {
            #expect((report[key] as? Int ?? 0) > 0, "\(key)")
        }
        // The restarted broker found every question and its queued copy in the journal: its log line is in the
        // broker's log file in the run's folder, not mixed into askrelay's stderr, which names that folder once.
        let stderr = String(
            decoding: FileManager.default.contents(atPath: directory.path + "/askrelay.log") ?? Data(),
            as: UTF8.self
        )
        let brokerLog = String(
            decoding: FileManager.default.contents(atPath: reportDirectory + "/logs/broker.log") ?? Data(),
            as: UTF8.self
        )
        #expect(brokerLog.contains("open_questions=120"), "broker.log: \(brokerLog.suffix(2000))")
        #expect(!stderr.contains("open_questions="), "stderr: \(stderr.suffix(2000))")
        #expect(stderr.components(separatedBy: reportDirectory + "/logs").count == 2, "stderr: \(stderr)")
    }

    /// The pids of the running children of `parent` (from /proc).
    static func children(of parent: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
            else { return false }
            // "pid (comm) state ppid ...": the askrelay executables only, not the process-group guard (/bin/sh).
            let name = stat[stat.index(after: open)..<close]
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return name.hasPrefix("askrelay-") && fields.count > 1 && Int32(fields[1]) == parent
        }
    }

    @Test(
        "SIGINT while measuring: the processes stop, the summary so far is printed (interrupted), the report is written, exit 130"
    )
    func interruptedRun() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let reportDirectory = directory.path + "/report"
        let stderrPath = directory.path + "/askrelay.log"
        let askrelay = try RelayProcess(
            "askrelay",
            [
                "load", "--mode", "relay", "--duration", "10m", "--warmup", "0s", "--connections", "1",
                "--echo-workers", "1", "--report-dir", reportDirectory, "--threshold", "errors==0",
            ],
            logPath: stderrPath
        )
        // The signal goes once a progress line says the run is measuring and has completed round trips.
        let deadline = ContinuousClock.now + .seconds(60)
        var measuring: String?
        while measuring == nil && ContinuousClock.now < deadline && askrelay.isRunning {
            let stderr = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
            measuring = stderr.split(separator: "\n").first {
                $0.contains(" measuring: ") && !$0.contains(" 0 completed")
            }.map(String.init)
            if measuring == nil { _ = try? askrelay.wait(timeout: .milliseconds(50)) }  // a poll with a deadline
        }
        try #require(measuring != nil, "no progress line while measuring; running: \(askrelay.isRunning)")
        let started = Self.children(of: askrelay.pid ?? 0)
        #expect(!started.isEmpty, "the broker askrelay started is not among its children")
        defer { for pid in started { kill(pid, SIGKILL) } }
        askrelay.signal(SIGINT)
        let exit = try askrelay.wait(timeout: .seconds(30))
        let stderr = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        #expect(exit == .exited(130), "stderr: \(stderr.suffix(2000))")
        let stdout = askrelay.output
        #expect(stdout.contains { $0.hasPrefix("interrupted by SIGINT after ") }, "\(stdout)")
        #expect(stdout.contains { $0.hasPrefix("threshold errors==0: ") }, "\(stdout)")
        let last = try #require(stdout.last, "no stdout")
        let throughput = last.hasPrefix("throughput=") ? Double(last.dropFirst("throughput=".count)) : nil
        #expect((throughput ?? 0) > 0, "last line: \(last)")
        // What it started is gone: askrelay stopped it before it exited.
        for pid in started { #expect(kill(pid, 0) == -1 && errno == ESRCH, "process \(pid) still exists") }
        let data = try #require(
            FileManager.default.contents(atPath: reportDirectory + "/load.json"),
            "no load.json; stderr: \(stderr.suffix(2000))"
        )
        let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(report["interrupted"] as? String == "SIGINT")
        let ours = try #require(report["ours"] as? [String: Any])
        let measured = ours["measured_s"] as? Double ?? 0
        #expect(measured > 0 && measured < 600, "measured_s \(measured)")
        #expect((ours["measured_completed"] as? Int ?? 0) > 0)
        #expect(FileManager.default.fileExists(atPath: reportDirectory + "/load.html"))
    }

    @Test("a short closed-loop flows run: figures present and sane, HTML with SVG charts")
    func shortFlows() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try load(
            [
                "--mode", "flows", "--endpoints", "40", "--families", "10", "--guardians-per-family", "2", "--parents",
                "2",
                "--connections", "2", "--inflight", "8", "--duration", "1500ms", "--warmup", "250ms",
            ],
            directory: directory
        )
        #expect(run.exit == .exited(0))
        #expect(run.report["mode"] as? String == "flows")
        #expect(run.report["durability"] as? String == "batch")
        #expect((run.report["cores"] as? Int ?? 0) >= 1)
        #expect((run.report["command_line"] as? String ?? "").contains("--mode flows"))
        let flows = try #require(run.report["flows"] as? [String: Any])
        let started = flows["started"] as? Int ?? -1
        let completed = flows["completed"] as? Int ?? -1
        let inFlight = flows["in_flight_at_end"] as? Int ?? -1
        #expect((flows["throughput_flows_s"] as? Double ?? 0) > 0)
        #expect(completed > 0)
        #expect(flows["errors"] as? Int == 0, "errors: \(flows["error_samples"] ?? "")")
        #expect(completed == started - inFlight)
        for stage in ["ask_to_presented", "send_to_response", "end_to_end"] {
            let latency = flows[stage] as? [String: Any]
            #expect(percentilesOrdered(latency), "\(stage): \(latency ?? [:])")
            #expect((latency?["count"] as? Int ?? 0) > 0)
        }
        // End to end covers both stages.
        let endToEnd = (flows["end_to_end"] as? [String: Any])?["p50_us"] as? Double ?? 0
        let ask = (flows["ask_to_presented"] as? [String: Any])?["p50_us"] as? Double ?? 0
        #expect(endToEnd >= ask)
        #expect(!(run.report["throughput_samples"] as? [Any] ?? []).isEmpty)
        let cpu = run.report["cpu_per_flow_us"] as? [String: Double] ?? [:]
        #expect(Set(cpu.keys) == ["broker", "limits", "parent-1", "parent-2", "load"], "cpu: \(cpu)")
        #expect(run.stdout.last?.hasPrefix("throughput=") == true, "stdout: \(run.stdout)")
        #expect(run.html.contains("<svg"))
    }

    @Test("a short open-loop sweep gives ordered steps, a knee and a latency-against-rate chart")
    func shortSweep() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try load(
            [
                "--mode", "flows", "--sweep", "--sweep-start", "20", "--sweep-factor", "2", "--sweep-steps", "3",
                "--max-p99", "2s", "--endpoints", "10", "--families", "5", "--duration", "700ms", "--warmup", "0s",
            ],
            directory: directory
        )
        #expect(run.exit == .exited(0))
        let sweep = try #require(run.report["sweep"] as? [String: Any])
        let steps = try #require(sweep["steps"] as? [[String: Any]])
        #expect(!steps.isEmpty && steps.count <= 3)
        let rates = steps.map { $0["target_rate"] as? Double ?? 0 }
        #expect(zip(rates, rates.dropFirst()).allSatisfy { $0 < $1 }, "rates \(rates)")
        // Steps continue only while sustainable: every step but the last is ok.
        #expect(steps.dropLast().allSatisfy { $0["ok"] as? Bool == true })
        let knee = try #require(sweep["knee_rate"] as? Double, "no knee: \(steps)")
        #expect(rates.contains(knee))
        #expect(steps.allSatisfy { ($0["flows"] as? [String: Any]) != nil })
        #expect(run.stdout.last?.hasPrefix("throughput=") == true)
        #expect(run.stdout.last?.contains("knee=") == true)
        #expect(run.html.contains("Latency against rate"))
        #expect(run.html.contains("<svg"))
    }

    @Test("a relay sweep of two tiny steps writes its steps and knee")
    func relaySweep() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try load(
            [
                "--mode", "relay", "--sweep", "--sweep-start", "200", "--sweep-steps", "2", "--max-p99", "1s",
                "--connections", "1", "--echo-workers", "1", "--duration", "500ms", "--warmup", "0s",
            ],
            directory: directory
        )
        #expect(run.exit == .exited(0))
        let sweep = try #require(run.report["sweep"] as? [String: Any])
        let steps = try #require(sweep["steps"] as? [[String: Any]])
        #expect(steps.map { $0["target_rate"] as? Double ?? 0 } == [200, 300])
        #expect(sweep["knee_rate"] as? Double == 300, "steps: \(steps)")
        #expect(
            run.stdout.last
                == "throughput=\(String(format: "%.0f", (steps.last?["achieved_rate"] as? Double) ?? -1)) knee=300 knee_found=false"
        )
    }

    @Test("bad flows usage exits 64")
    func badUsage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let askrelay = try RelayProcess(
            "askrelay",
            ["load", "--mode", "flows", "--endpoints", "2", "--families", "5"],
            logPath: directory.path + "/askrelay.log"
        )
        #expect(try askrelay.wait(timeout: .seconds(20)) == .exited(64))
    }
}
