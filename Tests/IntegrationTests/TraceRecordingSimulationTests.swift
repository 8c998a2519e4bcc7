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
        Self.checkTraceContexts(traces, questions: Set(asked.compactMap { $0.record.question }))
        let outcomes = Set(asked.map(\.record.outcome))
        // The run exercised more than one way to end.
        #expect(outcomes.count >= 2, "\(outcomes)")
        #expect(outcomes.contains(.approved) || outcomes.contains(.denied), "\(outcomes)")
    }

    /// Every flow is one trace (docs/protocol.md §5.5): with no context from the application, its trace id is the
    /// question id. Each message's parent is the span of the message that caused it: the child's `ask` and `send`
    /// hang off the flow's root, an `ask.result` off its `ask`, a `question` off the `send`, an `answer` off its
    /// `question`, the `response` off an `answer`. A line without a context is one the broker's journal gave back
    /// after the restart (it keeps none); a line with one must be in the flow's trace.
    static func checkTraceContexts(_ traces: [String: [TraceLine]], questions: Set<UUID>) {
        var byQuestion: [UUID: [(process: String, line: TraceLine)]] = [:]
        for (process, lines) in traces {
            for line in lines where line.id != nil {
                guard let question = line.question.flatMap(UUID.init(uuidString:)), questions.contains(question)
                else { continue }
                byQuestion[question, default: []].append((process, line))
            }
        }
        func span(_ id: String?) -> UInt64? {
            id.flatMap(UUID.init(uuidString:)).map { TraceContext.spanID(of: MessageID(uuid: $0)) }
        }
        var traced = 0
        var untraced = 0
        var causes = 0
        for (question, lines) in byQuestion {
            let root = TraceContext.root(question: question)
            let sent = { (kind: String) in lines.filter { $0.line.event == "sent" && $0.line.kind == kind } }
            for (process, line) in lines {
                guard let text = line.trace else {
                    untraced += 1
                    continue
                }
                traced += 1
                guard let context = TraceContext(traceparent: text) else {
                    Issue.record("\(process): an unreadable trace context '\(text)'")
                    continue
                }
                #expect(context.traceID == root.traceID, "\(process) \(line.event) \(line.kind ?? ""): \(text)")
                let parents: [UInt64?]
                switch line.kind {
                case "ask", "send", "cancel": parents = [root.parentID]
                case "ask.result": parents = sent("ask").map { span($0.line.id) }
                case "question": parents = sent("send").map { span($0.line.id) }
                case "answer":
                    parents = lines.filter { $0.line.kind == "question" }.map { span($0.line.id) }
                case "response", "closed", "approval": parents = sent("answer").map { span($0.line.id) }
                default: continue
                }
                // A cause this process could not see (a restart lost it) leaves nothing to compare.
                guard !parents.isEmpty else { continue }
                causes += 1
                #expect(
                    parents.contains(context.parentID),
                    "\(process) \(line.event) \(line.kind ?? "") of \(question): parent \(text), causes \(parents)"
                )
            }
        }
        // Positive evidence: the contexts were there to check, on most lines.
        #expect(traced > untraced * 4 && causes > 50, "traced \(traced), untraced \(untraced), causes \(causes)")
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
