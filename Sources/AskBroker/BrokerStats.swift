import AskBasics
import AskProtocol
import Foundation
import ZeroMQ

/// Counters the broker keeps and publishes. Plain values, owned by the broker thread.
public struct BrokerStats: Sendable {
    public var routedByKind: [String: Int] = [:]
    public var refusalsByCode: [String: Int] = [:]
    public var delivered = 0
    public var redelivered = 0
    public var duplicates = 0
    public var staleAcks = 0
    public var busy = 0
    /// Messages that went to the journal only (owner away or in-memory queue full), and those read back.
    public var spilled = 0
    public var unspilled = 0
    /// Messages dropped undelivered because their deadline passed while they waited.
    public var expiredUndelivered = 0
    public var refusedByWorkers = 0
    public var storageFailures = 0
    public var sessionsOpened = 0
    public var sessionsClosed = 0
    public var commits = 0
    /// Journal commit latencies in microseconds, the most recent ones (a ring).
    var commitMicros: [Int] = []
    var commitHead = 0

    mutating func countRouted(_ kind: String) { routedByKind[kind, default: 0] += 1 }
    mutating func countRefusal(_ code: ErrorCode) { refusalsByCode[code.rawValue, default: 0] += 1 }

    mutating func recordCommit(_ took: Duration) {
        commits += 1
        let micros = took.microseconds
        if commitMicros.count < 1024 {
            commitMicros.append(micros)
        } else {
            commitMicros[commitHead] = micros
            commitHead = (commitHead + 1) % 1024
        }
    }

    /// p50 / p99 (``Percentile``, nearest rank) / max of the recent commit latencies, in microseconds.
    public var commitPercentiles: (p50: Int, p99: Int, max: Int) {
        let sorted = commitMicros.sorted()
        guard let max = sorted.last else { return (0, 0, 0) }
        return (Percentile.of(50, sorted: sorted) ?? 0, Percentile.of(99, sorted: sorted) ?? 0, max)
    }
}

/// What one loop turn did, for the `slow loop turn` warning.
struct TurnProfile {
    /// A turn at least this long is logged. Peers are declared dead after `heartbeat × liveness` (3 s by
    /// default) of silence, so turns far shorter than that are already worth a line.
    static let slowTurn: Duration = .milliseconds(250)

    /// Messages read from the socket.
    var read = 0
    /// The batch stopped at the batch size with input still waiting.
    var inputLeft = false
    /// Reading and applying the batch (ledger, queues, journal writes into the open transaction).
    var handling: Duration = .zero
    /// Journal commits (with any WAL checkpoint SQLite runs at commit), also counted in the phase they ended.
    var commit: Duration = .zero
    /// Commit, deliveries and ACKs after the batch.
    var finishing: Duration = .zero
    /// Expiry, heartbeats, liveness, redelivery, pruning of accepted ids, statistics, and their commit.
    var timers: Duration = .zero
    var expired = 0
    var expiry: Duration = .zero
    /// Accepted ids and closed questions deleted from memory and the journal, and how long the DELETEs took.
    var forgotten = 0
    var forgottenQuestions = 0
    var forget: Duration = .zero
    var redelivered = 0
    var sessionsEnded = 0
}

extension Broker {
    public func snapshot() -> BrokerSnapshot {
        var roles: [String: Int] = [:]
        for session in sessions.values { roles[session.role.rawValue, default: 0] += 1 }
        let deepest = mailboxes.values.map { ($0.address, $0.memoryCount + $0.spilled) }.filter { $0.1 > 0 }
            .sorted { $0.1 > $1.1 }.prefix(10)
        let commit = stats.commitPercentiles
        return BrokerSnapshot(
            broker: instanceID,
            time: Date(),
            sessions: roles,
            routedByKind: stats.routedByKind,
            refusalsByCode: stats.refusalsByCode,
            delivered: stats.delivered,
            redelivered: stats.redelivered,
            duplicates: stats.duplicates,
            busy: stats.busy,
            queued: totalQueued,
            spilled: totalSpilled,
            inflight: inflightIndex.count,
            deepestQueues: Dictionary(uniqueKeysWithValues: deepest.map { ($0.0, $0.1) }),
            ledger: ledger.countsByState(),
            forgottenQuestions: ledger.forgotten,
            commits: stats.commits,
            commitMicros: ["p50": commit.p50, "p99": commit.p99, "max": commit.max]
        )
    }
}

/// Publishes snapshots on a PUB socket.
final class StatsPublisher {
    let socket: ZMQSocket
    var last = ContinuousClock.now

    init(context: ZMQContext, endpoint: String) throws {
        socket = try context.socket(.pub)
        try socket.set(.linger, 0)
        try socket.set(.sendHighWaterMark, 16)
        try socket.bind(endpoint)
    }

    func isDue(now: ContinuousClock.Instant, interval: Duration) -> Bool {
        guard now - last >= interval else { return false }
        last = now
        return true
    }

    func publish(_ snapshot: BrokerSnapshot) {
        guard let body = try? snapshot.encoded() else { return }
        _ = try? socket.send("stats", more: true, .dontWait)
        _ = try? socket.send(body, .dontWait)
    }
}
