// Read-only access to the connection's counters for a metrics endpoint.
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
