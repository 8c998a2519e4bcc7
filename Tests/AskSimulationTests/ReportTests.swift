import AskTestKit
import AskAgents
import Foundation
import Testing

@testable import AskSimulation

@Suite("Simulation report", .timeLimit(.minutes(1)))
struct ReportTests {
    func report(_ run: SyntheticRun = SyntheticRun()) -> SimulationReport {
        SimulationReport.build(
            scenario: Scenario(),
            broker: "internal",
            startedAt: run.t0,
            wallSeconds: 4.2,
            childRecords: run.children,
            guardianRecords: run.guardians,
            invariants: run.check(),
            processes: run.processes
        )
    }

    @Test("report.json has the required keys and counts")
    func jsonKeys() throws {
        let scratch = TempDirectory(prefix: "report")
        let directory = scratch.path + "/report"
        let paths = try report().write(to: directory)
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: paths.json))) as? [String: Any]
        )
        let invariants = try #require(object["invariants"] as? [String: Any])
        #expect(invariants["ok"] as? Bool == true)
        #expect((invariants["violations"] as? [Any])?.isEmpty == true)
        let outcomes = try #require(object["outcomes"] as? [String: Int])
        for outcome in FlowOutcome.allCases { #expect(outcomes[outcome.rawValue] != nil, "\(outcome)") }
        #expect(outcomes["approved"] == 1 && outcomes["refused"] == 2 && outcomes["known-handle"] == 1)
        #expect(object["askErrors"] as? [String: Int] == ["communicationLimitsNotEnabled": 1, "invalidQuestion": 1])
        let latency = try #require(object["latency_ms"] as? [String: [String: Double]])
        for stage in ["ask_to_presented", "send_to_delivered", "answer_to_response", "end_to_end"] {
            let entry = try #require(latency[stage], "\(stage)")
            for key in ["p50", "p90", "p99", "max"] { #expect(entry[key] != nil, "\(stage).\(key)") }
        }
        #expect(abs((latency["end_to_end"]?["p50"] ?? 0) - 500) < 0.01)
        #expect(abs((latency["send_to_delivered"]?["max"] ?? 0) - 10) < 0.01)
        #expect(object["questions"] as? Int == 7)
        #expect(object["seed"] as? Int == 42)
        #expect((object["scenario"] as? [String: Any])?["families"] as? Int == 240)
        #expect(object["throughput_flows_per_s"] is Double)
    }

    @Test("latencies to the microsecond; the table shows three significant digits")
    func microsecondLatency() throws {
        var run = SyntheticRun()
        for name in run.ids.keys {
            run.editChild(name) { record in
                if let asked = record.askedAt, record.presentedAt != nil {
                    record.presentedAt = asked.addingTimeInterval(0.000_412)
                }
            }
        }
        let built = report(run)
        let stage = try #require(built.latencyMs["ask_to_presented"])
        #expect(abs(stage.p50 - 0.412) < 0.000_5, "\(stage)")
        let line = try #require(built.summaryTable.split(separator: "\n").first { $0.contains("ask → presented") })
        #expect(line.contains(" 0.412 "), "\(line)")
        #expect(SimulationReport.significant(45.678) == "45.7" && SimulationReport.significant(3.2109) == "3.21")
        #expect(SimulationReport.significant(1234.5) == "1234" && SimulationReport.significant(0) == "0")
    }

    @Test("a failed check shows in report.json with the invariant and the question id")
    func jsonViolation() throws {
        var run = SyntheticRun()
        run.editChild("cancelled") { $0.responsesSurfaced = 1 }
        let data = try report(run).jsonData()
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let invariants = try #require(object["invariants"] as? [String: Any])
        #expect(invariants["ok"] as? Bool == false)
        let violations = try #require(invariants["violations"] as? [[String: Any]])
        let violation = try #require(violations.first { $0["invariant"] as? String == "cancelled-never-responds" })
        #expect((violation["questions"] as? [String])?.contains(run.ids["cancelled"]!.uuidString) == true)
    }

    @Test("report.html is self-contained with both charts; the summary table names every outcome")
    func html() {
        let report = report()
        let html = ReportHTML.render(report)
        #expect(html.components(separatedBy: "<svg").count - 1 == 2)
        #expect(!html.contains("src=") && !html.contains("href=") && !html.contains("@import"))
        #expect(html.contains("invariants OK"))
        let table = report.summaryTable
        for outcome in FlowOutcome.allCases { #expect(table.contains(outcome.rawValue)) }
        #expect(table.contains("invalidQuestion"))
        #expect(table.contains("invariants       OK"))
    }

    @Test("nearest-rank percentiles")
    func percentiles() {
        let values = Percentiles((1...100).map(Double.init).reversed())
        #expect(values.value(50) == 50)
        #expect(values.value(90) == 90)
        #expect(values.value(99) == 99)
        #expect(values.value(100) == 100)
        #expect(Percentiles([7]).value(99) == 7)
        #expect(Percentiles([]).summary == StageLatency(count: 0, p50: 0, p90: 0, p99: 0, max: 0))
    }

    @Test("the progress line shows asked, sent, answered, expired, flows per second and processes")
    func progressLine() {
        let sample = ProgressSample(
            elapsed: 12,
            asked: 830,
            sent: 700,
            answered: 520,
            expired: 40,
            flows: 900,
            flowsPerSecond: 75,
            alive: 7,
            processes: 7
        )
        #expect(sample.line == "  12s asked 830 sent 700 answered 520 expired 40 | flows 900 (75.0/s) | processes 7/7")
        var counter = LineCounter(paths: ["/nonexistent"])
        #expect(counter.count() == 0)
    }
}
