/// Conversions of `Duration` for the C APIs and timers that take plain numbers.
extension Duration {
    /// The duration in seconds, as a `Double`.
    public var seconds: Double { self / .seconds(1) }

    /// Whole milliseconds, rounded down (`zmq_poll` timeouts, millisecond fields on the wire).
    public var milliseconds: Int {
        Int(components.seconds) * 1000 + Int(components.attoseconds / 1_000_000_000_000_000)
    }

    /// Whole microseconds, rounded down.
    public var microseconds: Int {
        Int(components.seconds) * 1_000_000 + Int(components.attoseconds / 1_000_000_000_000)
    }
}
