import AskAgents
import AskProtocol
import AskRelayProcesses
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// Tracing end to end (issue 31, recording; docs/tracing.md, "Recording"): `askrelay simulate` gives every process
/// its trace file, and for every flow a child recorded as finished, the files hold its chain across the processes,
/// from the child's ask to the line that ended it; a broker restarted by a fault appends to its own file.
@Suite("askrelay simulate: every flow traced across processes", .timeLimit(.minutes(4)), .serialized)
struct TraceRecordingSimulationTests {
    /// The trace files of a run's folder, by process name (`broker`, `child-1`, ...).
    static func traces(_ directory: String) throws -> [String: [TraceLine]] {
        let folder = directory + "/trace"
        var files: [String: [TraceLine]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) where name.hasSuffix(".jsonl") {
            let text = try String(contentsOfFile: folder + "/" + name, encoding: .utf8)
            files[String(name.dropLast(".jsonl".count))] = try text.split(separator: "\n").map {
                try JSONDecoder().decode(TraceLine.self, from: Data($0.utf8))
            }
        }
        return files
    }

    @Test("every finished flow's chain is in the trace files of the processes it went through, across a broker restart")
    func everyFlowTraced() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // Valid questions only (an invalid one may never leave its child), no send racing a cancel; the broker is
        // stopped and restarted while flows are in flight.
        let json = """
            {"seed": 31, "families": 6, "flowsPerChild": 3, "childThink": "200ms", "invalidRatio": 0,
             "raceCancelProbability": 0, "guardians": {"think": "fixed:100ms"},
             "faults": [{"at": "1s", "process": "broker", "action": "term", "restartAfter": "300ms"}]}
            """
        let run = try FaultSupport.simulate(json, directory: directory)
        #expect(run.ok, "violations: \(run.violations); notes: \(run.notes)")
        let traces = try Self.traces(run.directory)
        #expect(
            Set(traces.keys) == ["broker", "limits", "parent-1", "parent-2", "child-1", "child-2", "simulate"],
            "\(traces.keys.sorted())"
        )
        let faults = traces["simulate"] ?? []
        #expect(faults.contains { $0.event == "fault" && $0.code == "term" && $0.to == "broker" }, "\(faults)")
        #expect(faults.contains { $0.event == "fault" && $0.code == "restart" && $0.to == "broker" }, "\(faults)")

        // Every finished flow's chain (docs/tracing.md, "A flow's chain"), in the files of the processes it went
        // through, in order; nothing was killed, so no line may be missing.
        let records = FlowChain.records(run.directory)
        let asked = records.filter { $0.record.question != nil }
        #expect(asked.count >= 10, "\(records.count) records, \(asked.count) with a question")
        let findings = FlowChain.check(records, in: traces)
        #expect(findings.count == asked.count)
        for finding in findings where !finding.missing.isEmpty || !finding.lostToKill.isEmpty {
            Issue.record("\(finding.flow): missing \(finding.missing), lost to a kill \(finding.lostToKill)")
        }
        let outcomes = Set(asked.map(\.record.outcome))
        // The run exercised more than one way to end.
        #expect(outcomes.count >= 2, "\(outcomes)")
        #expect(outcomes.contains(.approved) || outcomes.contains(.denied), "\(outcomes)")
    }

    @Test("a --trace-log in a folder that does not exist is bad usage: exit 64 and one line naming it")
    func badTraceLog() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let bad = "/nonexistent-askrelay-trace/t.jsonl"
        let runs = [
            Tool.run(
                Executables.built.appendingPathComponent("askrelay-broker").path,
                [
                    "--endpoint", "ipc://\(directory.path)/b.ipc", "--data-dir", directory.path + "/data",
                    "--trace-log", bad,
                ],
                environment: Tool.cleanEnvironment
            ),
            Tool.run(
                Executables.built.appendingPathComponent("askrelay-limits").path,
                ["--data-dir", directory.path + "/limits", "--trace-log", bad],
                environment: Tool.cleanEnvironment
            ),
        ]
        for run in runs {
            #expect(run.status == 64, "\(run.status): \(run.stderr)")
            #expect(run.stderr.contains("give --trace-log a file in a folder that exists"), "\(run.stderr)")
        }
    }
}
