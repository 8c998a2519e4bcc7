import AskBroker
import AskProtocol
import Foundation
import ZeroMQ

/// Subscribes to a broker's stats endpoint and waits for a snapshot that satisfies a condition.
public final class StatsReader: @unchecked Sendable {  // @unchecked: one test drives it, one blocking call at a time.
    let socket: ZMQSocket

    public init(context: ZMQContext, endpoint: String) throws {
        socket = try context.socket(.sub)
        try socket.set(.linger, 0)
        try socket.set(.subscribe, Array("stats".utf8))
        try socket.connect(endpoint)
    }

    /// The first snapshot (published from now on) for which `matches` holds.
    /// - Throws: ``TestFailure`` naming the last snapshot seen when none matched within `timeout`.
    public func expect(timeout: Duration = .seconds(5), _ matches: (BrokerSnapshot) -> Bool) throws -> BrokerSnapshot {
        let deadline = ContinuousClock.now + timeout
        var last: BrokerSnapshot?
        while ContinuousClock.now < deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            guard try socket.wait(timeoutMilliseconds: max(1, left.milliseconds)),
                let frames = try socket.receiveMultipart(.dontWait), frames.count == 2
            else { continue }
            let snapshot = try BrokerSnapshot.decode(frames[1])
            if matches(snapshot) { return snapshot }
            last = snapshot
        }
        throw TestFailure(
            "no matching stats snapshot within \(timeout); last: \(last.map { "queued \($0.queued) spilled \($0.spilled) inflight \($0.inflight) sessions \($0.sessions)" } ?? "none")"
        )
    }
}
