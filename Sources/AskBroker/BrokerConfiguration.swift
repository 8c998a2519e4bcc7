import AskBasics
import AskKeys
import AskMetrics
import AskProtocol
import Foundation

/// Everything the broker can be told. Defaults are the documented ones (docs/broker.md); `main` fills this from
/// flags and environment variables, libraries and tests build it directly.
public struct BrokerConfiguration: Sendable {
    /// Endpoints the ROUTER binds (tcp, ipc, inproc).
    public var endpoints: [String] = ["tcp://127.0.0.1:5555"]
    /// Folder of the SQLite journal.
    public var dataDirectory = "./askrelay-data"
    public var durability: Durability = .batch
    /// How often each side must send something; a peer silent for `heartbeatInterval × liveness` is dead.
    public var heartbeatInterval: Duration = .seconds(1)
    public var liveness = 3
    /// Deliveries in flight (sent, not yet acked) per address.
    public var window = 64
    /// An unacked delivery to a live session is sent again after this long.
    public var ackTimeout: Duration = .seconds(10)
    /// How long the broker may hold an acknowledgement for a peer that reads carried ACK ids, waiting for a DELIVER
    /// to that peer to carry it; zero sends every turn's ACKs at the end of the turn.
    public var ackDelay: Duration = .milliseconds(1)
    /// After a loop turn that read input, keep polling without sleeping for up to this long before blocking: the
    /// next message of a busy peer is often microseconds away, and waking a sleeping thread takes longer. Costs CPU
    /// only after turns that had work (never when idle); zero turns it off.
    public var spin: Duration = .microseconds(50)
    /// How long the journal copies of acknowledged messages may stay in the journal waiting for a commit that a
    /// later turn makes anyway (the deletes ride on it), before they get a commit of their own: a turn that only
    /// read ACKs then writes nothing. After a crash a copy still in the journal is delivered again, and the
    /// receiver's deduplication drops it. Zero deletes in the turn of the ACK.
    public var ackedDeleteDelay: Duration = .milliseconds(20)
    /// Divides every product duration (pending window, default expiry), so 48 hours can pass in seconds.
    public var timeScale: Double = 1
    /// How long a question may stay pending (presented but unsent, or sent but unanswered) before it expires,
    /// unless its `expirationDate` comes first. Scaled by `timeScale`.
    public var pendingWindow: Duration = .seconds(48 * 3600)
    /// How long a closed question is remembered (in memory and in the journal) after it closed: a later answer,
    /// send or cancel is refused with what happened to it (answered, expired, cancelled) and an ask that repeats its
    /// id with `duplicate-question`. Then it is forgotten, so a long-running broker does not grow with every
    /// question it ever saw; a later answer gets `unknown-question`. Not scaled by `timeScale` (it bounds memory).
    public var closedRetention: Duration = .seconds(600)
    /// Messages one address holds in memory (waiting and in flight). With a journal, more stay in the journal only
    /// ("spilled"); without one, and for the `limits` service, senders are told "busy".
    public var maxQueuedPerAddress = 10_000
    /// Undelivered messages over all addresses, in memory and in the journal, before senders are told "busy".
    public var maxQueuedTotal = 2_000_000
    /// PUB endpoint for a JSON statistics snapshot every `statsInterval`; none when `nil`.
    public var statsEndpoint: String?
    public var statsInterval: Duration = .seconds(1)
    /// Where to serve Prometheus metrics over HTTP (`GET /metrics`); none when `nil`.
    public var metricsEndpoint: MetricsEndpoint?
    /// Frame size limits.
    public var limits = Wire.Limits()
    /// Most messages read from the socket per loop turn (one journal commit covers them all).
    public var batchSize = 512
    /// Serve non-loopback endpoints without CURVE.
    public var allowInsecure = false
    /// CURVE: the broker's key file (``KeyFile`` JSON). With `principalsFile`, turns CURVE and ZAP on.
    public var curveSecretFile: String?
    /// CURVE: `principals.json`, the keys the broker accepts and what each may claim. Reloaded when it changes.
    public var principalsFile: String?

    /// Sharding (docs/scaling.md): this broker's name in `brokers`. With both set, the broker serves only the
    /// families whose shard it is and refuses the others' HELLO claims with `wrong-shard`; with neither, it serves
    /// every family.
    public var shardName: String?
    /// Sharding: the deployment's broker list, the same every worker is given.
    public var brokers: BrokerList?
    /// Rebalancing (docs/scaling.md): the REP endpoint `askrelay rebalance` sends a new broker list and family moves
    /// to; `nil`: none. It has no CURVE: bind it to loopback, or on a private network with `--allow-insecure`.
    public var adminEndpoint: String?

    /// Where to append a JSON line each time the broker reaches an interesting situation (``ReachedSituation``;
    /// docs/simulation.md, "Reached situations"); `nil`: nowhere. `askrelay simulate` sets it.
    public var reachedLog: String?

    /// Where to append a trace line for every message the broker reads, routes, journals, delivers, sees
    /// acknowledged or refuses, and for every question that expires or closes (``TraceLog``; docs/tracing.md,
    /// "Recording"); `nil`: nothing is recorded. `askrelay simulate` sets it.
    public var traceLog: String?

    /// An OpenTelemetry collector's `http://HOST:PORT` to send the same events to as spans while the broker runs
    /// (``OTLPLiveExport``; docs/tracing.md, "OpenTelemetry"); `nil`: no export.
    public var otlpEndpoint: String?
    /// The exported spans' `service.name`.
    public var otlpService = "broker"

    /// Whether CURVE authentication is on.
    public var isSecure: Bool { curveSecretFile != nil && principalsFile != nil }
    /// Test-only: crash with SIGKILL at an exact point (`--crash-at`, fault tests only). Unarmed by default.
    public var crashAt = CrashPoints()
    /// The time the ledger's rules read: question expiry, the pending window, the closed-question retention. The
    /// real clock by default; a test gives a ``DrivenClock`` (in a process: `--driven-clock`, advanced with
    /// `clock.advance` from an observer). Heartbeats, liveness, redelivery, accepted ids and message creation times
    /// keep real time: the peers in other processes do.
    public var clock: any AskClock = SystemClock()

    public init() {}

    /// `pendingWindow` after time scaling.
    public var scaledPendingWindow: Duration {
        .milliseconds(Int64(max(1, pendingWindow.seconds * 1000 / timeScale)))
    }

    /// Problems that make the configuration unusable, in words for an operator.
    public func problems() -> [String] {
        var problems: [String] = []
        if endpoints.isEmpty { problems.append("at least one --endpoint is needed") }
        if window < 1 { problems.append("--window must be at least 1") }
        if liveness < 1 { problems.append("--liveness must be at least 1") }
        if heartbeatInterval < .milliseconds(10) { problems.append("--heartbeat must be at least 10ms") }
        if timeScale <= 0 || !timeScale.isFinite { problems.append("--time-scale must be a positive number") }
        if ackDelay > .milliseconds(100) || ackDelay * 10 > ackTimeout {
            problems.append("--ack-delay must be at most 100ms and a tenth of --ack-timeout")
        }
        if spin > .milliseconds(10) { problems.append("--spin must be at most 10ms") }
        if closedRetention < .milliseconds(1) { problems.append("--closed-retention must be at least 1ms") }
        if maxQueuedPerAddress < 1 || maxQueuedTotal < 1 { problems.append("queue limits must be at least 1") }
        if (curveSecretFile == nil) != (principalsFile == nil) {
            problems.append("CURVE needs both --curve-secret-file and --principals")
        }
        switch (shardName, brokers) {
        case (nil, nil): break
        case (let name?, let brokers?):
            if brokers.entry(named: name) == nil {
                problems.append(
                    "--shard-name \(name) is not in --brokers (\(brokers.entries.map(\.name).joined(separator: ", ")))"
                )
            }
        case (nil, _?): problems.append("--brokers needs --shard-name: which broker of the list is this one")
        case (_?, nil): problems.append("--shard-name needs --brokers: the list the name belongs to")
        }
        let schemes = ["tcp://", "ipc://", "inproc://"]
        if let adminEndpoint {
            if !schemes.contains(where: { adminEndpoint.hasPrefix($0) }) {
                problems.append(
                    "--admin-endpoint '\(adminEndpoint)' is not an endpoint: give tcp://HOST:PORT or ipc://PATH"
                )
            } else if !allowInsecure && !Self.isLocal(adminEndpoint) {
                problems.append(
                    "--admin-endpoint \(adminEndpoint) is not loopback; the admin endpoint has no CURVE, so it serves loopback and ipc only (--allow-insecure overrides, for a private network)"
                )
            }
            if shardName == nil {
                problems.append("--admin-endpoint needs --shard-name and --brokers: moves are between named brokers")
            }
        }
        let unusable = endpoints.filter { endpoint in !schemes.contains { endpoint.hasPrefix($0) } }
        for endpoint in unusable {
            problems.append("'\(endpoint)' is not an endpoint: give tcp://HOST:PORT or ipc://PATH")
        }
        if !allowInsecure && !isSecure {
            for endpoint in endpoints where !Self.isLocal(endpoint) && !unusable.contains(endpoint) {
                problems.append(
                    "endpoint \(endpoint) is not loopback; without CURVE keys the broker serves loopback and ipc only (--allow-insecure overrides)"
                )
            }
        }
        return problems
    }

    /// Loopback tcp, ipc and inproc endpoints.
    public static func isLocal(_ endpoint: String) -> Bool {
        if endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://") { return true }
        for prefix in ["tcp://127.", "tcp://localhost:", "tcp://[::1]:", "tcp://lo:"] where endpoint.hasPrefix(prefix) {
            return true
        }
        return false
    }
}
