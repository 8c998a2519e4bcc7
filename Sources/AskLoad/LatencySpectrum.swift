import Foundation

/// One point of a percentile spectrum: the latency at `percentile` (0–100).
public struct SpectrumPoint: Sendable, Codable, Equatable {
    public var percentile: Double
    public var latencyUs: Double

    public init(percentile: Double, latencyUs: Double) {
        self.percentile = percentile
        self.latencyUs = latencyUs
    }

    enum CodingKeys: String, CodingKey {
        case percentile, latencyUs = "latency_us"
    }
}

/// A histogram's latency against percentile, for load.html's HdrHistogram-style chart: ten points per decade of
/// 1/(1−p) (0%, 20.6%, 36.9%, 49.9%, … 90%, … 99%, …) up to the percentile whose rank is the last recorded value
/// (at most 99.9999%), then 100% (the maximum).
public enum LatencySpectrum {
    static let pointsPerDecade = 10
    /// 1/(1−p) of the highest percentile below 100 that is kept (99.9999%).
    static let deepest = 1e6

    /// The percentiles kept for a histogram of `count` values (none when empty).
    static func percentiles(count: UInt64) -> [Double] {
        guard count > 0 else { return [] }
        let limit = min(Double(count), deepest)
        var percentiles: [Double] = []
        var step = 0
        while true {
            let inverse = pow(10, Double(step) / Double(pointsPerDecade))
            if inverse > limit * (1 + 1e-9) { break }
            percentiles.append(100 * (1 - 1 / inverse))
            step += 1
        }
        return percentiles + [100]
    }

    /// The spectrum of `histogram` (empty when nothing was recorded).
    public static func points(_ histogram: LatencyHistogram) -> [SpectrumPoint] {
        percentiles(count: histogram.count).map {
            SpectrumPoint(percentile: $0, latencyUs: Double(histogram.value(atPercentile: $0)) / 1000)
        }
    }

    /// The points a summary alone gives (min, p50, p90, p99, p99.9, max), for results without a spectrum.
    static func points(_ summary: LatencySummary) -> [SpectrumPoint] {
        guard summary.count > 0 || summary.maxUs > 0 else { return [] }
        return [
            (0, summary.minUs), (50, summary.p50Us), (90, summary.p90Us), (99, summary.p99Us), (99.9, summary.p999Us),
            (100, summary.maxUs),
        ].map { SpectrumPoint(percentile: $0.0, latencyUs: $0.1) }
    }
}
