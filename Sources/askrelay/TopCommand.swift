import AskBroker
import AskProtocol
import AskCLI
import AskRelayProcesses
import Foundation
import ZeroMQ

/// `askrelay top`: shows the broker's statistics snapshots live.
struct TopCommand: Command {
    static let name = "top"
    static let abstract = "show the live statistics of one broker or of every broker of a list (--stats-endpoint)"
    static let discussion = """
        Subscribes to the JSON snapshot the broker publishes every second. On a terminal the view is redrawn in
        place; into a pipe or file it prints one line per snapshot. --count N stops after N snapshots. With
        several --stats-endpoint (the brokers of a sharded deployment) it shows a row per broker and the totals,
        once every broker has published again; --count then counts those rounds.
        """
    static let options: [OptionSpec] = [
        .value(
            "stats-endpoint",
            "URL",
            env: "ASKRELAY_STATS_ENDPOINT",
            default: "tcp://127.0.0.1:5556",
            repeatable: true,
            help: "the broker's stats PUB endpoint; repeat it for every broker of a sharded deployment"
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
            help: "give up (exit 69) when no snapshot arrives for this long (from 1ms to 100d)"
        ),
        .flag("json", env: "ASKRELAY_TOP_JSON", help: "print each snapshot as raw JSON"),
    ]

    let endpoints: [String]
    let count: Int?
    let timeout: Duration
    let json: Bool

    init(arguments: Arguments) throws {
        endpoints = try arguments.endpoints("stats-endpoint", binding: false)
        if endpoints.isEmpty { _ = try arguments.require("stats-endpoint") }
        if let twice = Dictionary(grouping: endpoints, by: { $0 }).first(where: { $0.value.count > 1 })?.key {
            throw UsageError("--stats-endpoint \(twice) is given twice: give each broker's once")
        }
        count = try arguments.int("count", in: 1...1_000_000)
        timeout = try arguments.duration("timeout", in: .milliseconds(1)...ValueBounds.maximumDuration) ?? .seconds(10)
        json = arguments.flag("json")
    }

    func run() async throws -> Int32 {
        if endpoints.count > 1 { return try await runMany() }
        let (endpoint, count, timeout, json) = (endpoints[0], self.count, self.timeout, self.json)
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

    /// Several brokers: one SUB socket each; a round is complete once every one has published since the last.
    func runMany() async throws -> Int32 {
        let (endpoints, count, timeout, json) = (self.endpoints, self.count, self.timeout, self.json)
        return try await onDedicatedThread(name: "top") {
            let context = try ZMQContext()
            var sockets: [ZMQSocket] = []
            var poller = ZMQPoller()
            for endpoint in endpoints {
                let socket = try context.socket(.sub)
                try socket.set(.linger, 0)
                try socket.set(.subscribe, Array("stats".utf8))
                try socket.connect(endpoint)
                _ = poller.add(socket)
                sockets.append(socket)
            }
            let terminal = isatty(2) == 1 && isatty(1) == 1
            var latest: [BrokerSnapshot?] = Array(repeating: nil, count: endpoints.count)
            var fresh = Array(repeating: false, count: endpoints.count)
            var rounds = 0
            var roundStarted = ContinuousClock.now
            while count.map({ rounds < $0 }) ?? true {
                let left = timeout - (ContinuousClock.now - roundStarted)
                guard left > .zero, try poller.poll(timeoutMilliseconds: max(1, left.milliseconds)) > 0 else {
                    let silent = endpoints.indices.filter { !fresh[$0] }.map { endpoints[$0] }
                    printError(
                        "askrelay top: no statistics from \(silent.joined(separator: ", ")) within \(timeout); "
                            + "is each broker running with --stats-endpoint?"
                    )
                    return ExitCode.unavailable
                }
                for index in sockets.indices where poller.isReady(index) {
                    while let frames = try sockets[index].receiveMultipart(.dontWait) {
                        guard frames.count == 2 else { continue }
                        if json {
                            printLine(
                                #"{"statsEndpoint":"\#(endpoints[index])","snapshot":"#
                                    + String(decoding: frames[1], as: UTF8.self) + "}"
                            )
                        }
                        guard let snapshot = try? BrokerSnapshot.decode(frames[1]) else {
                            printError("askrelay top: unreadable snapshot from \(endpoints[index])")
                            continue
                        }
                        latest[index] = snapshot
                        fresh[index] = true
                    }
                }
                guard !fresh.contains(false) else { continue }
                rounds += 1
                fresh = Array(repeating: false, count: endpoints.count)
                roundStarted = ContinuousClock.now
                if json { continue }
                let rows = zip(endpoints, latest.compactMap { $0 }).map { (endpoint: $0, snapshot: $1) }
                if terminal {
                    print("\u{1B}[H\u{1B}[2J" + Self.renderMany(rows), terminator: "")
                    fflush(nil)
                } else {
                    for row in rows { printLine("stats=\(row.endpoint) " + Self.line(row.snapshot)) }
                    printLine(Self.totalLine(rows.map(\.snapshot)))
                }
            }
            return ExitCode.success
        }
    }

    /// The sums over brokers: sessions by role, routed, delivered, queued, in flight, busy, questions by state;
    /// the largest commit p99.
    static func totalLine(_ snapshots: [BrokerSnapshot]) -> String {
        func sum(_ maps: [[String: Int]]) -> String {
            maps.reduce(into: [String: Int]()) { total, map in total.merge(map, uniquingKeysWith: +) }
                .sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        let routed = snapshots.map { $0.routedByKind.values.reduce(0, +) }.reduce(0, +)
        return "total brokers=\(snapshots.count) sessions=[\(sum(snapshots.map(\.sessions)))] routed=\(routed) "
            + "delivered=\(snapshots.map(\.delivered).reduce(0, +)) queued=\(snapshots.map(\.queued).reduce(0, +)) "
            + "inflight=\(snapshots.map(\.inflight).reduce(0, +)) busy=\(snapshots.map(\.busy).reduce(0, +)) "
            + "ledger=[\(sum(snapshots.map(\.ledger)))] "
            + "commit_p99_us_max=\(snapshots.map { $0.commitMicros["p99"] ?? 0 }.max() ?? 0)"
    }

    /// A table: a row per broker, then the totals.
    static func renderMany(_ rows: [(endpoint: String, snapshot: BrokerSnapshot)]) -> String {
        func cell(_ text: String, _ width: Int) -> String {
            String(repeating: " ", count: max(0, width - text.count)) + text
        }
        var text = "AskRelay brokers: \(rows.count)\n\n"
        text += "stats endpoint".padding(toLength: 40, withPad: " ", startingAt: 0)
        for title in ["sessions", "routed", "delivered", "queued", "inflight", "busy", "open", "p99 µs"] {
            text += cell(title, 11)
        }
        text += "\n"
        func line(_ name: String, _ values: [Int]) -> String {
            name.padding(toLength: 40, withPad: " ", startingAt: 0) + values.map { cell(String($0), 11) }.joined()
                + "\n"
        }
        func values(_ s: BrokerSnapshot) -> [Int] {
            let open = s.ledger.filter { ["admitting", "presented", "sent"].contains($0.key) }.values.reduce(0, +)
            return [
                s.sessions.values.reduce(0, +), s.routedByKind.values.reduce(0, +), s.delivered, s.queued, s.inflight,
                s.busy, open, s.commitMicros["p99"] ?? 0,
            ]
        }
        var total = Array(repeating: 0, count: 8)
        for row in rows {
            let v = values(row.snapshot)
            text += line(row.endpoint, v)
            for index in 0..<7 { total[index] += v[index] }
            total[7] = max(total[7], v[7])
        }
        text += line("total", total)
        return text
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
