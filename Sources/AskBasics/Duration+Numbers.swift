/// The one place a `Duration` becomes a plain number (a C API's timeout, a metric in seconds, a histogram's
/// nanoseconds, a `TimeInterval`) and a plain number of seconds becomes a `Duration`.
///
/// The whole units (``milliseconds``, ``microseconds``, ``nanoseconds``) are rounded toward zero, as
/// `Duration.components` is: `1.9ms` is 1 millisecond, `-1.9ms` is -1. ``millisecondsRoundedUp`` rounds a positive
/// remainder up instead (a poll timeout that must not wake before its due time).
extension Duration {
    /// The duration in seconds, as a `Double` (a `TimeInterval`).
    package var seconds: Double { self / .seconds(1) }

    /// Whole milliseconds, rounded toward zero (`zmq_poll` timeouts, millisecond fields on the wire).
    package var milliseconds: Int {
        Int(components.seconds) * 1000 + Int(components.attoseconds / 1_000_000_000_000_000)
    }

    /// Whole milliseconds, a positive remainder rounded up (`1.2ms` is 2): a wait that ends no earlier than asked.
    package var millisecondsRoundedUp: Int {
        milliseconds + (components.attoseconds % 1_000_000_000_000_000 > 0 ? 1 : 0)
    }

    /// Whether the duration is a whole number of milliseconds (``milliseconds`` is then exact).
    package var isWholeMilliseconds: Bool { components.attoseconds % 1_000_000_000_000_000 == 0 }

    /// Whole microseconds, rounded toward zero.
    package var microseconds: Int {
        Int(components.seconds) * 1_000_000 + Int(components.attoseconds / 1_000_000_000_000)
    }

    /// Whole nanoseconds, rounded toward zero.
    package var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }

    /// A number of seconds (a `TimeInterval`) as whole nanoseconds, rounded by `rule` (to the nearest by default).
    /// `seconds` must be finite and within `Int64` nanoseconds (about 292 years); read text is checked first with
    /// ``durationFromSeconds(_:)``.
    package init(seconds: Double, rounding rule: FloatingPointRoundingRule = .toNearestOrAwayFromZero) {
        self = .nanoseconds(Int64((seconds * 1e9).rounded(rule)))
    }
}
