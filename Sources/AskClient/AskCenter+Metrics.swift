// Read-only access to the connection's counters for a metrics endpoint.

import Synchronization
extension AskCenter {
    /// Reads the connection's counters on its thread and hands them to `body` there (soon, unless that thread is
    /// stalled). Cheap: one job on the connection's inbox.
    public func readConnectionCounters(_ body: @escaping @Sendable (WorkerCounters) -> Void) {
        runtime.submit { connection, _ in body(connection.counters) }
    }
}

extension WorkerRuntime {
    /// Reads the connection's counters on its thread and hands them to `body` there.
    public func readConnectionCounters(_ body: @escaping @Sendable (WorkerCounters) -> Void) {
        submit { connection, _ in body(connection.counters) }
    }
}

extension WorkerCounters {
    /// Two connections' counters added up (a process with one connection per shard shows their sum).
    public static func + (lhs: Self, rhs: Self) -> Self {
        var sum = lhs
        sum.sent += rhs.sent
        sum.accepted += rhs.accepted
        sum.refused += rhs.refused
        sum.retries += rhs.retries
        sum.delivered += rhs.delivered
        sum.duplicates += rhs.duplicates
        sum.malformed += rhs.malformed
        sum.registrations += rhs.registrations
        sum.reconnects += rhs.reconnects
        sum.held += rhs.held
        return sum
    }
}

/// A client with one connection whose counters can be read on its thread (``AskCenter``, ``WorkerRuntime``).
public protocol ConnectionCounterSource: Sendable {
    /// Reads the connection's counters on its thread and hands them to `body` there.
    func readConnectionCounters(_ body: @escaping @Sendable (WorkerCounters) -> Void)
}

extension AskCenter: ConnectionCounterSource {}
extension WorkerRuntime: ConnectionCounterSource {}

extension ShardedConnections where Member: ConnectionCounterSource {
    /// The opened connections' counters added up, handed to `body` once every one has answered (on the thread of
    /// the last to answer); zeros when none is open yet.
    public func readConnectionCounters(_ body: @escaping @Sendable (WorkerCounters) -> Void) {
        let members = opened.map(\.member)
        guard !members.isEmpty else { return body(WorkerCounters()) }
        let sum = CounterSum(expected: members.count)
        for member in members {
            member.readConnectionCounters { counters in
                if let total = sum.add(counters) { body(total) }
            }
        }
    }
}

/// The running sum of ``ShardedConnections/readConnectionCounters(_:)``.
private final class CounterSum: Sendable {
    private let state: Mutex<(sum: WorkerCounters, answered: Int)>
    private let expected: Int

    init(expected: Int) {
        self.expected = expected
        state = Mutex((WorkerCounters(), 0))
    }

    /// Adds one connection's counters; the total once the last expected one arrived, else `nil`.
    func add(_ counters: WorkerCounters) -> WorkerCounters? {
        state.withLock { state in
            state.sum = state.sum + counters
            state.answered += 1
            return state.answered == expected ? state.sum : nil
        }
    }
}
