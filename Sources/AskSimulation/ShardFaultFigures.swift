import AskBasics
import AskAgents
import AskProtocol
import Foundation

/// What a fault on one broker of a sharded run did to the flows of every shard: flows finished per second, and the
/// p99 of ask → presented (child → broker → limits → broker → child, which only the flow's own shard serves), in
/// the window before the fault and during it. The untouched shards should not notice (docs/scaling.md).
public struct ShardFaultFigures: Codable, Sendable, Equatable {
    /// Flows of one group of shards in one window.
    public struct Window: Codable, Sendable, Equatable {
        /// Flows that finished in the window.
        public var flows: Int
        public var seconds: Double
        public var flowsPerSecond: Double
        /// p99 of ask → presented of the flows that asked in the window, in milliseconds (0 when none did).
        public var askToPresentedP99Ms: Double
        /// Flows that asked in the window.
        public var asked: Int
    }

    /// The broker's process (`broker-b1`) and the fault (`kill`, `stop`, `term`).
    public var process: String
    public var action: String
    /// Seconds after the children started.
    public var at: Double
    /// The families of the faulted shard, and of the others.
    public var faultedFamilies: Int
    public var untouchedFamilies: Int
    public var untouchedBefore: Window
    public var untouchedDuring: Window
    public var faultedBefore: Window
    public var faultedDuring: Window

    /// The figures of every broker fault of `scenario` (none without sharding).
    /// - Parameters:
    ///   - playStart: when the children started (the faults' `at` counts from it).
    public static func measure(
        scenario: Scenario,
        brokers: BrokerList?,
        playStart: Date,
        records: [ChildFlowRecord]
    ) -> [ShardFaultFigures] {
        guard let brokers else { return [] }
        var figures: [ShardFaultFigures] = []
        for fault in scenario.faults
        where fault.process.hasPrefix("broker-") && fault.action != .run && !fault.action.changesBrokers {
            let shard = String(fault.process.dropFirst("broker-".count))
            let start = playStart.addingTimeInterval(fault.at.seconds)
            let length = max(0.001, Self.length(of: fault, scenario: scenario).seconds)
            let end = start.addingTimeInterval(length)
            // The same length before the fault (or as much of it as the run had).
            let before = max(playStart, start.addingTimeInterval(-length))
            let families = (1...scenario.families).map { "f\($0)" }
            let faulted = Set(families.filter { brokers.shard(family: $0).name == shard })
            let onFaulted = records.filter { faulted.contains($0.family) }
            let untouched = records.filter { !faulted.contains($0.family) }
            figures.append(
                ShardFaultFigures(
                    process: fault.process,
                    action: fault.action.rawValue,
                    at: fault.at.seconds,
                    faultedFamilies: faulted.count,
                    untouchedFamilies: families.count - faulted.count,
                    untouchedBefore: window(untouched, from: before, to: start),
                    untouchedDuring: window(untouched, from: start, to: end),
                    faultedBefore: window(onFaulted, from: before, to: start),
                    faultedDuring: window(onFaulted, from: start, to: end)
                )
            )
        }
        return figures
    }

    /// How long the broker is out: stopped until it continues, killed or terminated until it restarts (or, without
    /// a restart, to the end of the run).
    static func length(of fault: Scenario.Fault, scenario: Scenario) -> Duration {
        switch fault.action {
        case .stop: fault.continueAfter ?? .seconds(1)
        default: fault.restartAfter ?? max(.milliseconds(1), scenario.duration - fault.at)
        }
    }

    static func window(_ records: [ChildFlowRecord], from: Date, to: Date) -> Window {
        let seconds = max(0.001, to.timeIntervalSince(from))
        let finished = records.filter { $0.closedAt >= from && $0.closedAt < to }.count
        let asked = records.filter { ($0.askedAt ?? .distantPast) >= from && ($0.askedAt ?? .distantPast) < to }
        let latencies = asked.compactMap { record -> Double? in
            guard let askedAt = record.askedAt, let presentedAt = record.presentedAt else { return nil }
            return presentedAt.timeIntervalSince(askedAt) * 1000
        }
        return Window(
            flows: finished,
            seconds: seconds,
            flowsPerSecond: Double(finished) / seconds,
            askToPresentedP99Ms: Percentiles(latencies).value(99),
            asked: asked.count
        )
    }

    /// Lines of the summary table.
    var summaryLines: [String] {
        func line(_ title: String, _ window: Window) -> String {
            let rate = String(format: "%8.1f", window.flowsPerSecond)
            let p99 = String(format: "%9.1f", window.askToPresentedP99Ms)
            return "  \(title.padding(toLength: 30, withPad: " ", startingAt: 0)) \(rate) flows/s  p99 \(p99) ms"
                + "  (\(window.flows) finished, \(window.asked) asked in \(String(format: "%.1f", window.seconds)) s)"
        }
        return [
            "shard fault: \(action) \(process) at \(String(format: "%.1f", at)) s "
                + "(\(faultedFamilies) of its families, \(untouchedFamilies) on the other shards)",
            line("other shards, before", untouchedBefore),
            line("other shards, during", untouchedDuring),
            line("\(process), before", faultedBefore),
            line("\(process), during", faultedDuring),
        ]
    }
}
