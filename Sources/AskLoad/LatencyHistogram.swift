import AskBasics
import AskModel

/// A latency histogram with log-linear buckets: every power-of-two range is split into 1024 equal sub-buckets, so
/// any recorded value is kept to 3 significant digits (relative error below 0.05% for the reported midpoints).
/// This is HdrHistogram's layout, written from its description; memory is fixed (about 270 KB) whatever is recorded.
///
/// Values are nanoseconds from 0 up to ``highestTrackable`` (about 73 minutes); larger values count as that.
public struct LatencyHistogram: Sendable, Equatable {
    /// Sub-buckets per power of two in the upper half of each bucket (2^10 → 3 significant decimal digits).
    static let subBucketHalfCountMagnitude = 10
    static let subBucketHalfCount = 1 << subBucketHalfCountMagnitude
    static let subBucketMask: UInt64 = UInt64(2 * subBucketHalfCount - 1)
    /// 64 − (sub-bucket magnitude + 1): turns a leading-zero count into a bucket index.
    static let leadingZeroCountBase = 64 - subBucketHalfCountMagnitude - 1
    /// The largest value kept exactly enough; larger ones are clamped to it.
    public static let highestTrackable: UInt64 = (1 << 42) - 1
    static let bucketCount = bucketIndex(highestTrackable) + 1
    static let countsLength = (bucketCount + 1) * subBucketHalfCount

    var counts: [UInt64]
    public private(set) var count: UInt64 = 0
    public private(set) var min: UInt64 = .max
    public private(set) var max: UInt64 = 0
    private var sum: Double = 0

    public init() {
        counts = [UInt64](repeating: 0, count: Self.countsLength)
    }

    @inline(__always)
    static func bucketIndex(_ value: UInt64) -> Int {
        leadingZeroCountBase - (value | subBucketMask).leadingZeroBitCount
    }

    @inline(__always)
    static func countsIndex(_ value: UInt64) -> Int {
        let bucket = bucketIndex(value)
        let subBucket = Int(truncatingIfNeeded: value >> UInt64(bucket))
        return bucket << subBucketHalfCountMagnitude + subBucket
    }

    /// The lowest value that lands in counts slot `index`, and the slot's width.
    static func range(ofIndex index: Int) -> (lowest: UInt64, width: UInt64) {
        var bucket = (index >> subBucketHalfCountMagnitude) - 1
        var subBucket = (index & (subBucketHalfCount - 1)) + subBucketHalfCount
        if bucket < 0 {
            subBucket -= subBucketHalfCount
            bucket = 0
        }
        return (UInt64(subBucket) << UInt64(bucket), 1 << UInt64(bucket))
    }

    /// Records one value in nanoseconds.
    @inline(__always)
    public mutating func record(_ nanoseconds: UInt64) {
        let value = Swift.min(nanoseconds, Self.highestTrackable)
        counts[Self.countsIndex(value)] &+= 1
        count &+= 1
        if value < min { min = value }
        if value > max { max = value }
        sum += Double(value)
    }

    /// Records a duration (negative durations count as 0).
    public mutating func record(_ duration: Duration) {
        record(UInt64(Swift.max(0, duration.nanoseconds)))
    }

    /// Adds every value recorded in `other`.
    public mutating func merge(_ other: LatencyHistogram) {
        guard other.count > 0 else { return }
        for index in other.counts.indices where other.counts[index] != 0 { counts[index] &+= other.counts[index] }
        count &+= other.count
        min = Swift.min(min, other.min)
        max = Swift.max(max, other.max)
        sum += other.sum
    }

    public mutating func reset() { self = LatencyHistogram() }

    /// The mean of the recorded values (0 when empty).
    public var mean: Double { count == 0 ? 0 : sum / Double(count) }

    /// The `percentile`-th percentile of the recorded values by nearest rank (``Percentile``; 0 when empty), as the
    /// midpoint of the bucket holding that rank, kept within the recorded min and max; the 100th is the exact max.
    public func value(atPercentile percentile: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        if percentile >= 100 { return max }
        let target = Percentile.rank(percentile, among: count)
        var seen: UInt64 = 0
        for index in counts.indices where counts[index] != 0 {
            seen += counts[index]
            if seen >= target {
                let (lowest, width) = Self.range(ofIndex: index)
                let middle = lowest + (width - 1) / 2
                return Swift.min(Swift.max(middle, min), max)
            }
        }
        return max
    }

    public var p50: UInt64 { value(atPercentile: 50) }
    public var p90: UInt64 { value(atPercentile: 90) }
    public var p99: UInt64 { value(atPercentile: 99) }
    public var p999: UInt64 { value(atPercentile: 99.9) }
    /// The smallest recorded value (0 when empty).
    public var minimum: UInt64 { count == 0 ? 0 : min }

    /// The usual figures in microseconds, for reports.
    public var summary: LatencySummary {
        LatencySummary(
            count: count,
            minUs: Double(minimum) / 1000,
            meanUs: mean / 1000,
            p50Us: Double(p50) / 1000,
            p90Us: Double(p90) / 1000,
            p99Us: Double(p99) / 1000,
            p999Us: Double(p999) / 1000,
            maxUs: Double(max) / 1000
        )
    }
}

/// A histogram's figures in microseconds (JSON: `count`, `min_us`, `mean_us`, `p50_us`, `p90_us`, `p99_us`,
/// `p99_9_us`, `max_us`).
public struct LatencySummary: Sendable, Codable, Equatable {
    public var count: UInt64
    public var minUs: Double
    public var meanUs: Double
    public var p50Us: Double
    public var p90Us: Double
    public var p99Us: Double
    public var p999Us: Double
    public var maxUs: Double

    enum CodingKeys: String, CodingKey {
        case count, minUs = "min_us", meanUs = "mean_us", p50Us = "p50_us", p90Us = "p90_us", p99Us = "p99_us"
        case p999Us = "p99_9_us", maxUs = "max_us"
    }
}

// MARK: - Lossless serialisation (to merge histograms recorded by other processes)

extension LatencyHistogram: Codable {
    /// The bucket layout a serialised histogram was recorded with; a histogram only merges with its own layout.
    public struct Layout: Sendable, Codable, Equatable, CustomStringConvertible {
        /// log2 of the sub-buckets in each half bucket (10: 1024 sub-buckets per power of two).
        public var subBucketBits: Int
        /// The largest value in nanoseconds the buckets hold.
        public var highestTrackableNs: UInt64

        public var description: String {
            "\(1 << subBucketBits) sub-buckets per power of two up to \(highestTrackableNs) ns"
        }

        enum CodingKeys: String, CodingKey {
            case subBucketBits = "sub_bucket_bits", highestTrackableNs = "highest_trackable_ns"
        }
    }

    /// This build's layout.
    public static let layout = Layout(
        subBucketBits: subBucketHalfCountMagnitude,
        highestTrackableNs: highestTrackable
    )

    /// A serialised histogram that cannot be read back exactly.
    public struct DecodingProblem: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    enum CodingKeys: String, CodingKey {
        case layout, count, minNs = "min_ns", maxNs = "max_ns", sumNs = "sum_ns", buckets
    }

    /// JSON: `layout` (`sub_bucket_bits`, `highest_trackable_ns`), `count`, `min_ns`, `max_ns`, `sum_ns` and
    /// `buckets`, the non-empty counts slots as `[slot, count]` pairs in slot order — every recorded value is kept,
    /// so a decoded histogram equals the encoded one and merges exactly.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Self.layout, forKey: .layout)
        try container.encode(count, forKey: .count)
        try container.encode(minimum, forKey: .minNs)
        try container.encode(max, forKey: .maxNs)
        try container.encode(sum, forKey: .sumNs)
        var buckets: [[UInt64]] = []
        for index in counts.indices where counts[index] != 0 { buckets.append([UInt64(index), counts[index]]) }
        try container.encode(buckets, forKey: .buckets)
    }

    /// - Throws: ``DecodingProblem`` when the layout is not this build's (the buckets would mean other ranges) or
    ///   the buckets do not add up to `count`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let layout = try container.decode(Layout.self, forKey: .layout)
        guard layout == Self.layout else {
            throw DecodingProblem(
                description:
                    "the histogram was recorded with \(layout), this askrelay uses \(Self.layout): run the same askrelay build on every load host"
            )
        }
        self.init()
        var total: UInt64 = 0
        for pair in try container.decode([[UInt64]].self, forKey: .buckets) {
            guard pair.count == 2, pair[0] < UInt64(Self.countsLength), pair[1] > 0 else {
                throw DecodingProblem(
                    description: "histogram bucket \(pair) is not [slot < \(Self.countsLength), count > 0]"
                )
            }
            counts[Int(pair[0])] &+= pair[1]
            total &+= pair[1]
        }
        let count = try container.decode(UInt64.self, forKey: .count)
        guard total == count else {
            throw DecodingProblem(description: "histogram buckets hold \(total) values but its count is \(count)")
        }
        self.count = count
        if count > 0 {
            min = try container.decode(UInt64.self, forKey: .minNs)
            max = try container.decode(UInt64.self, forKey: .maxNs)
            guard min <= max, max <= Self.highestTrackable else {
                throw DecodingProblem(description: "histogram min \(min) and max \(max) are out of order or range")
            }
        }
        sum = try container.decode(Double.self, forKey: .sumNs)
    }
}
