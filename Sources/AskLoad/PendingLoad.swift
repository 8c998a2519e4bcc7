import AskProtocol
import Dispatch
import Foundation
import ZeroMQ

/// The workload of `askrelay load --mode pending`: fill a broker with pending questions, as leanly as possible.
public struct PendingLoadOptions: Sendable, Codable, Equatable {
    /// Logical children (`child/p<i>`), claimed by raw DEALERs of this process.
    public var endpoints = 100_000
    /// Questions to leave pending (asked, presented, sent, never answered).
    public var questions = 1_000_000
    /// Families `f1`...`fN` (child `i` in `f<i mod N + 1>`), one guardian `guardian/pg<f>` each, registered once and
    /// gone, so every question waits in its guardian's mailbox.
    public var families = 50_000
    /// Asks in flight (asked but their `send` not yet acknowledged).
    public var window = 2000
    /// Give up filling after this long.
    public var timeoutSeconds: Double = 900

    public init() {}

    /// Claims per HELLO (keeps the HELLO body well under the 1 MiB frame limit).
    static let claimsPerSocket = 10_000

    enum CodingKeys: String, CodingKey {
        case endpoints, questions, families, window, timeoutSeconds = "timeout_s"
    }
}

/// What a fill reached.
public struct PendingLoadResult: Sendable, Codable, Equatable {
    /// `send`s acknowledged by the broker: questions now pending with their guardians.
    public var pending: Int
    public var asked: Int
    /// NACKs (for example `busy` when the broker's queues are full); the first few in `errorSamples`.
    public var refused: Int
    public var seconds: Double
    public var errorSamples: [String]
    /// Sessions registered again after the broker said `not-registered` (it had ended them).
    public var reregistered: Int

    public init(pending: Int, asked: Int, refused: Int, seconds: Double, errorSamples: [String], reregistered: Int = 0)
    {
        self.pending = pending
        self.asked = asked
        self.refused = refused
        self.seconds = seconds
        self.errorSamples = errorSamples
        self.reregistered = reregistered
    }

    enum CodingKeys: String, CodingKey {
        case pending, asked, refused, seconds, errorSamples = "error_samples", reregistered
    }
}

/// A lean generator of pending questions: raw DEALERs claim the children (10 000 per socket), one raw DEALER plays
/// the limits service (`limits/raw-1`, presents every question), and one thread drives them: `ask` → `ask.result`
/// → `send`, keeping `window` asks in flight, until `questions` sends are acknowledged (a refused ask is replaced by
/// a new one). Guardians register once (so the families have rosters) and leave. A session the broker ended
/// (`not-registered`) registers again with the same claims, as the worker library does.
public enum PendingLoad {
    /// Registers guardians and children; calls `registered` (e.g. to read the broker's memory), then fills until
    /// `questions` are pending or `stop` is requested. Blocking: call it on a dedicated thread.
    public static func run(
        broker: String,
        options: PendingLoadOptions,
        context: ZMQContext? = nil,
        stop: LoadStop = LoadStop(),
        registered: () -> Void = {},
        progress: ((RelayLoadProgress) -> Void)? = nil
    ) throws -> PendingLoadResult {
        let context = try context ?? ZMQContext()
        let deadline = monotonicNanoseconds() + 120_000_000_000
        var input = Multipart()
        func hello(role: SessionRole, claims: [EndpointClaim], on socket: ZMQSocket) throws {
            var out = Multipart()
            let hello = Hello(
                role: role,
                worker: "askrelay-load-pending[\(getpid())]",
                endpoints: claims,
                heartbeatMs: 60_000
            )
            WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
            try socket.send(out)
        }
        func open(role: SessionRole, claims: [EndpointClaim]) throws -> ZMQSocket {
            let socket = try context.socket(.dealer)
            try socket.set(.linger, 2000)
            try socket.set(.sendHighWaterMark, 0)
            try socket.set(.receiveHighWaterMark, 0)
            try socket.connect(broker)
            try hello(role: role, claims: claims, on: socket)
            while true {
                guard monotonicNanoseconds() < deadline else { throw RelayLoadError("no WELCOME within 120 s") }
                guard try socket.wait(timeoutMilliseconds: 1000) else { continue }
                while try socket.receive(into: &input, .dontWait) {
                    let parsed = try WireParser.parse(input)
                    if parsed.command == .welcome { return socket }
                    if parsed.command == .nack {
                        throw RelayLoadError(
                            "HELLO refused: \(input.string(parsed.codeFrame)) \(input.string(parsed.reasonFrame))"
                        )
                    }
                }
            }
        }
        // Guardians: register once, then leave (their mailboxes keep the questions).
        let families = max(1, min(options.families, options.endpoints))
        for start in stride(from: 1, through: families, by: PendingLoadOptions.claimsPerSocket) {
            let end = min(families, start + PendingLoadOptions.claimsPerSocket - 1)
            let socket = try open(
                role: .guardian,
                claims: (start...end).map { EndpointClaim(address: "guardian/pg\($0)", family: "f\($0)") }
            )
            sayBye(socket)
        }
        let limitsClaims = [EndpointClaim(address: "limits/raw-1")]
        let limits = try open(role: .limits, claims: limitsClaims)
        var children: [ZMQSocket] = []
        var childClaims: [[EndpointClaim]] = []
        var childAddresses: [[UInt8]] = []
        for start in stride(from: 0, to: options.endpoints, by: PendingLoadOptions.claimsPerSocket) {
            let end = min(options.endpoints, start + PendingLoadOptions.claimsPerSocket)
            childClaims.append(
                (start..<end).map { EndpointClaim(address: "child/p\($0)", family: "f\($0 % families + 1)") }
            )
            children.append(try open(role: .child, claims: childClaims[childClaims.count - 1]))
        }
        for index in 0..<options.endpoints { childAddresses.append(Array("child/p\(index)".utf8)) }
        registered()

        let started = monotonicNanoseconds()
        let stopAt = started + UInt64(options.timeoutSeconds * 1e9)
        var poller = ZMQPoller()
        poller.add(limits)
        for child in children { poller.add(child) }
        var out = Multipart()
        var asked = 0, pending = 0, refused = 0, reregistered = 0
        var errorSamples: [String] = []
        // Sockets (0: limits, 1...: children) waiting for the WELCOME of a HELLO sent again.
        var registering = [Bool](repeating: false, count: children.count + 1)
        func refusal(_ socket: ZMQSocket, number: Int, parsed: ParsedFrames) throws {
            // A refused SEND ends its ask; a refused heartbeat (no id) only says the session is gone.
            if parsed.id != nil { refused += 1 }
            let code = input.string(parsed.codeFrame)
            if errorSamples.count < 10 { errorSamples.append("\(code): \(input.string(parsed.reasonFrame))") }
            guard code == ErrorCode.notRegistered.rawValue, !registering[number] else { return }
            registering[number] = true
            if number == 0 {
                try hello(role: .limits, claims: limitsClaims, on: socket)
            } else {
                try hello(role: .child, claims: childClaims[number - 1], on: socket)
            }
        }
        var sendIDs = Set<MessageID>()
        var limitsAcks: [MessageID] = []
        var childAcks = [[MessageID]](repeating: [], count: children.count)
        var lastReport = started
        let limitsAddress = "limits/raw-1"
        // Until `questions` are pending; a refused ask is replaced, unless every ask is refused.
        while pending < options.questions && refused < options.questions && !stop.isRequested {
            let now = monotonicNanoseconds()
            if now >= stopAt { break }
            // Keep `window` asks in flight.
            while pending + (asked - pending - refused) < options.questions
                && asked - pending - refused < options.window
            {
                let childIndex = asked % options.endpoints
                let question = AnyPermissionQuestion(PermissionQuestion<CommunicationTopic>(handle: FlowLoad.handle))
                out.removeAll()
                WireEncoder.message(
                    .send,
                    id: .random(),
                    from: String(decoding: childAddresses[childIndex], as: UTF8.self),
                    to: "limits",
                    kind: AskRequest.messageKind.rawValue,
                    subject: MessageID(uuid: question.id),
                    body: try WireJSON.encode(AskRequest(question: question)),
                    into: &out
                )
                try children[childIndex / PendingLoadOptions.claimsPerSocket].send(out)
                asked += 1
            }
            // Heartbeats on time even while nothing arrives (a stalled broker sends nothing): a late heartbeat
            // makes the broker end the session.
            let beforePoll = monotonicNanoseconds()
            if beforePoll &- lastReport >= 1_000_000_000 {
                lastReport = beforePoll
                for socket in [limits] + children {
                    out.removeAll()
                    WireEncoder.heartbeat(into: &out)
                    try socket.send(out)
                }
                progress?(
                    RelayLoadProgress(
                        elapsedSeconds: Double(beforePoll - started) / 1e9,
                        completed: pending,
                        sent: asked,
                        errors: refused,
                        phase: errorSamples.first.map { "filling (first refusal: \($0))" } ?? "filling"
                    )
                )
            }
            guard try poller.poll(timeoutMilliseconds: 100) > 0 else { continue }
            if poller.isReady(0) {
                var batch = 0
                while batch < 1000, try limits.receive(into: &input, .dontWait) {
                    batch += 1
                    guard let parsed = try? WireParser.parse(input) else { continue }
                    if parsed.command == .nack {
                        try refusal(limits, number: 0, parsed: parsed)
                        continue
                    }
                    if parsed.command == .welcome, registering[0] {
                        registering[0] = false
                        reregistered += 1
                    }
                    guard parsed.command == .deliver, let id = parsed.id else { continue }
                    limitsAcks.append(id)
                    guard input.kind(parsed) == AskRequest.messageKind.rawValue, let subject = parsed.subject else {
                        continue
                    }
                    let body = try WireJSON.encode(AskResult(questionID: subject.uuid, outcome: .presented))
                    out.removeAll()
                    WireEncoder.message(
                        .send,
                        id: .random(),
                        from: limitsAddress,
                        to: input.from(parsed),
                        kind: AskResult.messageKind.rawValue,
                        subject: subject,
                        body: body,
                        into: &out
                    )
                    try limits.send(out)
                }
                if !limitsAcks.isEmpty { try sendAcks(&limitsAcks, socket: limits, out: &out) }
            }
            for (number, child) in children.enumerated() where poller.isReady(number + 1) {
                var batch = 0
                while batch < 1000, try child.receive(into: &input, .dontWait) {
                    batch += 1
                    guard let parsed = try? WireParser.parse(input) else { continue }
                    switch parsed.command {
                    case .deliver:
                        guard let id = parsed.id else { continue }
                        childAcks[number].append(id)
                        guard input.kind(parsed) == AskResult.messageKind.rawValue, let subject = parsed.subject else {
                            continue
                        }
                        let sendID = MessageID.random()
                        sendIDs.insert(sendID)
                        out.removeAll()
                        WireEncoder.message(
                            .send,
                            id: sendID,
                            from: input.to(parsed),
                            to: "broker",
                            kind: SendQuestion.messageKind.rawValue,
                            subject: subject,
                            body: try WireJSON.encode(SendQuestion(questionID: subject.uuid)),
                            into: &out
                        )
                        try child.send(out)
                    case .ack:
                        input.forEachAckID(parsed) { id in if sendIDs.remove(id) != nil { pending += 1 } }
                    case .nack:
                        if let id = parsed.id { sendIDs.remove(id) }
                        try refusal(child, number: number + 1, parsed: parsed)
                    case .welcome where registering[number + 1]:
                        registering[number + 1] = false
                        reregistered += 1
                    default:
                        continue
                    }
                }
                if !childAcks[number].isEmpty { try sendAcks(&childAcks[number], socket: child, out: &out) }
            }
        }
        let seconds = Double(monotonicNanoseconds() - started) / 1e9
        for socket in [limits] + children { sayBye(socket) }
        return PendingLoadResult(
            pending: pending,
            asked: asked,
            refused: refused,
            seconds: seconds,
            errorSamples: errorSamples,
            reregistered: reregistered
        )
    }

    /// Resident set size of process `pid` in KiB (VmRSS of /proc/<pid>/status), or nil.
    public static func residentKiB(pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        return nil
    }
}

/// `load.json` of `askrelay load --mode pending`.
public struct PendingLoadReport: Sendable, Codable {
    public var mode = "pending"
    public var commandLine: String
    public var cores: Int
    public var startedAt: String
    public var durability: String
    public var options: PendingLoadOptions
    public var fill: PendingLoadResult?
    /// Broker VmRSS right after it printed ready, after every child and guardian registered, after the fill,
    /// and after the restart (kill -9, same data folder) printed ready.
    public var brokerRssStartKiB: Int?
    public var brokerRssRegisteredKiB: Int?
    public var brokerRssFilledKiB: Int?
    public var brokerRssRecoveredKiB: Int?
    /// Launch of the restarted broker → its ready line.
    public var recoverySeconds: Double?
    /// The signal that stopped the run (`SIGINT`, `SIGTERM`) before the fill was complete; the restart was then
    /// not measured.
    public var interrupted: String?

    public init(commandLine: String, durability: String, options: PendingLoadOptions) {
        self.commandLine = commandLine
        cores = ProcessInfo.processInfo.activeProcessorCount
        startedAt = ISO8601DateFormatter().string(from: Date())
        self.durability = durability
        self.options = options
    }

    enum CodingKeys: String, CodingKey {
        case mode, commandLine = "command_line", cores, startedAt = "started_at", durability, options, fill
        case brokerRssStartKiB = "broker_rss_start_kib", brokerRssRegisteredKiB = "broker_rss_registered_kib"
        case brokerRssFilledKiB = "broker_rss_filled_kib", brokerRssRecoveredKiB = "broker_rss_recovered_kib"
        case recoverySeconds = "recovery_s", bytesPerPending = "bytes_per_pending", bytesPerChild = "bytes_per_child"
        case interrupted
    }

    /// (RSS filled − RSS registered) ÷ pending questions, in bytes.
    public var bytesPerPending: Double? {
        guard let filled = brokerRssFilledKiB, let registered = brokerRssRegisteredKiB, let pending = fill?.pending,
            pending > 0
        else { return nil }
        return Double(filled - registered) * 1024 / Double(pending)
    }

    /// (RSS registered − RSS start) ÷ children, in bytes.
    public var bytesPerChild: Double? {
        guard let registered = brokerRssRegisteredKiB, let start = brokerRssStartKiB, options.endpoints > 0 else {
            return nil
        }
        return Double(registered - start) * 1024 / Double(options.endpoints)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(mode, forKey: .mode)
        try c.encode(commandLine, forKey: .commandLine)
        try c.encode(cores, forKey: .cores)
        try c.encode(startedAt, forKey: .startedAt)
        try c.encode(durability, forKey: .durability)
        try c.encode(options, forKey: .options)
        try c.encodeIfPresent(fill, forKey: .fill)
        try c.encodeIfPresent(brokerRssStartKiB, forKey: .brokerRssStartKiB)
        try c.encodeIfPresent(brokerRssRegisteredKiB, forKey: .brokerRssRegisteredKiB)
        try c.encodeIfPresent(brokerRssFilledKiB, forKey: .brokerRssFilledKiB)
        try c.encodeIfPresent(brokerRssRecoveredKiB, forKey: .brokerRssRecoveredKiB)
        try c.encodeIfPresent(recoverySeconds, forKey: .recoverySeconds)
        try c.encodeIfPresent(bytesPerPending, forKey: .bytesPerPending)
        try c.encodeIfPresent(bytesPerChild, forKey: .bytesPerChild)
        try c.encodeIfPresent(interrupted, forKey: .interrupted)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        mode = try c.decode(String.self, forKey: .mode)
        commandLine = try c.decode(String.self, forKey: .commandLine)
        cores = try c.decode(Int.self, forKey: .cores)
        startedAt = try c.decode(String.self, forKey: .startedAt)
        durability = try c.decode(String.self, forKey: .durability)
        options = try c.decode(PendingLoadOptions.self, forKey: .options)
        fill = try c.decodeIfPresent(PendingLoadResult.self, forKey: .fill)
        brokerRssStartKiB = try c.decodeIfPresent(Int.self, forKey: .brokerRssStartKiB)
        brokerRssRegisteredKiB = try c.decodeIfPresent(Int.self, forKey: .brokerRssRegisteredKiB)
        brokerRssFilledKiB = try c.decodeIfPresent(Int.self, forKey: .brokerRssFilledKiB)
        brokerRssRecoveredKiB = try c.decodeIfPresent(Int.self, forKey: .brokerRssRecoveredKiB)
        recoverySeconds = try c.decodeIfPresent(Double.self, forKey: .recoverySeconds)
        interrupted = try c.decodeIfPresent(String.self, forKey: .interrupted)
    }

    /// The stdout table; the last line starts with `pending=`.
    public var table: [String] {
        func mib(_ kib: Int?) -> String { kib.map { String(format: "%.1f MiB", Double($0) / 1024) } ?? "?" }
        var lines = [
            "workload: pending, \(options.endpoints) children in \(options.families) families, \(options.questions) questions asked, window \(options.window), durability \(durability), \(cores) cores"
        ]
        if let fill {
            lines.append(
                String(
                    format:
                        "filled: %d pending, %d asked, %d refused, %d sessions registered again in %.1f s (%.0f questions/s)",
                    fill.pending,
                    fill.asked,
                    fill.refused,
                    fill.reregistered,
                    fill.seconds,
                    Double(fill.pending) / max(fill.seconds, 1e-9)
                )
            )
            for sample in fill.errorSamples.prefix(3) { lines.append("refused: \(sample)") }
        }
        lines.append(
            "broker RSS: start \(mib(brokerRssStartKiB)), registered \(mib(brokerRssRegisteredKiB)), filled \(mib(brokerRssFilledKiB)), after restart \(mib(brokerRssRecoveredKiB))"
        )
        if let interrupted {
            lines.append(
                "interrupted by \(interrupted) after \(String(format: "%.1f", fill?.seconds ?? 0)) s of filling: the restart was not measured"
            )
        }
        lines.append(
            String(
                format: "pending=%d bytes_per_pending=%.0f bytes_per_child=%.0f recovery_s=%.2f",
                fill?.pending ?? 0,
                bytesPerPending ?? 0,
                bytesPerChild ?? 0,
                recoverySeconds ?? 0
            )
        )
        return lines
    }

    /// Writes `load.json` into `directory` (created if needed).
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let encoder = ReportJSON.encoder()
        try encoder.encode(self).write(to: URL(fileURLWithPath: directory).appendingPathComponent("load.json"))
    }
}
