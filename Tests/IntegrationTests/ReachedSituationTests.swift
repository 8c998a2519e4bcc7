import AskProtocol
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// Reached situations end to end (issue 28): the real broker and child workers count them into the report folder,
/// the summary and report.json show them, and a scenario's `expect.reached` fails a run that never reached one
/// with exit 2 (askrelay check agrees: FaultSupport checks every run again).
@Suite("askrelay simulate: reached situations", .timeLimit(.minutes(4)), .serialized)
struct ReachedSituationTests {
    static func reached(_ run: FaultSupport.Run) -> [String: [String: Any]] {
        let entries = run.report["reached"] as? [[String: Any]] ?? []
        return Dictionary(uniqueKeysWithValues: entries.map { ($0["situation"] as? String ?? "", $0) })
    }

    @Test("docs/scenarios/reached.json reaches the four situations it requires, counted by the broker, and exits 0")
    func exampleScenario() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenario = try String(
            contentsOf: Repository.root.appendingPathComponent("docs/scenarios/reached.json"),
            encoding: .utf8
        )
        let run = try FaultSupport.simulate(scenario, directory: directory)
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        #expect(run.exit == .exited(0), "\(run.exit)")
        let reached = Self.reached(run)
        #expect(reached.keys.sorted() == ReachedSituation.allCases.map(\.rawValue).sorted())
        for name in ["guardians-racing", "answer-while-child-away", "response-after-restart", "send-racing-cancel"] {
            let entry = try #require(reached[name], "\(name) missing: \(reached)")
            #expect(entry["required"] as? Bool == true)
            #expect((entry["count"] as? Int ?? 0) > 0, "\(name): \(entry)")
            #expect((entry["processes"] as? [String: Int])?.keys.sorted() == ["broker"], "\(name): \(entry)")
            #expect(!((entry["questions"] as? [String]) ?? []).isEmpty, "\(name): \(entry)")
        }
        #expect(reached["answer-near-expiry"]?["required"] as? Bool == false)
        // Both ends of the race: a cancel that won ends its flow cancelled, a send that won is answered.
        #expect((run.outcomes["cancelled"] ?? 0) > 0, "\(run.outcomes)")
        #expect((run.outcomes["approved"] ?? 0) + (run.outcomes["denied"] ?? 0) > 0, "\(run.outcomes)")
        #expect(run.stdout.contains { $0.hasPrefix("reached ") && $0.contains("of 6 situations") })
        #expect(run.stdout.contains { $0.hasPrefix("  answer-while-child-away") && $0.hasSuffix("required") })
        let html = try String(contentsOfFile: run.directory + "/report.html", encoding: .utf8)
        #expect(html.contains("<h2>Reached situations</h2>") && html.contains("<code>guardians-racing</code>"))
    }

    @Test("a required situation the run never reached fails it with exit 2 and one line naming it")
    func unreachedExpectation() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // Guardians of both parents think exactly 100 ms, so they race on every question: the same run proves
        // that it counts what it reaches.
        let json = """
            {"seed": 5, "families": 4, "flowsPerChild": 2, "childThink": "200ms", "invalidRatio": 0,
             "cancelProbability": 0, "abandonProbability": 0, "ratios": {"knownHandle": 0},
             "guardians": {"think": "fixed:100ms", "neverAnswerRatio": 0},
             "expect": {"reached": ["guardians-racing", "send-racing-cancel"]}}
            """
        let run = try FaultSupport.simulate(json, directory: directory)
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        let reached = Self.reached(run)
        #expect((reached["guardians-racing"]?["count"] as? Int ?? 0) > 0, "\(reached)")
        #expect(reached["send-racing-cancel"]?["count"] as? Int == 0)
        #expect(run.exit == .exited(SimulationReport.coverageFailure), "\(run.exit)")
        #expect(run.stdout.contains { $0.hasPrefix("  send-racing-cancel") && $0.hasSuffix("required, NOT REACHED") })
        let stderr = String(
            decoding: FileManager.default.contents(atPath: directory.path + "/askrelay.log") ?? Data(),
            as: UTF8.self
        )
        #expect(
            stderr.contains("askrelay simulate: expect.reached: never reached send-racing-cancel: the run did not"),
            "\(stderr)"
        )
        #expect(!stderr.contains("never reached guardians-racing"))
    }
}
