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

        // Every line about a question, per process group, as (event, kind) pairs and the whole lines.
        func lines(_ process: String) -> [TraceLine] { traces[process] ?? [] }
        let parents = lines("parent-1") + lines("parent-2")
        let broker = lines("broker")
        let limits = lines("limits")
        var records: [(process: String, record: ChildFlowRecord)] = []
        for process in ["child-1", "child-2"] {
            let read = JSONLinesWriter.read(ChildFlowRecord.self, path: run.directory + "/records/\(process).jsonl")
            records += read.values.map { (process, $0) }
        }
        let asked = records.filter { $0.record.question != nil }
        #expect(asked.count >= 10, "\(records.count) records, \(asked.count) with a question")
        var outcomes: Set<FlowOutcome> = []
        for (process, record) in asked {
            let question = record.question!.uuidString
            outcomes.insert(record.outcome)
            let child = lines(process).filter { $0.question == question }
            let atBroker = broker.filter { $0.question == question }
            let atLimits = limits.filter { $0.question == question }
            let atParents = parents.filter { $0.question == question }
            func has(_ lines: [TraceLine], _ event: TraceEvent, _ kind: String?, code: String? = nil) -> Bool {
                lines.contains { $0.event == event.rawValue && $0.kind == kind && (code == nil || $0.code == code) }
            }
            let flow = "\(process) \(record.outcome.rawValue) \(question)"
            #expect(has(child, .sent, "ask"), "\(flow): child sent ask")
            #expect(has(atBroker, .received, "ask"), "\(flow): broker received ask")
            // Refused: by the limits worker (an ask.result), by the broker (its NACK of the ask), or its admission
            // expired (the broker's own ask.result).
            let refusedByBroker = has(atBroker, .refused, "ask")
            if !refusedByBroker {
                #expect(has(child, .received, "ask.result"), "\(flow): child received ask.result")
                #expect(
                    has(atLimits, .received, "ask") || record.outcome == .refused,
                    "\(flow): limits received ask"
                )
                #expect(
                    has(atLimits, .sent, "ask.result")
                        || atBroker.contains { $0.event == "routed" && $0.kind == "ask.result" && $0.from == "broker" },
                    "\(flow): limits sent ask.result"
                )
            }
            if record.sentAt != nil {
                #expect(has(child, .sent, "send"), "\(flow): child sent send")
                #expect(has(atBroker, .routed, "question"), "\(flow): broker routed question")
                #expect(has(atParents, .received, "question"), "\(flow): a parent received question")
            }
            switch record.outcome {
            case .approved, .denied:
                #expect(has(atParents, .sent, "answer"), "\(flow): a parent sent answer")
                #expect(has(atBroker, .closed, nil, code: "answered"), "\(flow): broker closed answered")
                #expect(has(child, .received, "response"), "\(flow): child received response")
            case .cancelled:
                #expect(has(atBroker, .closed, nil, code: "cancelled"), "\(flow): broker closed cancelled")
            case .expired:
                #expect(has(atBroker, .closed, nil, code: "expired"), "\(flow): broker closed expired")
            case .abandoned:
                #expect(has(atBroker, .closed, nil, code: "abandoned"), "\(flow): broker closed abandoned")
            case .refused:
                #expect(
                    refusedByBroker || has(atBroker, .closed, nil, code: "refused"),
                    "\(flow): broker closed refused (or refused the ask)"
                )
            case .knownHandle:
                Issue.record("\(flow): a known-handle flow has no question")
            }
        }
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
