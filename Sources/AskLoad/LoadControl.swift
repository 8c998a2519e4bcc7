import AskCLI
import AskModel
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// One message of the load-control channel between `askrelay load --coordinator` (a ROUTER) and its
/// `askrelay load --agent`s (DEALERs): one JSON frame each, `type` saying which (docs/performance.md,
/// "Load from several hosts").
struct ControlMessage: Codable, Sendable {
    /// `hello`, `plan`, `refuse`, `ready`, `ping`, `pong`, `start`, `beat`, `result`, `error`, `done`, `abort`.
    var type: String
    var version: Int?
    var mode: String?
    var host: String?
    var pid: Int32?
    var reason: String?
    var index: Int?
    var hosts: Int?
    var broker: String?
    /// `plan` against sharded brokers: the list (`b0=URL,b1=URL`); `broker` is then its first endpoint.
    var brokers: String?
    var flowOptions: FlowLoadOptions?
    var sequence: Int?
    /// `start`: how long after receiving it the run starts, in nanoseconds of the agent's own clock.
    var startInNs: UInt64?
    var elapsedS: Double?
    var sent: Int?
    var completed: Int?
    var errors: Int?
    var phase: String?
    var result: FlowLoadResult?
    var samples: [ThroughputSample]?
    var cpuSeconds: Double?

    init(_ type: String) { self.type = type }

    enum CodingKeys: String, CodingKey {
        case type, version, mode, host, pid, reason, index, hosts, broker, brokers, flowOptions = "flow_options"
        case sequence
        case startInNs = "start_in_ns", elapsedS = "elapsed_s", sent, completed, errors, phase, result, samples
        case cpuSeconds = "cpu_s"
    }

    func encoded() throws -> [UInt8] { Array(try JSONEncoder().encode(self)) }

    static func decode(_ bytes: [UInt8]) throws -> ControlMessage {
        do { return try JSONDecoder().decode(ControlMessage.self, from: Data(bytes)) } catch {
            throw RelayLoadError("an unreadable load-control message (\(bytes.count) bytes): \(error)")
        }
    }
}

/// The load-control channel's fixed figures.
public enum LoadControl {
    /// The version of the control messages; a coordinator and an agent must speak the same one.
    public static let version = 1
    /// An agent sends a `beat` (with its progress) this often while it runs.
    static let beatInterval: UInt64 = 250_000_000
    /// A running agent not heard from for this long has disappeared: the coordinated run fails.
    public static let silenceLimit: Duration = .seconds(3)
    /// The start is this far in the future on the coordinator's clock when it sends `start`.
    static let startLead: UInt64 = 200_000_000
    static let pingRounds = 3
}

/// `askrelay load --coordinator ENDPOINT --load-hosts N`: the coordinator's options.
public struct CoordinatorOptions: Sendable {
    /// Where the coordinator binds its ROUTER (`tcp://0.0.0.0:7000`, `tcp://127.0.0.1:*`).
    public var endpoint: String
    /// Load hosts (agents) to wait for; each runs 1/N of the workload.
    public var hosts: Int
    /// How long to wait for the agents, for their readiness and, after the run, for their results.
    public var timeoutSeconds: Double = 60

    public init(endpoint: String, hosts: Int) {
        self.endpoint = endpoint
        self.hosts = hosts
    }
}

/// One load host's part of a coordinated run, as the coordinator saw it.
public struct LoadHostResult: Sendable, Codable, Equatable {
    /// `host-<n>` (1-based, in the order the agents said hello).
    public var name: String
    /// The agent's host name and process id.
    public var host: String
    public var pid: Int32
    /// The shortest of the ping round trips before the start; half of it is subtracted from the start delay.
    public var rttUs: Double
    /// The agent process's CPU seconds (user + system) over its run.
    public var cpuSeconds: Double
    public var flows: FlowLoadResult

    enum CodingKeys: String, CodingKey {
        case name, host, pid, rttUs = "rtt_us", cpuSeconds = "cpu_s", flows
    }
}

/// The coordinator of a load run over several processes: it binds the control ROUTER, waits for its agents, hands
/// each its share of the workload and one start time, watches them run and collects their results.
///
/// Clocks: the start is sent as a delay ("start in N ns"), which each agent adds to its own monotonic clock on
/// receipt, so the hosts' clocks need not agree. The coordinator measures each agent's round trip with pings first
/// and sends each agent the delay less half its round trip; what remains is the asymmetry of the two directions
/// (at most half the round trip), reported as `start_skew_bound_us`.
final class LoadCoordinator {
    let socket: ZMQSocket
    /// The endpoint actually bound (the port the OS picked for `*`).
    let bound: String
    let options: CoordinatorOptions

    struct Agent {
        var identity: [UInt8]
        var name: String
        var host: String
        var pid: Int32
        var lastHeard: UInt64
        var rttNs: UInt64 = .max
        var ready = false
        var progress = RelayLoadProgress(elapsedSeconds: 0, completed: 0, sent: 0, errors: 0, phase: "warm-up")
        var result: ControlMessage?
    }

    private var agents: [Agent] = []

    /// Binds the control socket at once, so a second coordinator on the same port fails before anything starts.
    init(options: CoordinatorOptions, context: ZMQContext) throws {
        self.options = options
        socket = try context.socket(.router)
        try socket.set(.linger, 1000)
        do { bound = try socket.bind(options.endpoint) } catch {
            throw RelayLoadError(
                "the coordinator cannot listen on \(options.endpoint): \(error) (another coordinator or program may use that port: pick another with --coordinator)"
            )
        }
    }

    private func send(_ message: ControlMessage, to identity: [UInt8]) {
        guard let bytes = try? message.encoded() else { return }
        _ = try? socket.send(multipart: [identity, bytes], .dontWait)
    }

    /// Tells every agent the run is off (best effort: the agents also stop on their own bounded waits).
    func abortAll(_ reason: String) {
        var abort = ControlMessage("abort")
        abort.reason = reason
        for agent in agents { send(abort, to: agent.identity) }
    }

    /// Receives one message within `milliseconds` (nil on timeout): the sender's identity and the message.
    private func receive(within milliseconds: Int) throws -> (identity: [UInt8], message: ControlMessage)? {
        guard try socket.wait(timeoutMilliseconds: milliseconds),
            let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
        else { return nil }
        return (frames[0], try ControlMessage.decode(frames[1]))
    }

    private func describe(_ agent: Agent) -> String { "load host \(agent.name) (\(agent.host), pid \(agent.pid))" }

    /// Runs the whole coordinated run; on any failure the agents are told to stop before the error is thrown.
    /// - Parameters:
    ///   - onStart: called once with the start time (monotonic ns of this process), just before `start` goes out.
    ///   - onProgress: the agents' summed progress, about once a second.
    func run(
        brokers: BrokerList,
        workload: FlowLoadOptions,
        onStart: (UInt64) -> Void = { _ in },
        onProgress: (RelayLoadProgress) -> Void
    ) throws -> (hosts: [LoadHostResult], startSkewBoundUs: Double) {
        do {
            return try runAgents(brokers: brokers, workload: workload, onStart: onStart, onProgress: onProgress)
        } catch {
            abortAll("\(error)")
            throw error
        }
    }

    private func runAgents(
        brokers: BrokerList,
        workload: FlowLoadOptions,
        onStart: (UInt64) -> Void,
        onProgress: (RelayLoadProgress) -> Void
    ) throws -> (hosts: [LoadHostResult], startSkewBoundUs: Double) {
        let timeout = UInt64(options.timeoutSeconds * 1e9)
        // 1. Hellos.
        let helloDeadline = monotonicNanoseconds() + timeout
        while agents.count < options.hosts {
            let now = monotonicNanoseconds()
            guard now < helloDeadline else {
                throw RelayLoadError(
                    "only \(agents.count) of \(options.hosts) load hosts connected to \(bound) within \(String(format: "%g", options.timeoutSeconds)) s: start 'askrelay load --agent <this endpoint>' on each load host"
                )
            }
            guard let (identity, message) = try receive(within: 100) else { continue }
            try admit(identity, message)
        }
        // 2. Plans; then every agent registers its children and says `ready`.
        for (index, agent) in agents.enumerated() {
            var plan = ControlMessage("plan")
            plan.version = LoadControl.version
            plan.index = index
            plan.hosts = options.hosts
            plan.broker = brokers.entries[0].endpoint
            if brokers.entries.count > 1 { plan.brokers = brokers.description }
            plan.flowOptions = workload.share(index, of: options.hosts)
            send(plan, to: agent.identity)
        }
        let readyDeadline = monotonicNanoseconds() + timeout
        let silence = UInt64(LoadControl.silenceLimit.seconds * 1e9)
        for index in agents.indices { agents[index].lastHeard = monotonicNanoseconds() }
        while agents.contains(where: { !$0.ready }) {
            try checkSilence(silence, during: "while registering its children")
            guard monotonicNanoseconds() < readyDeadline else {
                let late = agents.filter { !$0.ready }.map(describe).joined(separator: ", ")
                throw RelayLoadError("not ready within \(String(format: "%g", options.timeoutSeconds)) s: \(late)")
            }
            guard let (identity, message) = try receive(within: 100) else { continue }
            try handle(identity, message) { agent in
                if message.type == "ready" { agent.ready = true }
            }
        }
        // 3. Round trips, for the start delay.
        for sequence in 0..<LoadControl.pingRounds {
            var sentAt: [UInt64] = []
            for agent in agents {
                var ping = ControlMessage("ping")
                ping.sequence = sequence
                sentAt.append(monotonicNanoseconds())
                send(ping, to: agent.identity)
            }
            var answered = Set<Int>()
            let deadline = monotonicNanoseconds() + 5_000_000_000
            while answered.count < agents.count {
                guard monotonicNanoseconds() < deadline else {
                    throw RelayLoadError("a load host did not answer a ping within 5 s")
                }
                guard let (identity, message) = try receive(within: 100) else { continue }
                let index = agents.firstIndex { $0.identity == identity }
                try handle(identity, message) { agent in
                    guard message.type == "pong", message.sequence == sequence, let index else { return }
                    answered.insert(index)
                    agent.rttNs = min(agent.rttNs, monotonicNanoseconds() - sentAt[index])
                }
            }
        }
        // 4. One start time on this clock, sent to each agent as a delay less half its round trip.
        let start = monotonicNanoseconds() + LoadControl.startLead
        onStart(start)
        for agent in agents {
            var message = ControlMessage("start")
            let arrives = monotonicNanoseconds() + agent.rttNs / 2
            message.startInNs = start > arrives ? start - arrives : 0
            send(message, to: agent.identity)
        }
        // 5. The run: beats carry progress; silence means the agent is gone.
        let runEnd =
            start + UInt64((workload.warmupSeconds + workload.durationSeconds + workload.drainSeconds) * 1e9)
        let resultDeadline = runEnd + timeout
        var lastProgress = monotonicNanoseconds()
        for index in agents.indices { agents[index].lastHeard = monotonicNanoseconds() }
        while agents.contains(where: { $0.result == nil }) {
            let now = monotonicNanoseconds()
            guard now < resultDeadline else {
                let late = agents.filter { $0.result == nil }.map(describe).joined(separator: ", ")
                throw RelayLoadError(
                    "no result within \(String(format: "%g", options.timeoutSeconds)) s after the run: \(late)"
                )
            }
            try checkSilence(silence, during: "during the run")
            if now >= lastProgress + 1_000_000_000 {
                lastProgress = now
                onProgress(summedProgress(elapsed: now > start ? Double(now - start) / 1e9 : 0, workload: workload))
            }
            guard let (identity, message) = try receive(within: 50) else { continue }
            try handle(identity, message) { agent in
                switch message.type {
                case "beat":
                    agent.progress = RelayLoadProgress(
                        elapsedSeconds: message.elapsedS ?? 0,
                        completed: message.completed ?? 0,
                        sent: message.sent ?? 0,
                        errors: message.errors ?? 0,
                        phase: message.phase ?? ""
                    )
                case "result":
                    agent.result = message
                    if let flows = message.result {
                        agent.progress.completed = flows.completed
                        agent.progress.sent = flows.started
                        agent.progress.errors = flows.errors
                    }
                default: break
                }
            }
        }
        onProgress(summedProgress(elapsed: Double(monotonicNanoseconds() - start) / 1e9, workload: workload))
        var hosts: [LoadHostResult] = []
        for agent in agents {
            send(ControlMessage("done"), to: agent.identity)
            guard let result = agent.result?.result, result.histograms != nil else {
                throw RelayLoadError("\(describe(agent)) reported a result without histograms")
            }
            hosts.append(
                LoadHostResult(
                    name: agent.name,
                    host: agent.host,
                    pid: agent.pid,
                    rttUs: Double(agent.rttNs) / 1000,
                    cpuSeconds: agent.result?.cpuSeconds ?? 0,
                    flows: result
                )
            )
        }
        self.hostSamples = agents.map { $0.result?.samples ?? [] }
        let skew = Double(agents.map(\.rttNs).max() ?? 0) / 2000
        return (hosts, skew)
    }

    /// Fails the run when an agent still owing its result has not been heard from for `silence` ns.
    private func checkSilence(_ silence: UInt64, during phase: String) throws {
        let now = monotonicNanoseconds()
        guard let gone = agents.first(where: { $0.result == nil && now > $0.lastHeard + silence }) else { return }
        throw RelayLoadError(
            "\(describe(gone)) sent nothing for \(String(format: "%g", LoadControl.silenceLimit.seconds)) s \(phase): it stopped or its network is down; the run is void"
        )
    }

    /// Each agent's own throughput samples, in host order, after ``run``.
    private(set) var hostSamples: [[ThroughputSample]] = []

    /// The agents' counters added up; the phase from this clock (warm-up, measuring, draining).
    private func summedProgress(elapsed: Double, workload: FlowLoadOptions) -> RelayLoadProgress {
        RelayLoadProgress(
            elapsedSeconds: elapsed,
            completed: agents.map(\.progress.completed).reduce(0, +),
            sent: agents.map(\.progress.sent).reduce(0, +),
            errors: agents.map(\.progress.errors).reduce(0, +),
            phase: elapsed < workload.warmupSeconds
                ? "warm-up" : elapsed < workload.warmupSeconds + workload.durationSeconds ? "measuring" : "draining"
        )
    }

    /// A hello: admitted while places are left and its version and mode match, else refused (and, for a
    /// mismatch, the run fails: a host that cannot take part leaves the run short of load).
    private func admit(_ identity: [UInt8], _ message: ControlMessage) throws {
        guard message.type == "hello" else {
            if agents.contains(where: { $0.identity == identity }) { return }
            var refuse = ControlMessage("refuse")
            refuse.reason = "say hello first"
            send(refuse, to: identity)
            return
        }
        let who = "\(message.host ?? "?"), pid \(message.pid ?? 0)"
        if message.version != LoadControl.version {
            var refuse = ControlMessage("refuse")
            refuse.reason =
                "the coordinator speaks load-control version \(LoadControl.version), this agent \(message.version.map(String.init) ?? "none"): run the same askrelay build on every load host"
            send(refuse, to: identity)
            throw RelayLoadError(
                "a load host (\(who)) speaks load-control version \(message.version.map(String.init) ?? "none"), this coordinator \(LoadControl.version): run the same askrelay build on every load host"
            )
        }
        if let mode = message.mode, mode != "flows" {
            var refuse = ControlMessage("refuse")
            refuse.reason = "the coordinator runs --mode flows, this agent was started with --mode \(mode)"
            send(refuse, to: identity)
            throw RelayLoadError(
                "a load host (\(who)) was started with --mode \(mode); this coordinated run is --mode flows: give the agents no --mode or the same one"
            )
        }
        guard agents.count < options.hosts else {
            var refuse = ControlMessage("refuse")
            refuse.reason = "this coordinator already has its \(options.hosts) load hosts"
            send(refuse, to: identity)
            return
        }
        agents.append(
            Agent(
                identity: identity,
                name: "host-\(agents.count + 1)",
                host: message.host ?? "?",
                pid: message.pid ?? 0,
                lastHeard: monotonicNanoseconds()
            )
        )
        printError("load host host-\(agents.count) connected: \(who) (\(agents.count) of \(options.hosts))")
    }

    /// A message from an admitted agent: refreshes its liveness; `error` fails the run; the rest goes to `body`.
    private func handle(_ identity: [UInt8], _ message: ControlMessage, _ body: (inout Agent) -> Void) throws {
        guard let index = agents.firstIndex(where: { $0.identity == identity }) else {
            try admit(identity, message)
            return
        }
        agents[index].lastHeard = monotonicNanoseconds()
        if message.type == "error" {
            throw RelayLoadError("\(describe(agents[index])) failed: \(message.reason ?? "no reason given")")
        }
        body(&agents[index])
    }
}

/// `askrelay load --agent ENDPOINT`: one load host of a coordinated run. It says hello, runs the share of the
/// workload the coordinator hands it from the start time it is given, beats while it runs and sends its result.
public enum LoadAgent {
    /// What an agent ran and measured.
    public struct Outcome: Sendable {
        public var index: Int
        public var hosts: Int
        public var options: FlowLoadOptions
        public var result: FlowLoadResult
        public var samples: [ThroughputSample]
        /// The brokers the host's children used.
        public var brokers: BrokerList
    }

    /// Runs on the calling thread (it blocks); the flows run on a thread of their own.
    /// - Parameters:
    ///   - mode: the agent's own `--mode`, when given (it must be the coordinator's).
    ///   - brokers: the agent's own `--broker` or `--brokers`, used instead of the coordinator's (the same
    ///     brokers by other addresses).
    ///   - timeoutSeconds: how long to wait for the plan, for the start, and for the coordinator's `done`.
    public static func run(
        coordinator: String,
        mode: String?,
        brokers: BrokerList?,
        timeoutSeconds: Double,
        version: Int = LoadControl.version,
        onProgress: @escaping @Sendable (RelayLoadProgress) -> Void
    ) throws -> Outcome {
        let context = try ZMQContext()
        let socket = try context.socket(.dealer)
        try socket.set(.linger, 2000)
        try socket.connect(coordinator)
        let timeout = UInt64(timeoutSeconds * 1e9)
        func send(_ message: ControlMessage) throws { _ = try socket.send(try message.encoded()) }
        func receive(within milliseconds: Int) throws -> ControlMessage? {
            guard try socket.wait(timeoutMilliseconds: milliseconds), let frame = try socket.receive(.dontWait)
            else { return nil }
            let message = try ControlMessage.decode(frame.bytes)
            switch message.type {
            case "refuse": throw RelayLoadError("the coordinator refused this load host: \(message.reason ?? "")")
            case "abort": throw RelayLoadError("the coordinator stopped the run: \(message.reason ?? "")")
            default: return message
            }
        }
        var hello = ControlMessage("hello")
        hello.version = version
        hello.mode = mode
        hello.host = ProcessInfo.processInfo.hostName
        hello.pid = getpid()
        try send(hello)
        // The plan.
        let planDeadline = monotonicNanoseconds() + timeout
        var plan: ControlMessage?
        while plan == nil {
            guard monotonicNanoseconds() < planDeadline else {
                throw RelayLoadError(
                    "no plan from the coordinator at \(coordinator) within \(String(format: "%g", timeoutSeconds)) s: is 'askrelay load --coordinator' running there, reachable, and still short of load hosts?"
                )
            }
            if let message = try receive(within: 100), message.type == "plan" { plan = message }
        }
        let listed: BrokerList?
        do { listed = try plan?.brokers.map { try BrokerList(parsing: $0) } } catch {
            throw RelayLoadError("the coordinator's plan has an unusable broker list: \(error)")
        }
        guard let plan, let options = plan.flowOptions, let index = plan.index, let hosts = plan.hosts,
            let planBrokers = brokers ?? listed ?? plan.broker.map({ BrokerList(single: $0) })
        else { throw RelayLoadError("the coordinator's plan is incomplete") }
        let target =
            planBrokers.entries.count == 1 ? "broker \(planBrokers.entries[0].endpoint)" : "brokers \(planBrokers)"
        printError("load host \(index + 1) of \(hosts): children \(options.hosted), \(target)")
        // The flows, on their own thread; they wait at `startAt` for the coordinator's start.
        let registered = OneShot<Void>()
        let startAt = OneShot<UInt64>()
        let finished = OneShot<Result<FlowLoadResult, RelayLoadError>>()
        let latest = Mutex(RelayLoadProgress(elapsedSeconds: 0, completed: 0, sent: 0, errors: 0, phase: "warm-up"))
        let recorder = ThroughputRecorder()
        let label = "flows host-\(index + 1)"
        let cpuBefore = ProcessCPU.seconds(pid: getpid()) ?? 0
        let worker = JoinableThread(name: "load-agent") {
            do {
                let result = try FlowLoad.run(
                    brokers: planBrokers,
                    options: options,
                    startAt: {
                        registered.fulfill()
                        guard let start = startAt.wait(timeout: .seconds(timeoutSeconds)) else {
                            throw RelayLoadError("no start from the coordinator within \(timeoutSeconds) s")
                        }
                        return start
                    },
                    progress: { progress in
                        latest.withLock { $0 = progress }
                        recorder.record(label, progress)
                        onProgress(progress)
                    }
                )
                finished.fulfill(.success(result))
            } catch {
                finished.fulfill(.failure(error as? RelayLoadError ?? RelayLoadError("\(error)")))
            }
        }
        _ = worker
        var saidReady = false
        var lastBeat: UInt64 = 0
        while true {
            if let outcome = finished.current {
                switch outcome {
                case .failure(let error):
                    var message = ControlMessage("error")
                    message.reason = error.description
                    try? send(message)
                    throw error
                case .success(let result):
                    var message = ControlMessage("result")
                    message.result = result
                    message.samples = recorder.samples
                    message.cpuSeconds = (ProcessCPU.seconds(pid: getpid()) ?? cpuBefore) - cpuBefore
                    try send(message)
                    let deadline = monotonicNanoseconds() + timeout
                    while monotonicNanoseconds() < deadline {
                        if let reply = try receive(within: 100), reply.type == "done" {
                            return Outcome(
                                index: index,
                                hosts: hosts,
                                options: options,
                                result: result,
                                samples: recorder.samples,
                                brokers: planBrokers
                            )
                        }
                    }
                    throw RelayLoadError(
                        "the coordinator did not acknowledge this host's result within \(String(format: "%g", timeoutSeconds)) s"
                    )
                }
            }
            if !saidReady && registered.current != nil {
                try send(ControlMessage("ready"))
                saidReady = true
            }
            let now = monotonicNanoseconds()
            // Beats from the plan on, so the coordinator also sees an agent vanish while its children register.
            if now >= lastBeat + LoadControl.beatInterval {
                lastBeat = now
                let progress = latest.withLock { $0 }
                var beat = ControlMessage("beat")
                beat.elapsedS = progress.elapsedSeconds
                beat.sent = progress.sent
                beat.completed = progress.completed
                beat.errors = progress.errors
                beat.phase = progress.phase
                try send(beat)
            }
            guard let message = try receive(within: 20) else { continue }
            switch message.type {
            case "ping":
                var pong = ControlMessage("pong")
                pong.sequence = message.sequence
                try send(pong)
            case "start":
                startAt.fulfill(monotonicNanoseconds() + (message.startInNs ?? 0))
                // On stdout, for scripts and tests: this host's run has its start time.
                printLine("load host \(index + 1) of \(hosts) started: children \(options.hosted)")
            default: break
            }
        }
    }
}
