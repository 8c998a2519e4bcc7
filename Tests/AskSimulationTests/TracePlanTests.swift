import AskSimulation
import Foundation
import Testing

/// `askrelay simulate`'s trace files (docs/tracing.md, "Recording"): with tracing on, every process it starts gets
/// `--trace-log <report>/trace/<process>.jsonl`; with `--no-trace` none does.
@Suite("Trace plan: one trace file per process")
struct TracePlanTests {
    static func traceLog(_ arguments: [String]) -> String? {
        arguments.firstIndex(of: "--trace-log").map { arguments[$0 + 1] }
    }

    @Test("tracing gives broker, limits, parents and children their own file; off gives none")
    func perProcess() throws {
        var plan = WorkerPlan(scenario: Scenario(), brokerEndpoint: "ipc:///b", runDirectory: "/r")
        #expect(SimulationOptions(scenario: Scenario(), reportDirectory: "/r").trace)
        plan.tracing = true
        #expect(
            Self.traceLog(plan.brokerArguments(statsEndpoint: "ipc:///s", logLevel: "info")) == "/r/trace/broker.jsonl"
        )
        #expect(Self.traceLog(plan.limitsArguments(logLevel: "info")) == "/r/trace/limits.jsonl")
        #expect(Self.traceLog(plan.parentArguments(2, logLevel: "info")) == "/r/trace/parent-2.jsonl")
        #expect(Self.traceLog(plan.childArguments(1, logLevel: "info")) == "/r/trace/child-1.jsonl")
        #expect(plan.tracePath("simulate") == "/r/trace/simulate.jsonl")
        plan.tracing = false
        #expect(Self.traceLog(plan.brokerArguments(statsEndpoint: "ipc:///s", logLevel: "info")) == nil)
        #expect(Self.traceLog(plan.limitsArguments(logLevel: "info")) == nil)
        #expect(Self.traceLog(plan.parentArguments(1, logLevel: "info")) == nil)
        #expect(Self.traceLog(plan.childArguments(1, logLevel: "info")) == nil)
    }

    @Test("sharded: each broker and limits worker traces into its own file")
    func sharded() throws {
        var scenario = Scenario()
        scenario.brokers = 2
        var plan = WorkerPlan(scenario: scenario, brokerEndpoint: "", runDirectory: "/r", socketDirectory: "/s")
        plan.tracing = true
        #expect(
            Self.traceLog(plan.brokerArguments(shard: "b1", statsEndpoint: "ipc:///s", logLevel: "info"))
                == "/r/trace/broker-b1.jsonl"
        )
        #expect(Self.traceLog(plan.limitsArguments(shard: "b0", logLevel: "info")) == "/r/trace/limits-b0.jsonl")
    }
}
