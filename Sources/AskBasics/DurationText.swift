/// Bounds of values that every executable, scenario and file shares, checked once where the text is read, so that
/// no later conversion (nanoseconds in `Int64`, a scaled window, an exponential think time) can overflow.
public enum ValueBounds {
    /// The longest duration any flag, environment variable, scenario or file may give: 100 days.
    public static let maximumDuration: Duration = .seconds(100 * 86_400)
    /// `--time-scale` / `timeScale`: product durations pass X times faster (below 1: slower).
    public static let timeScale: ClosedRange<Double> = 0.01...1e9
    /// The text of ``maximumDuration`` for messages and help.
    public static let maximumDurationText = "100d"
}

/// Parses `250ms`, `1.5s`, `5m`, `48h`, `2d` or a plain number of seconds; `nil` for anything else, a negative or
/// non-finite number, or more than ``ValueBounds/maximumDuration``.
public func parseDuration(_ text: String) -> Duration? {
    let units: [(String, Double)] = [("ms", 0.001), ("us", 0.000_001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
    for (suffix, scale) in units where text.hasSuffix(suffix) {
        guard let number = Double(text.dropLast(suffix.count)) else { return nil }
        return durationFromSeconds(number * scale)
    }
    guard let seconds = Double(text) else { return nil }
    return durationFromSeconds(seconds)
}

/// A number of seconds as a `Duration`, or `nil` when it is negative, not finite, or above
/// ``ValueBounds/maximumDuration``: the only conversion of a read number of seconds to a duration.
public func durationFromSeconds(_ seconds: Double) -> Duration? {
    guard seconds.isFinite, seconds >= 0, seconds <= ValueBounds.maximumDuration.seconds else { return nil }
    return Duration(seconds: seconds)
}

/// A duration as the parser reads it back, in the largest unit that keeps it whole: `100d`, `48h`, `2s`, `250ms`.
public func durationText(_ duration: Duration) -> String {
    let microseconds = (duration.seconds * 1_000_000).rounded()
    if microseconds == 0 { return "0s" }
    if microseconds.truncatingRemainder(dividingBy: 1000) != 0 { return "\(Int(microseconds))us" }
    let milliseconds = microseconds / 1000
    for (unit, size) in [("d", 86_400_000.0), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
    where milliseconds.truncatingRemainder(dividingBy: size) == 0 {
        return "\(Int(milliseconds / size))\(unit)"
    }
    return "\(Int(milliseconds))ms"
}
