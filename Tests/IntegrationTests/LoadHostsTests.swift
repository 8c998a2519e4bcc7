import AskCLI
import AskLoad
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// `askrelay load --coordinator` with `--agent`s: real askrelay processes, the real broker, limits and parents,
/// the control channel over real ZeroMQ sockets; in the network-namespace lab (two load hosts) and on loopback for
/// the failure paths.
@Suite("askrelay load over several load hosts: one start, one merged report", .timeLimit(.minutes(3)), .serialized)
struct LoadHostsTests {
    static let notPossible = Comment(
        rawValue: "needs root and a working `ip netns add`: \(NetworkLab.unavailableReason ?? "available")"
    )

    static var askrelay: String { Executables.built.appendingPathComponent("askrelay").path }

    /// A short closed-loop flows workload (the coordinator's flags).
    static let workload = [
        "--mode", "flows", "--endpoints", "20", "--families", "10", "--inflight", "16", "--duration", "1500ms",
        "--warmup", "250ms",
    ]

    /// The endpoint of a coordinator's `coordinator listening=<endpoint> hosts=N` line.
    static func listening(_ coordinator: RelayProcess) throws -> String {
        let line = try coordinator.waitForLine(startingWith: "coordinator listening=", timeout: .seconds(30))
        return String(line.dropFirst("coordinator listening=".count).split(separator: " ")[0])
    }

    static func text(_ path: String) -> String {
        String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
    }

    /// Checks a coordinated run's load.json: the merged counts are the sums of the hosts', the merged histograms
    /// are the hosts' histograms merged and the merged percentiles theirs.
    static func checkMerged(_ reportDirectory: String, hosts: Int) throws {
        let data = try #require(FileManager.default.contents(atPath: reportDirectory + "/load.json"))
        let report = try JSONDecoder().decode(LoadReport.self, from: data)
        let merged = try #require(report.flows)
        let parts = try #require(report.hosts)
        #expect(parts.count == hosts)
        #expect(parts.map(\.name) == (1...hosts).map { "host-\($0)" })
        for part in parts { #expect(part.flows.completed > 0, "\(part.name) completed nothing") }
        #expect(merged.started == parts.map(\.flows.started).reduce(0, +))
        #expect(merged.completed == parts.map(\.flows.completed).reduce(0, +))
        #expect(merged.errors == parts.map(\.flows.errors).reduce(0, +))
        #expect(merged.errors == 0, "errors: \(merged.errorSamples)")
        #expect(merged.inFlightAtEnd == parts.map(\.flows.inFlightAtEnd).reduce(0, +))
        #expect(merged.measuredCompleted == parts.map(\.flows.measuredCompleted).reduce(0, +))
        var combined = FlowHistograms()
        for part in parts { combined.merge(try #require(part.flows.histograms)) }
        #expect(merged.histograms == combined)
        #expect(merged.endToEnd == combined.endToEnd.summary)
        #expect(merged.askToPresented == combined.askToPresented.summary)
        #expect(merged.sendToResponse == combined.sendToResponse.summary)
        #expect(merged.endToEnd.count == parts.map(\.flows.endToEnd.count).reduce(0, +))
        #expect((report.startSkewBoundUs ?? -1) >= 0)
        let runs = Set(report.throughputSamples.map(\.run))
        #expect(runs.isSuperset(of: ["flows"] + (1...hosts).map { "flows host-\($0)" }), "\(runs)")
        let html = text(reportDirectory + "/load.html")
        #expect(html.contains("<svg") && html.contains("host-\(hosts)"))
    }

    @Test(
        "two load hosts in two network namespaces against a broker in a third: merged counts and percentiles",
        .enabled(if: NetworkLab.unavailableReason == nil, notPossible)
    )
    func twoHostsInTheLab() throws {
        NetworkLab.removeStale()
        let lab = try NetworkLab(hosts: ["broker", "load1", "load2"])
        let namespaces = ["sw", "broker", "load1", "load2"].map(lab.namespace)
        defer {
            lab.destroy()
            let left = Set(NetworkLab.namespaces()).intersection(namespaces)
            #expect(left.isEmpty, "namespaces left behind: \(left.sorted())")
        }
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let brokerAddress = lab.address("broker")
        let broker = try RelayProcess(
            name: "broker",
            executable: NetworkLab.ipPath,
            arguments: Array(lab.exec("broker").dropFirst()) + [
                Executables.built.appendingPathComponent("askrelay-broker").path,
                "--endpoint", "tcp://\(brokerAddress):5555", "--allow-insecure", "--data-dir",
                directory.path + "/broker", "--durability", "batch", "--log-level", "warning",
            ],
            logPath: directory.path + "/broker.log"
        )
        _ = try broker.waitForLine(startingWith: "ready", timeout: .seconds(30))
        // The coordinator runs in the broker's namespace and starts the limits worker and parents there.
        let report = directory.path + "/report"
        let coordinator = try RelayProcess(
            name: "coordinator",
            executable: NetworkLab.ipPath,
            arguments: Array(lab.exec("broker").dropFirst()) + [
                Self.askrelay, "load", "--coordinator", "tcp://\(brokerAddress):7000", "--load-hosts", "2",
                "--broker", "tcp://\(brokerAddress):5555", "--report-dir", report, "--threshold", "errors==0",
                "--control-timeout", "30s",
            ] + Self.workload,
            logPath: directory.path + "/coordinator.log"
        )
        let endpoint = try Self.listening(coordinator)
        #expect(endpoint == "tcp://\(brokerAddress):7000")
        var agents: [RelayProcess] = []
        for host in ["load1", "load2"] {
            agents.append(
                try RelayProcess(
                    name: host,
                    executable: NetworkLab.ipPath,
                    arguments: Array(lab.exec(host).dropFirst()) + [Self.askrelay, "load", "--agent", endpoint],
                    logPath: directory.path + "/\(host).log"
                )
            )
        }
        let exit = try coordinator.wait(timeout: .seconds(90))
        let log = Self.text(directory.path + "/coordinator.log")
        #expect(exit == .exited(0), "coordinator: \(log.suffix(3000))")
        for agent in agents {
            #expect(try agent.wait(timeout: .seconds(30)) == .exited(0), "\(agent.name): \(agent.output)")
            #expect(agent.output.last?.hasPrefix("throughput=") == true, "\(agent.output)")
        }
        #expect(coordinator.output.contains("threshold errors==0: errors=0 ok"), "\(coordinator.output)")
        #expect(coordinator.output.contains { $0.hasPrefix("2 load hosts merged; starts within ±") })
        try Self.checkMerged(report, hosts: 2)
        // The agents' children really came from their namespaces' addresses (not loopback).
        let data = try #require(FileManager.default.contents(atPath: report + "/load.json"))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect((json["hosts"] as? [[String: Any]])?.count == 2)
    }

    /// Starts a coordinator on loopback with `flags`; returns it and its endpoint.
    func coordinator(
        _ directory: TempDirectory,
        _ flags: [String],
        name: String = "coordinator"
    ) throws -> (RelayProcess, String) {
        // Its temporary folders (data, and the logs it keeps when the run fails, as several tests make it) in ours.
        let process = try RelayProcess(
            "askrelay",
            ["load", "--coordinator", "tcp://127.0.0.1:*"] + flags,
            name: name,
            logPath: directory.path + "/\(name).log",
            environment: ProcessSupervisor.inheritedEnvironment().merging(["TMPDIR": directory.path]) { $1 }
        )
        return (process, try Self.listening(process))
    }

    func agent(
        _ directory: TempDirectory,
        _ endpoint: String,
        _ name: String,
        _ flags: [String] = []
    ) throws -> RelayProcess {
        try RelayProcess(
            "askrelay",
            ["load", "--agent", endpoint, "--control-timeout", "20s"] + flags,
            name: name,
            logPath: directory.path + "/\(name).log"
        )
    }

    @Test("loopback: a coordinator and two agents merge into one report; load.json's counts and histograms add up")
    func loopbackMerge() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let report = directory.path + "/report"
        let (coordinator, endpoint) = try coordinator(
            directory,
            Self.workload + ["--load-hosts", "2", "--report-dir", report, "--control-timeout", "30s"]
        )
        let agents = try ["agent-1", "agent-2"].map { try agent(directory, endpoint, $0) }
        let exit = try coordinator.wait(timeout: .seconds(90))
        #expect(exit == .exited(0), "\(Self.text(directory.path + "/coordinator.log").suffix(3000))")
        for agent in agents { #expect(try agent.wait(timeout: .seconds(30)) == .exited(0)) }
        #expect(coordinator.output.last?.hasPrefix("throughput=") == true, "\(coordinator.output)")
        try Self.checkMerged(report, hosts: 2)
    }

    @Test("an agent killed mid-run voids the run: the coordinator names it and exits 1, the other agent stops too")
    func agentDiesMidRun() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // A long window: the kill lands inside it, and the run must end long before the window would.
        let (coordinator, endpoint) = try coordinator(
            directory,
            ["--mode", "flows", "--endpoints", "20", "--families", "10", "--inflight", "8", "--duration", "60s"]
                + ["--warmup", "0s", "--load-hosts", "2", "--control-timeout", "30s"]
        )
        let first = try agent(directory, endpoint, "agent-1")
        let second = try agent(directory, endpoint, "agent-2")
        for agent in [first, second] { _ = try agent.waitForLine(startingWith: "load host ", timeout: .seconds(60)) }
        second.signal(SIGKILL)
        let exit = try coordinator.wait(timeout: .seconds(30))
        let log = Self.text(directory.path + "/coordinator.log")
        #expect(exit == .exited(1), "\(log.suffix(2000))")
        #expect(log.contains("load host host-2") || log.contains("load host host-1"), "\(log.suffix(2000))")
        #expect(log.contains("sent nothing for 3 s during the run"), "\(log.suffix(2000))")
        // The survivor was told to stop, and did, long before its 60 s window.
        #expect(try first.wait(timeout: .seconds(20)) == .exited(1))
        #expect(Self.text(directory.path + "/agent-1.log").contains("the coordinator stopped the run"))
        #expect(coordinator.output.allSatisfy { !$0.hasPrefix("throughput=") })
    }

    @Test("a second coordinator on the same port fails at once, before starting anything, and the first is unharmed")
    func secondCoordinatorSamePort() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let (first, endpoint) = try coordinator(
            directory,
            Self.workload + ["--load-hosts", "1", "--control-timeout", "30s"]
        )
        let second = try RelayProcess(
            "askrelay",
            ["load", "--coordinator", endpoint, "--load-hosts", "1"] + Self.workload,
            name: "second",
            logPath: directory.path + "/second.log"
        )
        #expect(try second.wait(timeout: .seconds(20)) == .exited(1))
        let log = Self.text(directory.path + "/second.log")
        #expect(log.contains("the coordinator cannot listen on \(endpoint)"), "\(log)")
        #expect(log.contains("Address already in use") || log.contains("EADDRINUSE"), "\(log)")
        #expect(second.output.isEmpty, "\(second.output)")
        // One line, the error: no broker, limits or parent was started (their failures would show here too).
        #expect(log.split(separator: "\n").count == 1, "\(log)")
        // The first still serves: one agent completes its run.
        let agent = try agent(directory, endpoint, "agent")
        #expect(try first.wait(timeout: .seconds(90)) == .exited(0))
        #expect(try agent.wait(timeout: .seconds(30)) == .exited(0))
    }

    @Test("an agent of another load-control version is refused by name and the run fails; so is another --mode")
    func versionAndModeMismatch() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        // Version: a hand-made agent (a real DEALER) says hello as version 999.
        let (coordinator, endpoint) = try coordinator(
            directory,
            Self.workload + ["--load-hosts", "1", "--control-timeout", "30s"]
        )
        let context = try ZMQContext()
        let dealer = try context.socket(.dealer)
        try dealer.set(.linger, 0)
        try dealer.connect(endpoint)
        let hello = #"{"type":"hello","version":999,"host":"elsewhere","pid":4242}"#
        _ = try dealer.send(hello)
        #expect(try dealer.wait(timeoutMilliseconds: 20_000))
        let reply = try #require(try dealer.receive(.dontWait))
        let refusal = String(decoding: reply.bytes, as: UTF8.self)
        #expect(refusal.contains(#""type":"refuse""#) && refusal.contains("version 1, this agent 999"), "\(refusal)")
        #expect(try coordinator.wait(timeout: .seconds(20)) == .exited(1))
        let log = Self.text(directory.path + "/coordinator.log")
        #expect(log.contains("(elsewhere, pid 4242) speaks load-control version 999, this coordinator 1"), "\(log)")

        // Mode: a real agent started with --mode relay.
        let (second, secondEndpoint) = try self.coordinator(
            directory,
            Self.workload + ["--load-hosts", "1", "--control-timeout", "30s"],
            name: "coordinator-2"
        )
        let agent = try agent(directory, secondEndpoint, "agent", ["--mode", "relay"])
        #expect(try agent.wait(timeout: .seconds(20)) == .exited(1))
        #expect(Self.text(directory.path + "/agent.log").contains("the coordinator refused this load host"))
        #expect(try second.wait(timeout: .seconds(20)) == .exited(1))
        #expect(Self.text(directory.path + "/coordinator-2.log").contains("was started with --mode relay"))
    }

    @Test("an agent that goes silent after its plan fails the run within the silence bound, not the control timeout")
    func silentBeforeStart() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let (coordinator, endpoint) = try coordinator(
            directory,
            Self.workload + ["--load-hosts", "1", "--control-timeout", "60s"]
        )
        // A hand-made agent (a real DEALER): hello, takes its plan, then says nothing more.
        let context = try ZMQContext()
        let dealer = try context.socket(.dealer)
        try dealer.set(.linger, 0)
        try dealer.connect(endpoint)
        _ = try dealer.send(#"{"type":"hello","version":1,"host":"mute","pid":77}"#)
        #expect(try dealer.wait(timeoutMilliseconds: 30_000))
        let plan = String(decoding: try #require(try dealer.receive(.dontWait)).bytes, as: UTF8.self)
        #expect(plan.contains(#""type":"plan""#) && plan.contains(#""hosted_count":20"#), "\(plan)")
        #expect(try coordinator.wait(timeout: .seconds(30)) == .exited(1))
        let log = Self.text(directory.path + "/coordinator.log")
        #expect(log.contains("(mute, pid 77) sent nothing for 3 s while registering its children"), "\(log)")
    }

    @Test("an agent with no coordinator gives up after --control-timeout, naming the endpoint")
    func agentWithoutCoordinator() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let endpoint = "ipc://\(directory.path)/nobody"
        let agent = try RelayProcess(
            "askrelay",
            ["load", "--agent", endpoint, "--control-timeout", "1s"],
            name: "agent",
            logPath: directory.path + "/agent.log"
        )
        #expect(try agent.wait(timeout: .seconds(20)) == .exited(1))
        #expect(
            Self.text(directory.path + "/agent.log").contains("no plan from the coordinator at \(endpoint) within 1 s")
        )
    }

    @Test("bad coordination flags are refused with exit 64 before anything runs")
    func usage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let cases: [([String], String)] = [
            (["--coordinator", "tcp://127.0.0.1:*"], "--coordinator needs --load-hosts N"),
            (["--coordinator", "tcp://127.0.0.1:*", "--load-hosts", "2"], "--coordinator runs --mode flows"),
            (["--mode", "flows", "--load-hosts", "2"], "--load-hosts is for --coordinator"),
            (
                ["--mode", "flows", "--coordinator", "tcp://127.0.0.1:*", "--load-hosts", "3", "--endpoints", "2"],
                "--endpoints (2) must be at least --load-hosts"
            ),
            (["--agent", "tcp://127.0.0.1:1", "--threshold", "errors==0"], "the coordinator checks --threshold"),
            (
                ["--agent", "tcp://127.0.0.1:1", "--coordinator", "tcp://127.0.0.1:*", "--load-hosts", "1"],
                "--coordinator and --agent exclude each other"
            ),
        ]
        for (flags, message) in cases { try expectUsageError(["load"] + flags, message, logDirectory: directory.path) }
    }
}
