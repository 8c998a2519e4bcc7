/// AskRelay's one definition of a percentile, used by every figure it reports (load latencies, simulation stages,
/// the broker's commit latencies, benchmark rounds): **nearest rank**. The p-th percentile (0...100) of n values is
/// the value of rank ⌈p/100 × n⌉ in ascending order, at least rank 1; the 100th percentile is the largest value and
/// the 50th of an even count is the lower of the two middle values. Every reported percentile is a recorded value
/// (a histogram reports the midpoint of the bucket holding that rank).
public enum Percentile {
    /// The 1-based rank of the `percentile`-th percentile among `count` values (0 when `count` is 0); `percentile`
    /// is clamped to 0...100.
    @inlinable public static func rank<Count: BinaryInteger>(_ percentile: Double, among count: Count) -> Count {
        guard count > 0 else { return 0 }
        let p = min(max(percentile, 0), 100)
        let rank = Count((p / 100 * Double(count)).rounded(.up))
        return min(max(rank, 1), count)
    }

    /// The `percentile`-th percentile of values already sorted ascending; nil when there are none.
    @inlinable public static func of<Value>(_ percentile: Double, sorted: [Value]) -> Value? {
        guard !sorted.isEmpty else { return nil }
        return sorted[rank(percentile, among: sorted.count) - 1]
    }
}
