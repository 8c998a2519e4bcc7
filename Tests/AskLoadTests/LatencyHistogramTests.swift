import AskModel
import Foundation
import Testing

@testable import AskLoad

func relativeError(_ measured: UInt64, _ exact: UInt64) -> Double {
    abs(Double(measured) - Double(exact)) / Double(Swift.max(exact, 1))
}

@Suite("LatencyHistogram", .timeLimit(.minutes(1)))
struct LatencyHistogramTests {
    @Test("uniform 1...1_000_000: percentiles within 0.1%")
    func uniform() {
        var histogram = LatencyHistogram()
        for value in UInt64(1)...1_000_000 { histogram.record(value) }
        #expect(histogram.count == 1_000_000)
        #expect(histogram.minimum == 1)
        #expect(histogram.max == 1_000_000)
        #expect(abs(histogram.mean - 500_000.5) < 0.01)
        for (percentile, exact) in [
            (50.0, UInt64(500_000)), (90, 900_000), (99, 990_000), (99.9, 999_000), (10, 100_000), (0.1, 1000),
            (0.01, 100),
        ] {
            let measured = histogram.value(atPercentile: percentile)
            #expect(relativeError(measured, exact) <= 0.001, "p\(percentile): \(measured) vs \(exact)")
        }
        #expect(histogram.value(atPercentile: 100) == 1_000_000)
        #expect(
            histogram.p50 <= histogram.p90 && histogram.p90 <= histogram.p99 && histogram.p99 <= histogram.p999
                && histogram.p999 <= histogram.max
        )
    }

    @Test("a constant: every percentile is the constant")
    func constant() {
        var histogram = LatencyHistogram()
        for _ in 0..<10_000 { histogram.record(171_234) }
        for percentile in [0.0, 1, 50, 90, 99, 99.9, 100] {
            #expect(histogram.value(atPercentile: percentile) == 171_234)
        }
        #expect(histogram.mean == 171_234)
        #expect(histogram.minimum == 171_234 && histogram.max == 171_234)
    }

    @Test("exponential (seeded): percentiles within 0.1% of the exact sample quantiles")
    func exponential() {
        var generator = SeededGenerator(seed: 42)
        var histogram = LatencyHistogram()
        var samples: [UInt64] = []
        for _ in 0..<200_000 {
            let u = Double.random(in: Double.ulpOfOne..<1, using: &generator)
            let value = UInt64(-log(u) * 150_000) + 1  // mean 150 µs in ns
            samples.append(value)
            histogram.record(value)
        }
        samples.sort()
        for percentile in [50.0, 90, 99, 99.9] {
            let rank = Int((percentile / 100 * Double(samples.count)).rounded(.up)) - 1
            let exact = samples[rank]
            let measured = histogram.value(atPercentile: percentile)
            #expect(relativeError(measured, exact) <= 0.001, "p\(percentile): \(measured) vs \(exact)")
        }
        #expect(histogram.max == samples.last!)
        #expect(abs(histogram.mean - Double(samples.reduce(0, +)) / Double(samples.count)) < 1)
    }

    @Test("merge equals recording everything in one")
    func merge() {
        var generator = SeededGenerator(seed: 7)
        var a = LatencyHistogram()
        var b = LatencyHistogram()
        var combined = LatencyHistogram()
        for index in 0..<50_000 {
            let value = UInt64.random(in: 1...5_000_000_000, using: &generator)
            if index % 3 == 0 { a.record(value) } else { b.record(value) }
            combined.record(value)
        }
        a.merge(b)
        #expect(a.count == combined.count)
        #expect(a.counts == combined.counts)
        #expect(a.minimum == combined.minimum && a.max == combined.max)
        for percentile in [50.0, 90, 99, 99.9, 100] {
            #expect(a.value(atPercentile: percentile) == combined.value(atPercentile: percentile))
        }
        #expect(abs(a.mean - combined.mean) < 1e-3 * combined.mean)
    }

    @Test("empty, huge and zero values")
    func edges() {
        var histogram = LatencyHistogram()
        #expect(histogram.p50 == 0 && histogram.count == 0 && histogram.mean == 0)
        histogram.record(0)
        histogram.record(UInt64.max)
        #expect(histogram.count == 2)
        #expect(histogram.minimum == 0)
        #expect(histogram.max == LatencyHistogram.highestTrackable)
        #expect(histogram.value(atPercentile: 50) == 0)
    }
}
