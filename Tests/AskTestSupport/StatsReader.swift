import AskProtocol
import AskRelayCluster
import Foundation
import ZeroMQ

/// Subscribes to a broker's stats endpoint and waits for a snapshot that satisfies a condition (the cluster's
/// ``StatsSubscription``, on a context of the test's own).
public final class StatsReader: Sendable {
    let subscription: StatsSubscription

    public init(context: ZMQContext, endpoint: String) throws {
        subscription = try StatsSubscription(context: context, endpoint: endpoint)
    }

    /// The first snapshot (published from now on) for which `matches` holds.
    /// - Throws: an error naming the last snapshot seen when none matched within `timeout`.
    public func expect(timeout: Duration = .seconds(5), _ matches: (BrokerSnapshot) -> Bool) throws -> BrokerSnapshot {
        try subscription.first(timeout: timeout, where: matches)
    }
}
