import AskBasics

/// A histogram with fixed bucket bounds, owned by one thread (or kept under its owner's lock).
///
/// ``observe(_:)`` finds the bucket by binary search over the bounds and bumps one count: no allocation while the
/// counts are not shared with a snapshot (the first update after a snapshot copies them once).
public struct Histogram: Sendable {
    /// Upper bounds of the finite buckets, strictly increasing; the `+Inf` bucket is implied.
    public let bounds: [Double]
    /// Observations per bucket, not cumulative: `counts[i]` for `bounds[i-1] < value <= bounds[i]`, the last one
    /// for values above every bound.
    public private(set) var counts: [UInt64]
    /// The sum of every observed value.
    public private(set) var sum: Double = 0
    /// The number of observations.
    public private(set) var count: UInt64 = 0

    /// - Parameter bounds: finite upper bounds, strictly increasing, at least one.
    public init(bounds: [Double]) {
        precondition(!bounds.isEmpty, "a histogram needs at least one bucket bound")
        precondition(bounds.allSatisfy(\.isFinite), "histogram bounds must be finite (+Inf is implied)")
        precondition(zip(bounds, bounds.dropFirst()).allSatisfy { $0 < $1 }, "histogram bounds must increase")
        self.bounds = bounds
        counts = Array(repeating: 0, count: bounds.count + 1)
    }

    /// Counts one value (NaN goes to the `+Inf` bucket, as it compares below no bound).
    public mutating func observe(_ value: Double) {
        var low = 0
        var high = bounds.count
        // The first bound >= value; `bounds.count` (the +Inf bucket) when none is.
        while low < high {
            let middle = (low + high) / 2
            if bounds[middle] >= value { high = middle } else { low = middle + 1 }
        }
        counts[low] &+= 1
        sum += value
        count &+= 1
    }

    /// Counts one duration, in seconds.
    public mutating func observe(_ duration: Duration) {
        observe(duration.seconds)
    }

    /// The cumulative counts Prometheus exposes: `cumulative[i]` observations `<= bounds[i]`, the last `count`.
    public var cumulativeCounts: [UInt64] {
        var running: UInt64 = 0
        return counts.map { count in
            running &+= count
            return running
        }
    }
}

/// Bucket bounds, in seconds, for the latencies AskRelay measures.
public enum LatencyBuckets {
    /// Work inside one process: a broker's routing (50 µs to 10 s), its journal commits.
    public static let local: [Double] = [
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]
    /// Round trips through the broker and the other workers, up to a guardian's think time and past it (1 ms to
    /// 10 min).
    public static let flow: [Double] = [
        0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
    ]
}
