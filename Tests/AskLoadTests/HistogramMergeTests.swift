import AskModel
import Foundation
import Testing

@testable import AskLoad

/// The histograms of several load hosts merge exactly: split a stream in two, record each half in its own histogram,
/// carry both through JSON as a load host's result does, merge them — the same histogram, and so the same
/// percentiles, as one histogram fed the whole stream.
@Suite("latency histograms merge exactly across load hosts", .timeLimit(.minutes(1)))
struct HistogramMergeTests {
    /// Latencies in ns from a few shapes: a tight core, a long tail, outliers past the trackable range.
    static func stream(seed: UInt64, count: Int) -> [UInt64] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { _ in
            switch random.next() % 100 {
            case 0..<70: 200_000 + random.next() % 300_000
            case 70..<97: 1_000 + random.next() % 50_000_000
            case 97..<99: random.next() % 5_000_000_000
            default: random.next() % (LatencyHistogram.highestTrackable * 2)
            }
        }
    }

    static let percentiles: [Double] = [0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 99.999, 100]

    func roundTrip(_ histogram: LatencyHistogram) throws -> LatencyHistogram {
        try JSONDecoder().decode(LatencyHistogram.self, from: try JSONEncoder().encode(histogram))
    }

    @Test("random streams split in two at random points: merged (after JSON) equals combined", arguments: 1...20)
    func mergedEqualsCombined(seed: UInt64) throws {
        let values = Self.stream(seed: seed, count: 500 + Int(seed) * 997)
        var random = SeededGenerator(seed: seed &* 31)
        var combined = LatencyHistogram()
        var first = LatencyHistogram()
        var second = LatencyHistogram()
        for value in values {
            combined.record(value)
            if random.next() % 3 == 0 { first.record(value) } else { second.record(value) }
        }
        var merged = try roundTrip(first)
        merged.merge(try roundTrip(second))
        #expect(merged == combined)
        for percentile in Self.percentiles {
            #expect(
                merged.value(atPercentile: percentile) == combined.value(atPercentile: percentile),
                "p\(percentile)"
            )
        }
        #expect(merged.summary == combined.summary)
    }

    @Test("serialising keeps every recorded value: decode(encode(h)) == h, empty included")
    func lossless() throws {
        var histogram = LatencyHistogram()
        #expect(try roundTrip(histogram) == histogram)
        for value in Self.stream(seed: 99, count: 10_000) { histogram.record(value) }
        let decoded = try roundTrip(histogram)
        #expect(decoded == histogram)
        #expect(decoded.count == 10_000)
    }

    func json(_ histogram: LatencyHistogram) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(histogram)) as? [String: Any])
    }

    func decode(_ object: [String: Any]) throws -> LatencyHistogram {
        try JSONDecoder().decode(LatencyHistogram.self, from: try JSONSerialization.data(withJSONObject: object))
    }

    @Test("a histogram of another bucket layout is refused with both layouts named")
    func layoutMismatch() throws {
        var histogram = LatencyHistogram()
        histogram.record(1_000)
        var object = try json(histogram)
        object["layout"] = ["sub_bucket_bits": 7, "highest_trackable_ns": 1_000_000]
        let error = try #require(throws: LatencyHistogram.DecodingProblem.self) { try decode(object) }
        #expect(error.description.contains("128 sub-buckets per power of two up to 1000000 ns"))
        #expect(error.description.contains("1024 sub-buckets per power of two"))
    }

    @Test("buckets that do not add up to the count, or a slot out of range, are refused")
    func inconsistent() throws {
        var histogram = LatencyHistogram()
        histogram.record(1_000)
        histogram.record(2_000)
        var object = try json(histogram)
        object["count"] = 3
        #expect(throws: LatencyHistogram.DecodingProblem.self) { try decode(object) }
        object = try json(histogram)
        object["buckets"] = [[UInt64(1) << 40, 2]]
        #expect(throws: LatencyHistogram.DecodingProblem.self) { try decode(object) }
    }

    func result(_ seed: UInt64, started: Int, completed: Int, errors: Int, measured: Int) -> FlowLoadResult {
        var histograms = FlowHistograms()
        for value in Self.stream(seed: seed, count: completed) { histograms.endToEnd.record(value) }
        for value in Self.stream(seed: seed + 100, count: completed) { histograms.askToPresented.record(value) }
        for value in Self.stream(seed: seed + 200, count: completed) { histograms.sendToResponse.record(value) }
        let empty = LatencyHistogram().summary
        let counts = FlowLoadResult(
            loop: "closed",
            started: started,
            completed: completed,
            errors: errors,
            inFlightAtEnd: started - completed - errors,
            measuredCompleted: measured,
            measuredSeconds: 2,
            throughput: Double(measured) / 2,
            askToPresented: empty,
            sendToResponse: empty,
            endToEnd: empty,
            errorSamples: errors > 0 ? ["boom \(seed)"] : []
        )
        return FlowLoadResult(counts: counts, histograms: histograms)
    }

    @Test("merged flows results: counts are the sums, percentiles those of the combined histograms")
    func mergedFlowResults() throws {
        let hosts = [
            result(1, started: 1200, completed: 1190, errors: 3, measured: 900),
            result(2, started: 800, completed: 800, errors: 0, measured: 640),
        ]
        let decoded = try hosts.map {
            try JSONDecoder().decode(FlowLoadResult.self, from: try JSONEncoder().encode($0))
        }
        let merged = try FlowLoadResult.merged(decoded)
        #expect(merged.started == 2000)
        #expect(merged.completed == 1990)
        #expect(merged.errors == 3)
        #expect(merged.inFlightAtEnd == 7)
        #expect(merged.measuredCompleted == 1540)
        #expect(merged.throughput == 770)
        #expect(merged.errorSamples == ["host 1: boom 1"])
        var combined = hosts[0].histograms!
        combined.merge(hosts[1].histograms!)
        #expect(merged.histograms == combined)
        #expect(merged.endToEnd == combined.endToEnd.summary)
        #expect(merged.askToPresented == combined.askToPresented.summary)
        #expect(merged.sendToResponse == combined.sendToResponse.summary)
        #expect(merged.endToEndSpectrum == LatencySpectrum.points(combined.endToEnd))
    }

    @Test("a result without histograms cannot be merged")
    func noHistograms() throws {
        var bare = result(3, started: 10, completed: 10, errors: 0, measured: 10)
        bare.histograms = nil
        #expect(throws: RelayLoadError.self) { try FlowLoadResult.merged([bare]) }
    }

    @Test("shares split the children, in-flight count and rate exactly, with no child on two hosts", arguments: 1...7)
    func shares(hosts: Int) throws {
        var options = FlowLoadOptions()
        options.endpoints = 101
        options.families = 10
        options.inflight = 53
        options.maxInflight = 1000
        let shares = (0..<hosts).map { options.share($0, of: hosts) }
        let children = shares.flatMap { $0.children.map(\.id) }
        #expect(children == options.children.map(\.id))
        #expect(shares.map(\.inflight).reduce(0, +) == 53)
        #expect(shares.map(\.maxInflight).reduce(0, +) == 1000)
        #expect(shares.allSatisfy { $0.problems().isEmpty && $0.families == 10 })
        options.rate = 700
        #expect(options.share(0, of: hosts).rate == 700 / Double(hosts))
    }
}

@Suite("merged throughput of several load hosts", .timeLimit(.minutes(1)))
struct MergedThroughputTests {
    func samples(_ run: String, rate: Double, at times: [Double]) -> [ThroughputSample] {
        times.map { ThroughputSample(run: run, elapsedS: $0, perSecond: rate, phase: "measuring") }
    }

    @Test("hosts at steady rates sampled at different times add up to the sum of their rates")
    func steadyRates() {
        let first = samples("flows host-1", rate: 100, at: [1.0, 2.0, 3.0, 3.2])
        let second = samples("flows host-2", rate: 250, at: [0.9, 2.1, 2.9, 3.4])
        let merged = ThroughputSample.merged([first, second], run: "flows")
        #expect(merged.map(\.elapsedS) == [1.0, 2.0, 3.0, 3.2])
        #expect(merged.allSatisfy { $0.run == "flows" })
        for sample in merged { #expect(abs(sample.perSecond - 350) < 1e-9, "\(sample)") }
    }

    @Test("a host that ended early adds nothing after its end; no host, no samples")
    func endedHost() {
        let first = samples("flows host-1", rate: 100, at: [1.0, 2.0, 3.0])
        let second = samples("flows host-2", rate: 50, at: [1.0])
        let merged = ThroughputSample.merged([first, second], run: "flows")
        #expect(merged.map(\.perSecond) == [150, 100, 100])
        #expect(ThroughputSample.merged([], run: "flows").isEmpty)
    }
}
