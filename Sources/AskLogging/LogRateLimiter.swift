/// Lets through at most `burst` lines per key in each `interval`, and counts the rest, so that a peer repeating bad
/// input cannot fill the log; the next line let through for that key carries how many were held back.
///
/// Not thread-safe: it belongs to the thread that logs (the broker's loop). It remembers at most `maxKeys` keys;
/// past that the quietest are forgotten (their counts of held-back lines with them).
public struct LogRateLimiter<Key: Hashable> {
    struct Entry {
        var windowStart: ContinuousClock.Instant
        var passed: Int
        var suppressed: Int
    }

    public let burst: Int
    public let interval: Duration
    public let maxKeys: Int
    private var entries: [Key: Entry] = [:]

    /// - Parameters:
    ///   - burst: lines per key let through in each interval (at least 1).
    ///   - interval: the length of a window.
    ///   - maxKeys: keys remembered at most.
    public init(burst: Int = 10, interval: Duration = .seconds(10), maxKeys: Int = 10_000) {
        self.burst = max(1, burst)
        self.interval = interval
        self.maxKeys = max(1, maxKeys)
    }

    /// Whether to log a line for `key` now.
    /// - Returns: `nil` to hold it back (it is counted), else the number of lines held back for `key` since the last
    ///   line let through (0 when none), to be logged with it.
    public mutating func admit(_ key: Key, now: ContinuousClock.Instant = .now) -> Int? {
        guard var entry = entries[key] else {
            if entries.count >= maxKeys { forgetStale(now: now) }
            entries[key] = Entry(windowStart: now, passed: 1, suppressed: 0)
            return 0
        }
        if now - entry.windowStart >= interval {
            entry.windowStart = now
            entry.passed = 0
        }
        guard entry.passed < burst else {
            entry.suppressed += 1
            entries[key] = entry
            return nil
        }
        entry.passed += 1
        let suppressed = entry.suppressed
        entry.suppressed = 0
        entries[key] = entry
        return suppressed
    }

    /// Lines held back for `key` and not yet reported.
    public func suppressed(_ key: Key) -> Int { entries[key]?.suppressed ?? 0 }

    public var keyCount: Int { entries.count }

    /// Forgets keys whose window ended; if that frees nothing, forgets half of them.
    private mutating func forgetStale(now: ContinuousClock.Instant) {
        let interval = self.interval
        entries = entries.filter { now - $0.value.windowStart < interval }
        if entries.count >= maxKeys {
            entries = Dictionary(uniqueKeysWithValues: entries.prefix(maxKeys / 2).map { ($0.key, $0.value) })
        }
    }
}
