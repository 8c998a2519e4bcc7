import AskAgents
import AskProtocol
import Foundation

/// The chain of events of one finished flow (docs/tracing.md, "A flow's chain"), checked against a run's trace: the
/// lines by process (`child-1`, `broker`, `limits`, `parent-1`, `simulate`, ...), read from the trace files or
/// from trace.json. Each step is an event a process group must have recorded about the flow's question, no earlier
/// than the steps it follows (on one machine the processes' wall clocks agree; a `sent` is recorded before the
/// message leaves and a `delivered` before the DELIVER does). Retries, redeliveries and restarts add lines, which
/// the chain skips: each step takes the earliest line that fits. A step that the process group's SIGKILL (or power
/// cut) lost is tolerated when that kill came after the step before it (the docs: a killed process loses the lines
/// of the turn it was in) and is reported as such.
struct FlowChain {
    /// The processes a step's line must come from.
    enum Where: Equatable {
        case process(String)
        case broker
        case limits
        case parents

        func holds(_ process: String) -> Bool {
            switch self {
            case .process(let name): process == name
            case .broker: process == "broker" || process.hasPrefix("broker-")
            case .limits: process.hasPrefix("limits")
            case .parents: process.hasPrefix("parent")
            }
        }

        var name: String {
            switch self {
            case .process(let name): name
            case .broker: "broker"
            case .limits: "limits"
            case .parents: "a parent"
            }
        }
    }

    /// A line that fits a step.
    struct Line: Equatable {
        var at: Where
        var event: TraceEvent
        var kind: String? = nil
        var code: String? = nil
        var from: String? = nil

        func fits(_ process: String, _ line: TraceLine) -> Bool {
            at.holds(process) && line.event == event.rawValue && line.kind == kind
                && (code == nil || line.code == code) && (from == nil || line.from == from)
        }

        var text: String {
            [at.name, event.rawValue, kind, code.map { "[\($0)]" }].compactMap { $0 }.joined(separator: " ")
        }
    }

    /// One step: any of `lines` (alternatives), after the steps at `after` (indices of earlier steps; the step
    /// before it when empty).
    struct Step {
        var lines: [Line]
        var after: [Int]
        var text: String { lines.map(\.text).joined(separator: " or ") }
    }

    /// What checking one flow found.
    struct Finding {
        /// `child-1 approved <question>`.
        var flow: String
        /// The steps with no fitting line (not lost to a kill), each with where it was looked for.
        var missing: [String] = []
        /// The steps a kill of their process lost.
        var lostToKill: [String] = []
    }

    var steps: [Step]

    /// The chain of the flow `record` of the child process `child`; `refusedByBroker`: the broker refused the
    /// ask with a NACK (its `refused ask` line), so the chain ends there.
    init(record: ChildFlowRecord, child: String, refusedByBroker: Bool) {
        var steps: [Step] = []
        @discardableResult
        func step(_ lines: Line..., after: [Int] = []) -> Int {
            steps.append(Step(lines: lines, after: after))
            return steps.count - 1
        }
        let atChild = Where.process(child)
        step(Line(at: atChild, event: .sent, kind: "ask"))
        let received = step(Line(at: .broker, event: .received, kind: "ask"))
        if refusedByBroker {
            step(Line(at: .broker, event: .refused, kind: "ask"))
            step(Line(at: atChild, event: .refused, kind: "ask"))
            self.steps = steps
            return
        }
        // The limits service answers the ask; an ask whose deadline passed before admission is answered by the
        // broker itself (an `ask.result` it routes from `broker`), and the flow is refused.
        var result = received
        if record.outcome != .refused {
            result = step(Line(at: .limits, event: .received, kind: "ask"))
        }
        step(
            Line(at: .limits, event: .sent, kind: "ask.result"),
            Line(at: .broker, event: .routed, kind: "ask.result", from: "broker"),
            after: [result]
        )
        var last = step(Line(at: atChild, event: .received, kind: "ask.result"))
        if record.sentAt != nil {
            step(Line(at: atChild, event: .sent, kind: "send"))
            step(Line(at: .broker, event: .received, kind: "send"))
            step(Line(at: .broker, event: .routed, kind: "question"))
            last = step(Line(at: .parents, event: .received, kind: "question"))
        }
        switch record.outcome {
        case .approved, .denied:
            step(Line(at: .parents, event: .sent, kind: "answer"))
            step(Line(at: .broker, event: .received, kind: "answer"))
            step(Line(at: .broker, event: .closed, code: "answered"))
            step(Line(at: atChild, event: .received, kind: "response"))
        case .cancelled:
            step(Line(at: .broker, event: .closed, code: "cancelled"), after: [last])
        case .expired:
            step(Line(at: .broker, event: .closed, code: "expired"), after: [last])
        case .abandoned:
            step(Line(at: .broker, event: .closed, code: "abandoned"), after: [last])
        case .refused:
            // Closed when the broker takes the limits service's refusing ask.result, or, the ask's deadline passed
            // before admission, just before it routes its own.
            step(Line(at: .broker, event: .closed, code: "refused"), after: [received])
        case .knownHandle:
            break  // asks no question (``check(_:in:)`` flags one that names a question)
        }
        self.steps = steps
    }

    /// A run's trace lines by process.
    typealias Trace = [String: [TraceLine]]

    /// Every line of `trace` by question (upper case) and process, and simulate's fault lines.
    struct Index {
        var byQuestion: [String: [(process: String, line: TraceLine)]] = [:]
        var faults: [TraceLine] = []

        init(_ trace: Trace) {
            for (process, lines) in trace {
                for line in lines {
                    if line.event == TraceEvent.fault.rawValue { faults.append(line) }
                    guard let question = line.question?.uppercased() else { continue }
                    byQuestion[question, default: []].append((process, line))
                }
            }
            for key in byQuestion.keys { byQuestion[key]?.sort { $0.line.atMicroseconds < $1.line.atMicroseconds } }
            faults.sort { $0.atMicroseconds < $1.atMicroseconds }
        }

        /// Whether a process `place` holds was SIGKILLed (or power cut) at or after `after`: a line it recorded
        /// between `after` and the kill, in the turn the kill cut, may be lost.
        func killed(_ place: Where, after: Int64) -> Bool {
            faults.contains {
                ["kill", "power-cut"].contains($0.code ?? "") && place.holds($0.to ?? "") && $0.atMicroseconds >= after
            }
        }
    }

    /// The finished flows of a run's children (`records/child-<n>.jsonl` of its report folder `directory`), with
    /// the child process of each.
    static func records(_ directory: String) -> [(process: String, record: ChildFlowRecord)] {
        var records: [(process: String, record: ChildFlowRecord)] = []
        let folder = directory + "/records"
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
        for name in names where name.hasPrefix("child-") && name.hasSuffix(".jsonl") {
            let process = String(name.dropLast(".jsonl".count))
            records += JSONLinesWriter.read(ChildFlowRecord.self, path: folder + "/" + name).values.map {
                (process, $0)
            }
        }
        return records
    }

    /// Checks every finished flow of `records` (child process, record; those with a question) against `trace`.
    static func check(_ records: [(process: String, record: ChildFlowRecord)], in trace: Trace) -> [Finding] {
        let index = Index(trace)
        return records.compactMap { process, record in
            guard let question = record.question?.uuidString.uppercased() else { return nil }
            let lines = index.byQuestion[question] ?? []
            let refused = lines.contains { Line(at: .broker, event: .refused, kind: "ask").fits($0.process, $0.line) }
            var chain = FlowChain(record: record, child: process, refusedByBroker: refused)
            // An ask the child's own validation refused never left it: no process recorded a line of it.
            if lines.isEmpty && record.outcome == .refused && record.askError == "invalidQuestion" { chain.steps = [] }
            var finding = chain.check(lines, index: index)
            finding.flow = "\(process) \(record.outcome.rawValue) \(question.lowercased())"
            if record.outcome == .knownHandle { finding.missing.append("none: a known-handle flow asks no question") }
            return finding
        }
    }

    /// Checks the chain against `lines` (the flow's, in time order).
    func check(_ lines: [(process: String, line: TraceLine)], index: Index) -> Finding {
        var finding = Finding(flow: "")
        var matched: [Int64] = []
        for (number, step) in steps.enumerated() {
            let after = step.after.isEmpty ? (number == 0 ? [] : [number - 1]) : step.after
            let bound = after.map { matched[$0] }.max() ?? .min
            if let found = lines.first(where: { entry in
                entry.line.atMicroseconds >= bound && step.lines.contains { $0.fits(entry.process, entry.line) }
            }) {
                matched.append(found.line.atMicroseconds)
                continue
            }
            let text = "\(step.text) (at or after \(bound == .min ? "the start" : "\(bound) µs"))"
            if step.lines.contains(where: { index.killed($0.at, after: bound) }) {
                finding.lostToKill.append(text)
            } else {
                finding.missing.append(text)
            }
            matched.append(bound == .min ? 0 : bound)
        }
        return finding
    }
}
