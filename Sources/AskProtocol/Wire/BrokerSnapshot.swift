import AskModel
import Foundation

/// A point-in-time view of the broker, published as JSON on the stats endpoint (docs/broker.md, "Statistics"):
/// counters since the broker started and gauges now. The broker builds it; `askrelay top`, the simulation's
/// progress and the cluster harness read it.
public struct BrokerSnapshot: Sendable, Codable {
    public var broker: String
    public var time: Date
    public var sessions: [String: Int]
    public var routedByKind: [String: Int]
    public var refusalsByCode: [String: Int]
    public var delivered: Int
    public var redelivered: Int
    public var duplicates: Int
    public var busy: Int
    /// Messages held in memory (waiting or in flight).
    public var queued: Int
    /// Messages in the journal only, waiting for their owner or for room in memory.
    public var spilled: Int
    public var inflight: Int
    public var deepestQueues: [String: Int]
    /// Questions followed, by state (closed ones only within `--closed-retention`).
    public var ledger: [String: Int]
    /// Closed questions forgotten since the broker started, their retention past.
    public var forgottenQuestions: Int
    public var commits: Int
    public var commitMicros: [String: Int]

    public init(
        broker: String,
        time: Date,
        sessions: [String: Int],
        routedByKind: [String: Int],
        refusalsByCode: [String: Int],
        delivered: Int,
        redelivered: Int,
        duplicates: Int,
        busy: Int,
        queued: Int,
        spilled: Int,
        inflight: Int,
        deepestQueues: [String: Int],
        ledger: [String: Int],
        forgottenQuestions: Int,
        commits: Int,
        commitMicros: [String: Int]
    ) {
        self.broker = broker
        self.time = time
        self.sessions = sessions
        self.routedByKind = routedByKind
        self.refusalsByCode = refusalsByCode
        self.delivered = delivered
        self.redelivered = redelivered
        self.duplicates = duplicates
        self.busy = busy
        self.queued = queued
        self.spilled = spilled
        self.inflight = inflight
        self.deepestQueues = deepestQueues
        self.ledger = ledger
        self.forgottenQuestions = forgottenQuestions
        self.commits = commits
        self.commitMicros = commitMicros
    }
}

extension BrokerSnapshot {
    /// The snapshot's JSON as the stats endpoint publishes it (sorted keys, ISO 8601 time).
    public func encoded() throws -> [UInt8] {
        let encoder = ReportJSON.encoder(pretty: false, escapingSlashes: true, isoDates: true)
        return Array(try encoder.encode(self))
    }

    /// Reads a snapshot published on the stats endpoint (its second frame).
    public static func decode(_ bytes: [UInt8]) throws -> BrokerSnapshot {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(BrokerSnapshot.self, from: Data(bytes))
    }
}
