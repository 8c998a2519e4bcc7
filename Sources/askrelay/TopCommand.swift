import AskBroker
import AskProtocol
import AskCLI
import Foundation
import ZeroMQ

/// `askrelay top`: shows the broker's statistics snapshots live.
struct TopCommand: Command {
    static let name = "top"
    static let abstract = "show a broker's live statistics (its --stats-endpoint)"
    static let discussion = """
        Subscribes to the JSON snapshot the broker publishes every second. On a terminal the view is redrawn in
        place; into a pipe or file it prints one line per snapshot. --count N stops after N snapshots.
        """
    static let options: [OptionSpec] = [
        .value(
            "stats-endpoint",
            "URL",
            env: "ASKRELAY_STATS_ENDPOINT",
            default: "tcp://127.0.0.1:5556",
            help: "the broker's stats PUB endpoint"
        ),
        .value(
            "count",
            "N",
            env: "ASKRELAY_TOP_COUNT",
            help: "exit after N snapshots (1...1000000); none: until interrupted"
        ),
        .value(
            "timeout",
            "DURATION",
            env: "ASKRELAY_TOP_TIMEOUT",
            default: "10s",
            help: "give up (exit 69) when no snapshot arrives for this long"
        ),
        .flag("json", env: "ASKRELAY_TOP_JSON", help: "print each snapshot as raw JSON"),
    ]

    let endpoint: String
    let count: Int?
    let timeout: Duration
    let json: Bool

    init(arguments: Arguments) throws {
        endpoint = try arguments.requireEndpoint("stats-endpoint", binding: false)
        count = try arguments.int("count", in: 1...1_000_000)
        timeout = try arguments.duration("timeout", in: .milliseconds(1)...ValueBounds.maximumDuration) ?? .seconds(10)
        json = arguments.flag("json")
    }

    func run() async throws -> Int32 {
        let (endpoint, count, timeout, json) = (self.endpoint, self.count, self.timeout, self.json)
        return try await onDedicatedThread(name: "top") {
            let context = try ZMQContext()
            let socket = try context.socket(.sub)
            try socket.set(.linger, 0)
            try socket.set(.subscribe, Array("stats".utf8))
            try socket.connect(endpoint)
            let terminal = isatty(2) == 1 && isatty(1) == 1
            var shown = 0
            let timeoutMs = timeout.milliseconds
            while count.map({ shown < $0 }) ?? true {
                guard try socket.wait(timeoutMilliseconds: timeoutMs),
                    let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
                else {
                    printError(
                        "askrelay top: no statistics from \(endpoint) within \(timeout); is the broker running with --stats-endpoint?"
                    )
                    return ExitCode.unavailable
                }
                shown += 1
                if json {
                    printLine(String(decoding: frames[1], as: UTF8.self))
                    continue
                }
                guard let snapshot = try? BrokerSnapshot.decode(frames[1]) else {
                    printError("askrelay top: unreadable snapshot")
                    continue
                }
                if terminal {
                    print("\u{1B}[H\u{1B}[2J" + Self.render(snapshot), terminator: "")
                    fflush(nil)
                } else {
                    printLine(Self.line(snapshot))
                }
            }
            return ExitCode.success
        }
    }

    static func line(_ s: BrokerSnapshot) -> String {
        let sessions = s.sessions.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        let ledger = s.ledger.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        let routed = s.routedByKind.values.reduce(0, +)
        return
            "broker=\(s.broker) sessions=[\(sessions)] routed=\(routed) delivered=\(s.delivered) queued=\(s.queued) inflight=\(s.inflight) busy=\(s.busy) ledger=[\(ledger)] commit_p99_us=\(s.commitMicros["p99"] ?? 0)"
    }

    static func render(_ s: BrokerSnapshot) -> String {
        var text = "AskRelay broker \(s.broker)   \(s.time)\n\n"
        text +=
            "sessions   "
            + s.sessions.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: "   ") + "\n"
        text +=
            "messages   delivered \(s.delivered)   redelivered \(s.redelivered)   duplicates \(s.duplicates)   busy \(s.busy)\n"
        text += "queues     queued \(s.queued)   in flight \(s.inflight)\n"
        text +=
            "journal    commits \(s.commits)   p50 \(s.commitMicros["p50"] ?? 0) µs   p99 \(s.commitMicros["p99"] ?? 0) µs\n\n"
        text += "routed by kind\n"
        for (kind, value) in s.routedByKind.sorted(by: { $0.key < $1.key }) {
            text += "  \(kind.padding(toLength: 18, withPad: " ", startingAt: 0)) \(value)\n"
        }
        text += "\nquestions by state\n"
        for (state, value) in s.ledger.sorted(by: { $0.key < $1.key }) {
            text += "  \(state.padding(toLength: 18, withPad: " ", startingAt: 0)) \(value)\n"
        }
        if !s.refusalsByCode.isEmpty {
            text += "\nrefusals\n"
            for (code, value) in s.refusalsByCode.sorted(by: { $0.key < $1.key }) {
                text += "  \(code.padding(toLength: 18, withPad: " ", startingAt: 0)) \(value)\n"
            }
        }
        if !s.deepestQueues.isEmpty {
            text += "\ndeepest queues\n"
            for (address, depth) in s.deepestQueues.sorted(by: { $0.value > $1.value }) {
                text += "  \(address.padding(toLength: 24, withPad: " ", startingAt: 0)) \(depth)\n"
            }
        }
        return text
    }
}
