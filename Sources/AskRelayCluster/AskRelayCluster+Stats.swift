import AskBasics
import AskClient
import Foundation
import ZeroMQ

extension AskRelayCluster {
    /// The first statistics snapshot (``BrokerSnapshot``: counters since the broker started, gauges now; there
    /// with ``AskRelayCluster/Durability/off`` too, unlike ``AskRelayCluster/ledger(_:)``, but up to a second old and from zero
    /// again after a restart) the broker publishes from now on that satisfies `condition` (by default the
    /// next one). - Throws: ``ClusterError`` naming the last snapshot seen when none did within `timeout`.
    public func stats(
        timeout: Duration = .seconds(5),
        where condition: @escaping @Sendable (BrokerSnapshot) -> Bool = { _ in true }
    ) async throws -> BrokerSnapshot {
        try await run { try self.statsBlocking(timeout: timeout, where: condition) }
    }

    /// ``stats(timeout:where:)`` blocking the calling thread.
    public func statsBlocking(
        timeout: Duration = .seconds(5),
        where condition: (BrokerSnapshot) -> Bool = { _ in true }
    ) throws -> BrokerSnapshot {
        try StatsSubscription(context: context.zmq, endpoint: statsEndpoint).first(timeout: timeout, where: condition)
    }
}

/// A subscription to a broker's statistics endpoint (a SUB socket on its `stats` topic): the snapshots it publishes
/// from now on, awaited with a deadline. The one wait for a snapshot, of the cluster and of the tests' stats reader;
/// one thread at a time.
package final class StatsSubscription: @unchecked Sendable {  // @unchecked: one blocking call at a time.
    private let socket: ZMQSocket

    package init(context: ZMQContext, endpoint: String) throws {
        socket = try context.socket(.sub)
        try socket.set(.linger, 0)
        try socket.set(.subscribe, Array("stats".utf8))
        try socket.connect(endpoint)
    }

    /// The first snapshot published from now on that satisfies `condition`.
    /// - Throws: ``ClusterError`` naming the last snapshot seen when none did within `timeout`.
    package func first(timeout: Duration, where condition: (BrokerSnapshot) -> Bool) throws -> BrokerSnapshot {
        let deadline = ContinuousClock.now + timeout
        var last: BrokerSnapshot?
        while ContinuousClock.now < deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = max(1, left.milliseconds)
            guard try socket.wait(timeoutMilliseconds: milliseconds),
                let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
            else { continue }
            let snapshot = try BrokerSnapshot.decode(frames[1])
            if condition(snapshot) { return snapshot }
            last = snapshot
        }
        let seen = last.map {
            "sessions \($0.sessions), ledger \($0.ledger), queued \($0.queued), spilled \($0.spilled), "
                + "inflight \($0.inflight)"
        }
        throw ClusterError(
            "no broker statistics snapshot matched within \(durationText(timeout)); last: \(seen ?? "none")"
        )
    }
}
