import AskAgents
import AskBroker
import AskCLI
import AskProtocol
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// Power cuts of the broker during `askrelay simulate` (docs/simulation.md, `power-cut` faults): the broker runs under
/// the fault VFS, so each fault's SIGKILL also drops every journal write since its last fsync; the broker restarts on
/// what the disk kept while the children, parents and limits worker play on. The run's invariants must hold: no
/// acknowledged question lost (every sent question is in the ledger and ends there as the child recorded),
/// none surfaced twice, and the journal passes `integrity_check` after every cut.
///
/// `ASKRELAY_POWER_CUTS` sets the number of cuts (default 6; `make power-test` runs 100).
@Suite("power cuts of the broker during the simulation", .timeLimit(.minutes(20)), .serialized)
struct SimulationPowerCutTests {
    @Test("strict durability: power cuts of the broker under the simulation's flows lose nothing acknowledged")
    func strictSimulation() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cuts = PowerCutTests.cutsPerMode
        // A cut every 800 ms, the broker back 200 ms later: the children keep asking through every cut. Few approvals
        // and 24 families keep them asking: each approval makes a handle known, which needs no question (100 cuts:
        // 2 196 questions sent with 24 families and 0.2, 603 with 12 and 0.7).
        let interval = 800
        let faults = (1...cuts).map {
            #"{"at": "\#($0 * interval)ms", "process": "broker", "action": "power-cut", "restartAfter": "200ms"}"#
        }
        let duration = (cuts + 1) * interval + 1000
        let scenario = """
            {"seed": \(UInt32.random(in: 1...UInt32.max)), "families": 24, "childProcesses": 2,
             "parentProcesses": 2, "durability": "strict", "flowsPerChild": 100000, "childThink": "100ms",
             "grace": "500ms", "expireAfter": null, "timeScale": 43200, "abandonProbability": 0,
             "duration": "\(duration)ms",
             "guardians": {"approveProbability": 0.2, "neverAnswerRatio": 0, "think": "exponential:50ms"},
             "faults": [\(faults.joined(separator: ",\n"))]}
            """
        let run = try FaultSupport.simulate(
            scenario,
            directory: directory,
            timeout: .seconds(120 + cuts * 3)
        )
        let records = try FileManager.default.contentsOfDirectory(atPath: run.directory + "/records")
            .filter { $0.hasPrefix("child-") }
            .flatMap { JSONLinesWriter.read(ChildFlowRecord.self, path: run.directory + "/records/" + $0).values }
        let ledger = Set(try run.ledger().map(\.id.uuid))
        let sent = Set(records.filter { $0.sentAt != nil }.compactMap(\.question))
        let lost = sent.subtracting(ledger)
        let answered = records.filter { $0.outcome == .approved || $0.outcome == .denied }.count
        let twice = Set(records.filter { $0.responsesSurfaced > 1 }.compactMap(\.question))
        let brokerRuns = run.runs(of: "broker").count
        let notes = run.invariants["notes"] as? [String] ?? []
        print(
            "power cuts: simulate strict under flows: \(brokerRuns - 1) cuts, \(sent.count) questions acknowledged, "
                + "\(lost.count) lost, \(answered) answered, \(twice.count) surfaced twice, "
                + "\(run.violations.count) violations"
        )
        #expect(run.exit == .exited(0), "askrelay simulate: \(run.exit); violations: \(run.violations)")
        #expect(run.ok, "violations: \(run.violations)")
        let checked = run.invariants["checked"] as? [String] ?? []
        for invariant in ["journal-survives-power-cuts", "ends-exactly-once", "response-at-most-once"] {
            #expect(checked.contains(invariant), "\(invariant) not checked: \(checked)")
        }
        #expect(
            notes.contains("\(cuts) power cut(s); the journal passed integrity_check after \(cuts) of them"),
            "every cut played and its journal was checked: \(notes); \(run.notes)"
        )
        #expect(brokerRuns == cuts + 1, "the broker's runs: \(run.runs(of: "broker"))")
        #expect(lost.isEmpty, "acknowledged questions not in the journal: \(lost.prefix(3))")
        #expect(twice.isEmpty, "responses surfaced twice: \(twice.prefix(3))")
        #expect(answered > cuts, "the flows went on through the cuts: \(answered) answered")
        #expect(run.log("broker").contains("recovered from journal"), "no restart recovered anything")
    }

    @Test(
        "a power-cut fault is refused up front with one line and exit 64: batch durability, a non-broker, --broker",
        arguments: [
            (#""durability": "batch""#, "broker", [String](), "scenario field 'durability': power-cut faults need"),
            (#""durability": "strict""#, "limits", [], "scenario field 'faults[0].process': a power cut cuts a broker"),
            (
                #""durability": "strict""#, "broker", ["--broker", "tcp://127.0.0.1:9"],
                "scenario field 'faults[0].action': a power cut cuts a broker simulate starts"
            ),
        ]
    )
    func refused(durability: String, process: String, flags: [String], message: String) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let scenario = directory.path + "/scenario.json"
        try Data(
            #"{\#(durability), "faults": [{"at": "1s", "process": "\#(process)", "action": "power-cut"}]}"#.utf8
        ).write(to: URL(fileURLWithPath: scenario))
        let report = directory.path + "/report"
        let askrelay = try RelayProcess(
            name: "askrelay",
            executable: Executables.built.appendingPathComponent("askrelay").path,
            arguments: ["simulate", "--scenario", scenario, "--report-dir", report] + flags,
            logPath: directory.path + "/askrelay.log"
        )
        let exit = try askrelay.wait(timeout: .seconds(30))
        let log = (try? String(contentsOfFile: directory.path + "/askrelay.log", encoding: .utf8)) ?? ""
        // One error line, then the usage hint every refused command prints.
        let lines = log.split(separator: "\n").filter { !$0.isEmpty }
        #expect(exit == .exited(64), "exit \(exit): \(log)")
        #expect(lines.first?.contains(message) == true, "stderr: \(log)")
        #expect(lines.dropFirst().allSatisfy { $0.hasPrefix("Usage:") || $0.hasPrefix("See ") }, "stderr: \(log)")
        #expect(!FileManager.default.fileExists(atPath: report), "a refused run wrote \(report)")
    }
}
