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
        let socket = try context.zmq.socket(.sub)
        try socket.set(.linger, 0)
        try socket.set(.subscribe, Array("stats".utf8))
        try socket.connect(statsEndpoint)
        let deadline = ContinuousClock.now + timeout
        var last: BrokerSnapshot?
        while ContinuousClock.now < deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = max(1, Int(left.seconds * 1000))
            guard try socket.wait(timeoutMilliseconds: milliseconds),
                let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
            else { continue }
            let snapshot = try BrokerSnapshot.decode(frames[1])
            if condition(snapshot) { return snapshot }
            last = snapshot
        }
        throw ClusterError(
            "no broker statistics snapshot matched within \(durationText(timeout)); last: "
                + (last.map { "sessions \($0.sessions), ledger \($0.ledger), queued \($0.queued)" } ?? "none")
        )
    }
}
