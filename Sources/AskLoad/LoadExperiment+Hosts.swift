import AskCLI
import AskProtocol
import Foundation
import ZeroMQ

/// `askrelay load --coordinator` and `--agent`: one flows workload run by several load processes (one per host or
/// network namespace) from one start time, merged into one report.
extension LoadExperiment {
    /// What makes a coordinator's or an agent's options impossible (usage messages naming the flags).
    func coordinationProblems() -> [String] {
        var problems: [String] = []
        if coordinator != nil && agent != nil { problems.append("--coordinator and --agent exclude each other") }
        if let coordinator {
            if mode != .flows { problems.append("--coordinator runs --mode flows; give --mode flows") }
            if sweep != nil { problems.append("--coordinator cannot be combined with --sweep") }
            if coordinator.hosts < 1 { problems.append("--load-hosts must be at least 1") }
            if flowOptions.endpoints < coordinator.hosts {
                problems.append("--endpoints (\(flowOptions.endpoints)) must be at least --load-hosts")
            }
            if !flowOptions.isOpenLoop && flowOptions.inflight < coordinator.hosts {
                problems.append("--inflight (\(flowOptions.inflight)) must be at least --load-hosts")
            }
            if flowOptions.endpoints >= coordinator.hosts {
                let smallest = flowOptions.share(coordinator.hosts - 1, of: coordinator.hosts)
                if flowOptions.connections > smallest.hosted.count {
                    problems.append(
                        "--connections (\(flowOptions.connections), per load host) must be at most each host's share of --endpoints (\(smallest.hosted.count))"
                    )
                }
            }
        }
        if agent != nil {
            if reportDirectory != nil {
                problems.append("--agent: the coordinator writes the report; drop --report-dir")
            }
            if !thresholds.isEmpty { problems.append("--agent: the coordinator checks --threshold; drop it here") }
            if sweep != nil { problems.append("--agent cannot be combined with --sweep") }
        }
        return problems
    }

    /// `--agent`: runs this host's share; its own table (its last line `throughput=`) for stdout.
    func runAgent(_ coordinator: String) throws -> [String] {
        let progress = ProgressPrinter()
        let outcome = try LoadAgent.run(
            coordinator: coordinator,
            mode: agentMode,
            brokers: externalBrokers,
            timeoutSeconds: agentTimeoutSeconds,
            onProgress: { progress.show("flows", $0) }
        )
        progress.finish()
        var report = LoadReport(
            mode: "flows",
            commandLine: commandLine,
            durability: "external",
            externalBroker: true,
            relayOptions: nil,
            flowOptions: outcome.options,
            flows: outcome.result,
            sweep: nil,
            throughputSamples: outcome.samples
        )
        report.shards = outcome.brokers.shardNames
        return report.table
    }

    /// `--coordinator`: starts the limits and parent processes (and the broker, unless `--broker`), waits for the
    /// agents, runs them from one start time and merges their results into the usual report.
    func runCoordinated() throws -> (table: [String], figures: [String: LoadFigure]) {
        guard let options = coordinator else { throw RelayLoadError("no --coordinator") }
        let context = try ZMQContext()
        let control = try LoadCoordinator(options: options, context: context)
        // On stdout at once: the agents (and scripts) need the bound endpoint, a `*` port included.
        printLine("coordinator listening=\(control.bound) hosts=\(options.hosts)")
        let services = try FlowServices(
            executables: executableDirectory,
            options: flowOptions,
            durability: durability,
            externalBrokers: externalBrokers,
            logDirectory: try logs?.make()
        )
        defer { services.stop() }
        let cpu = ProcessCPU(services.pids)
        let progress = ProgressPrinter()
        let run = try control.run(
            brokers: services.brokers,
            workload: flowOptions,
            onProgress: { progress.show("flows", $0) }
        )
        progress.finish()
        let merged = try FlowLoadResult.merged(run.hosts.map(\.flows))
        var cpuPerFlow = cpu.perUnit(units: merged.completed)
        if merged.completed > 0 {
            for host in run.hosts { cpuPerFlow["load-" + host.name] = host.cpuSeconds * 1e6 / Double(merged.completed) }
        }
        var report = LoadReport(
            mode: "flows",
            commandLine: commandLine,
            durability: externalBrokers == nil ? durability : "external",
            externalBroker: externalBrokers != nil,
            relayOptions: nil,
            flowOptions: flowOptions,
            flows: merged,
            sweep: nil,
            // The merged run from the hosts' own samples (the beats arrive late and in steps).
            throughputSamples: ThroughputSample.merged(control.hostSamples, run: "flows")
                + control.hostSamples.flatMap { $0 }
        )
        report.cpuPerFlowUs = cpuPerFlow
        report.hosts = run.hosts
        report.startSkewBoundUs = run.startSkewBoundUs
        report.shards = services.brokers.shardNames
        if let reportDirectory { try report.write(to: reportDirectory) }
        return (report.table, report.figures)
    }
}
