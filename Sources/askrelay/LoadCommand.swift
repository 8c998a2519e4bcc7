import AskCLI
import AskSimulation
import Foundation
import ZeroMQ

/// `askrelay load`: load benchmarks. `--mode relay` measures the broker against a plain zmq_proxy in the same run.
struct LoadCommand: Command {
    static let name = "load"
    static let abstract = "load benchmark: relay round trips through our broker vs a plain zmq_proxy"
    static let discussion = """
        --mode relay: clients (DEALER, role client) send 'echo' messages through the broker to echo workers, which
        reply to the sender; a round trip ends when the reply is delivered. Closed loop keeps --inflight round trips
        in flight; --rate switches to an open loop (constant arrivals, latency from the intended send time).
        The broker is started as a process (askrelay-broker next to this executable, fresh temp --data-dir) unless
        --broker is given. --baseline proxy then runs the identical workload through 'askrelay proxy' (zmq_proxy).
        Stdout: a table; its last line is 'throughput=<ours rt/s> baseline=<proxy rt/s> ratio=<ours/proxy>'.
        Progress on stderr once a second. See docs/performance.md. Build with -c release.
        """
    static let options: [OptionSpec] = [
        .value("mode", "MODE", default: "relay", help: "relay (flows: not built yet)"),
        .value("connections", "N", default: "4", help: "client DEALER sockets"),
        .value("inflight", "N", default: "100", help: "round trips in flight over all connections (closed loop)"),
        .value("rate", "R", help: "open loop: round trips started per second (overrides --inflight)"),
        .value("duration", "DURATION", default: "5s", help: "measured window"),
        .value("warmup", "DURATION", default: "1s", help: "load before the measured window, not counted"),
        .value("size", "BYTES", default: "100", help: "message body size (at least 16)"),
        .value("echo-workers", "N", default: "2", help: "echo workers (threads in this process)"),
        .value("durability", "MODE", default: "off", help: "broker journal: off, batch or strict"),
        .value("baseline", "KIND", help: "proxy: also run the workload through a plain zmq_proxy process"),
        .value("broker", "ENDPOINT", help: "use this running broker instead of starting one"),
        .value("client-threads", "KIND", default: "per-socket", help: "per-socket (a thread per client socket) or shared (one thread polls all)"),
        .value("report-dir", "DIR", help: "write load.json with every figure here"),
    ]

    let mode: String
    let options: RelayLoadOptions
    let durability: String
    let baseline: Bool
    let broker: String?
    let reportDirectory: String?

    init(arguments: Arguments) throws {
        mode = try arguments.choice("mode", ["relay", "flows"]) ?? "relay"
        var options = RelayLoadOptions()
        options.connections = try arguments.int("connections", in: 1...10_000) ?? 4
        options.inflight = try arguments.int("inflight", in: 1...1_000_000) ?? 100
        options.rate = try arguments.double("rate", in: 0.001...100_000_000)
        options.durationSeconds = try Self.seconds(arguments.duration("duration")) ?? 5
        options.warmupSeconds = try Self.seconds(arguments.duration("warmup")) ?? 1
        options.size = try arguments.int("size", in: 16...1_000_000) ?? 100
        options.echoWorkers = try arguments.int("echo-workers", in: 1...1000) ?? 2
        options.sharedClientThread = try arguments.choice("client-threads", ["per-socket", "shared"]) == "shared"
        self.options = options
        durability = try arguments.choice("durability", ["off", "batch", "strict"]) ?? "off"
        baseline = try arguments.choice("baseline", ["proxy"]) != nil
        broker = arguments.string("broker")
        reportDirectory = arguments.string("report-dir")
    }

    static func seconds(_ duration: Duration?) -> Double? {
        duration.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
    }

    func validate() throws {
        if let problem = options.problems().first { throw UsageError(problem) }
    }

    func run() async throws -> Int32 {
        guard mode == "relay" else {
            printError("askrelay load: --mode flows is not built yet; use --mode relay")
            return ExitCode.unavailable
        }
        let (options, durability, baseline, broker, reportDirectory) = (self.options, self.durability, self.baseline, self.broker, self.reportDirectory)
        // Interrupted: the broker and proxy processes go down with us.
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
            ServerProcess.terminateAll()
            exit(128 + signal)
        }
        defer { _ = signals }
        return try await onDedicatedThread(name: "load") {
            let me = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
            let directory = me.deletingLastPathComponent()
            let progress = ProgressPrinter()
            let ours: RelayLoadResult
            do {
                if let broker {
                    ours = try RelayLoad.run(target: .broker(broker), options: options, progress: { progress.show("askrelay", $0) })
                } else {
                    let dataDirectory = NSTemporaryDirectory() + "askrelay-load-" + UUID().uuidString
                    defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
                    let server = try ServerProcess(
                        executable: directory.appendingPathComponent("askrelay-broker"),
                        arguments: ["--endpoint", "tcp://127.0.0.1:*", "--data-dir", dataDirectory, "--durability", durability, "--log-level", "warning"])
                    defer { server.stop() }
                    guard let endpoint = server.readyFields["endpoints"]?.split(separator: ",").first.map(String.init) else {
                        throw RelayLoadError("the broker's ready line names no endpoint: \(server.readyLine)")
                    }
                    ours = try RelayLoad.run(target: .broker(endpoint), options: options, progress: { progress.show("askrelay", $0) })
                }
                progress.finish()
            }
            var proxyResult: RelayLoadResult?
            if baseline {
                let server = try ServerProcess(
                    executable: me, arguments: ["proxy", "--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*"])
                defer { server.stop() }
                guard let frontend = server.readyFields["frontend"], let backend = server.readyFields["backend"] else {
                    throw RelayLoadError("the proxy's ready line names no endpoints: \(server.readyLine)")
                }
                proxyResult = try RelayLoad.run(target: .proxy(frontend: frontend, backend: backend), options: options, progress: { progress.show("zmq_proxy", $0) })
                progress.finish()
            }
            let report = RelayLoadReport(
                commandLine: CommandLine.arguments.joined(separator: " "), durability: broker == nil ? durability : "external",
                externalBroker: broker != nil, options: options, ours: ours, baseline: proxyResult)
            if let reportDirectory { try report.write(to: reportDirectory) }
            for line in report.table { printLine(line) }
            return ExitCode.success
        }
    }
}

/// Progress on stderr: redrawn in place on a terminal, one line per update otherwise.
final class ProgressPrinter: Sendable {
    let isTerminal = isatty(2) == 1

    func show(_ label: String, _ progress: RelayLoadProgress) {
        let text = String(format: "%@ %.0fs %@: %d sent, %d completed, %d errors", label, progress.elapsedSeconds, progress.phase, progress.sent, progress.completed, progress.errors)
        if isTerminal {
            FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
        } else {
            printError(text)
        }
    }

    func finish() {
        if isTerminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}

/// `askrelay proxy`: a plain zmq_proxy (ROUTER frontend, DEALER backend) for the load baseline.
struct ProxyCommand: Command {
    static let name = "proxy"
    static let abstract = "plain zmq_proxy between a ROUTER frontend and a DEALER backend (load baseline)"
    static let discussion = """
        Prints 'ready frontend=<bound URL> backend=<bound URL>' on stdout once both are bound, then runs
        zmq_proxy until SIGTERM or SIGINT (exit 0). Used by 'askrelay load --baseline proxy'.
        """
    static let options: [OptionSpec] = [
        .value("frontend", "URL", default: "tcp://127.0.0.1:*", help: "ROUTER endpoint clients connect to"),
        .value("backend", "URL", default: "tcp://127.0.0.1:*", help: "DEALER endpoint workers connect to"),
    ]

    let frontend: String
    let backend: String

    init(arguments: Arguments) throws {
        frontend = try arguments.require("frontend")
        backend = try arguments.require("backend")
    }

    func run() async throws -> Int32 {
        let (frontendURL, backendURL) = (frontend, backend)
        return try await onDedicatedThread(name: "proxy") {
            let context = try Context()
            let frontend = try context.socket(.router)
            let backend = try context.socket(.dealer)
            for socket in [frontend, backend] {
                try socket.set(.linger, 0)
                try socket.set(.sendHighWaterMark, 0)
                try socket.set(.receiveHighWaterMark, 0)
            }
            let boundFrontend = try frontend.bind(frontendURL)
            let boundBackend = try backend.bind(backendURL)
            let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { _ in context.shutdown() }
            printLine("ready frontend=\(boundFrontend) backend=\(boundBackend)")
            do {
                try ZMQ.proxy(frontend: frontend, backend: backend)
            } catch let error as ZMQError where error.isContextTerminated {
            }
            _ = signals
            return ExitCode.success
        }
    }
}
