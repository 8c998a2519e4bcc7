import AskCLI
import Foundation
import ZeroMQ

/// A broker statistics snapshot as its stats endpoint publishes it every second (docs/broker.md, "Statistics"):
/// counters since the broker started and gauges now. Unlike ``LedgerEntry`` it is there with
/// ``AskRelayCluster/Durability/off`` too, but it is up to a second old and restarts from zero with the broker.
public struct ClusterStats: Sendable, Decodable {
    /// The broker instance (changes at each restart).
    public var broker: String
    public var time: Date
    /// Live sessions by role (`child`, `guardian`, `limits`, `observer`).
    public var sessions: [String: Int]
    /// Messages routed by kind, and ledger transitions (`ledger.answered`, `ledger.expired`, ...).
    public var routedByKind: [String: Int]
    /// Refusals by error code (`already-closed`, `expired`, ...).
    public var refusalsByCode: [String: Int]
    public var delivered: Int
    public var redelivered: Int
    public var duplicates: Int
    /// Messages in memory (waiting or in flight), in the journal only, and in flight.
    public var queued: Int
    public var spilled: Int
    public var inflight: Int
    /// Questions followed, by ledger state.
    public var ledger: [String: Int]
}

extension AskRelayCluster {
    /// The first statistics snapshot the broker publishes from now on that satisfies `condition` (by default the
    /// next one). - Throws: ``ClusterError`` naming the last snapshot seen when none did within `timeout`.
    public func stats(
        timeout: Duration = .seconds(5),
        where condition: @escaping @Sendable (ClusterStats) -> Bool = { _ in true }
    ) async throws -> ClusterStats {
        try await run { try self.statsBlocking(timeout: timeout, where: condition) }
    }

    /// ``stats(timeout:where:)`` blocking the calling thread.
    public func statsBlocking(
        timeout: Duration = .seconds(5),
        where condition: (ClusterStats) -> Bool = { _ in true }
    ) throws -> ClusterStats {
        let socket = try context.socket(.sub)
        try socket.set(.linger, 0)
        try socket.set(.subscribe, Array("stats".utf8))
        try socket.connect(statsEndpoint)
        let deadline = ContinuousClock.now + timeout
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var last: ClusterStats?
        while ContinuousClock.now < deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = max(1, Int(seconds(left) * 1000))
            guard try socket.wait(timeoutMilliseconds: milliseconds),
                let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
            else { continue }
            let snapshot = try decoder.decode(ClusterStats.self, from: Data(frames[1]))
            if condition(snapshot) { return snapshot }
            last = snapshot
        }
        throw ClusterError(
            "no broker statistics snapshot matched within \(durationText(timeout)); last: "
                + (last.map { "sessions \($0.sessions), ledger \($0.ledger), queued \($0.queued)" } ?? "none")
        )
    }
}
