import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif
import Testing

@testable import AskLoad

@Suite("load.html charts and tables")
struct LoadHTMLChartTests {
    /// Whether `step` is 1, 2 or 5 times a power of ten.
    func isRoundStep(_ step: Double) -> Bool {
        let mantissa = step / pow(10, floor(log10(step)))
        return [1.0, 2, 5, 10].contains { abs(mantissa - $0) < 1e-6 }
    }

    @Test(
        "linear ticks are 1-2-5 steps apart, print as round numbers and cover the range",
        arguments: [
            (0.0, 143_217.0), (0, 7.3), (0, 0.7), (0, 1), (12, 13.4), (0, 343_000), (0, 26.5), (0, 0), (5, 5),
            (0, 0.000_37), (-3, 17),
        ]
    )
    func linearTicks(range: (Double, Double)) {
        let ticks = LoadHTML.linearTicks(low: range.0, high: range.1)
        #expect(ticks.count >= 2 && ticks.count <= 8, "\(ticks)")
        #expect(ticks.first! <= range.0 && ticks.last! >= range.1, "\(ticks) for \(range)")
        let step = ticks[1] - ticks[0]
        #expect(isRoundStep(step), "step \(step)")
        for (a, b) in zip(ticks, ticks.dropFirst()) { #expect(abs((b - a) - step) < step * 1e-9) }
        for tick in ticks {
            // A multiple of the step, written with few digits (no 0.30000000000000004).
            #expect(abs(tick / step - (tick / step).rounded()) < 1e-9)
            #expect(String(format: "%g", tick) == String(format: "%.6g", tick), "\(tick)")
            #expect("\(tick)".count <= 10, "\(tick)")
        }
    }

    @Test("linear ticks of known ranges")
    func knownLinear() {
        #expect(LoadHTML.linearTicks(low: 0, high: 143_217) == [0, 50_000, 100_000, 150_000])
        #expect(LoadHTML.linearTicks(low: 0, high: 0.7) == [0, 0.2, 0.4, 0.6, 0.8])
        #expect(LoadHTML.linearTicks(low: 0, high: 7.3, count: 8) == [0, 1, 2, 3, 4, 5, 6, 7, 8])
    }

    @Test("log ticks: 1-2-5 per decade over up to three decades, powers of ten beyond, covering the range")
    func logTicks() {
        #expect(LoadHTML.logTicks(low: 23, high: 8_700) == [20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000])
        #expect(LoadHTML.logTicks(low: 3, high: 2e6) == [1, 10, 100, 1000, 10_000, 100_000, 1e6, 1e7])
        #expect(LoadHTML.logTicks(low: 0.12, high: 0.9) == [0.1, 0.2, 0.5, 1])
        #expect(LoadHTML.logTicks(low: 100, high: 100) == [100, 200])
        for (low, high) in [(1.0, 1.0), (412, 413), (7, 88_000), (0.003, 12)] {
            let ticks = LoadHTML.logTicks(low: low, high: high)
            #expect(ticks.first! <= low && ticks.last! >= high, "\(ticks)")
            #expect(ticks.allSatisfy(isRoundStep), "\(ticks)")
        }
    }

    @Test("the percentile axis is log10(1/(1−p)), capped where the histogram has no more ranks")
    func percentileAxis() {
        let count: UInt64 = 1_000_000
        let cases: [(Double, Double)] = [(0, 0), (50, log10(2)), (90, 1), (99, 2), (99.9, 3), (99.99, 4), (100, 6)]
        for (percentile, position) in cases {
            #expect(abs(LoadHTML.percentilePosition(percentile, count: count) - position) < 1e-9, "\(percentile)")
        }
        // 1 000 values: rank 1 000 is the maximum, at 99.9%; nothing is drawn further right.
        #expect(abs(LoadHTML.percentilePosition(100, count: 1000) - 3) < 1e-9)
        #expect(abs(LoadHTML.percentilePosition(99.99, count: 1000) - 3) < 1e-9)
        #expect(LoadHTML.percentileTicks(decades: 4).map(\.label) == ["0%", "50%", "90%", "99%", "99.9%", "99.99%"])
        #expect(LoadHTML.percentileTicks(decades: 4).map(\.position).last == 4)
    }

    @Test("a histogram's spectrum: ten points per decade up to its count, then the maximum")
    func spectrum() throws {
        #expect(LatencySpectrum.percentiles(count: 0).isEmpty)
        #expect(LatencySpectrum.percentiles(count: 1) == [0, 100])
        let percentiles = LatencySpectrum.percentiles(count: 1000)
        #expect(percentiles.count == 32)  // 1/(1−p) = 10^0 … 10^3 in tenths, then 100
        for wanted in [90.0, 99, 99.9] { #expect(percentiles.contains { abs($0 - wanted) < 1e-9 }, "\(wanted)") }
        #expect(LatencySpectrum.percentiles(count: 100_000_000).count == 62)  // at most 99.9999%
        var histogram = LatencyHistogram()
        for us in 1...10_000 { histogram.record(UInt64(us) * 1000) }
        let points = LatencySpectrum.points(histogram)
        #expect(zip(points, points.dropFirst()).allSatisfy { $0.latencyUs <= $1.latencyUs })
        let median = try #require(points.first { abs($0.percentile - 49.881) < 0.01 })
        #expect(abs(median.latencyUs - 4988) < 10, "\(median)")
        #expect(points.last == SpectrumPoint(percentile: 100, latencyUs: 10_000))
    }

    func result(_ target: String, throughput: Double, p50: Double) -> RelayLoadResult {
        var histogram = LatencyHistogram()
        for index in 1...2000 { histogram.record(UInt64(p50 * 1000 * Double(index) / 1000)) }
        return RelayLoadResult(
            target: target,
            loop: "closed",
            sent: 2000,
            completed: 2000,
            inFlightAtEnd: 0,
            errors: 0,
            timeouts: 0,
            measuredCompleted: 2000,
            measuredSeconds: 1,
            throughput: throughput,
            latency: histogram.summary,
            latencySpectrum: LatencySpectrum.points(histogram)
        )
    }

    /// The `<svg>…</svg>` blocks of a page.
    func charts(_ html: String) -> [String] {
        html.components(separatedBy: "<svg").dropFirst().map { $0.components(separatedBy: "</svg>")[0] }
    }

    @Test("the relay page: the figures in a <table>, a spectrum and a throughput chart, each with both runs' paths")
    func relayPage() throws {
        var report = RelayLoadReport(
            commandLine: "askrelay load --mode relay --baseline proxy",
            durability: "off",
            externalBroker: false,
            options: RelayLoadOptions(),
            ours: result("askrelay", throughput: 143_217, p50: 600),
            baseline: result("zmq_proxy", throughput: 343_001, p50: 280)
        )
        let samples = (1...8).flatMap { second in
            ["askrelay", "zmq_proxy"].map {
                ThroughputSample(
                    run: $0,
                    elapsedS: Double(second),
                    perSecond: $0 == "askrelay" ? 140_000 : 340_000,
                    phase: second <= 1 ? "warm-up" : second <= 6 ? "measuring" : "draining"
                )
            }
        }
        report.throughputSamples = samples
        let html = LoadHTML.render(report.page(samples: samples))
        #expect(!html.contains("<pre"))
        #expect(html.contains("<table class=\"figures\">"))
        for cell in ["<td class=\"text\">askrelay</td>", "<td>143217</td>", "<td>343001</td>", "<th>p99.9 µs</th>"] {
            #expect(html.contains(cell), "\(cell)")
        }
        #expect(html.contains("ratio=0.418"))
        let svgs = charts(html)
        #expect(svgs.count == 2)
        for chart in svgs {
            for run in ["askrelay", "zmq_proxy"] {
                #expect(chart.contains("><title>\(run)</title></polyline>"), "\(run) in \(chart.prefix(300))")
            }
        }
        #expect(svgs[0].contains(">99.9%</text>") && svgs[0].contains(">50%</text>"))
        #expect(svgs[0].contains(">500 µs</text>") || svgs[0].contains(">1 ms</text>"))
        for phase in ["warm-up", "measured", "drain"] { #expect(svgs[1].contains(">\(phase)</text>"), "\(phase)") }
        #expect(svgs[1].contains(">100k</text>") && svgs[1].contains(">rt/s (per-second samples)</text>"))
        // Well-formed enough for an XML parser: every attribute quoted.
        for chart in svgs {
            let xml = "<svg" + chart + "</svg>"
            #expect(XMLParser(data: Data(xml.utf8)).parse(), "\(xml.prefix(400))")
        }
    }

    @Test("the flows page: the stages in a <table> and one spectrum path per stage")
    func flowsPage() throws {
        var histogram = LatencyHistogram()
        for us in 100...900 { histogram.record(UInt64(us) * 1000) }
        let flows = FlowLoadResult(
            loop: "closed",
            started: 801,
            completed: 801,
            errors: 0,
            inFlightAtEnd: 0,
            measuredCompleted: 801,
            measuredSeconds: 1,
            throughput: 801,
            askToPresented: histogram.summary,
            sendToResponse: histogram.summary,
            endToEnd: histogram.summary,
            errorSamples: [],
            askToPresentedSpectrum: LatencySpectrum.points(histogram),
            sendToResponseSpectrum: nil,
            endToEndSpectrum: LatencySpectrum.points(histogram)
        )
        let report = LoadReport(
            mode: "flows",
            commandLine: "askrelay load --mode flows",
            durability: "batch",
            externalBroker: false,
            relayOptions: nil,
            flowOptions: FlowLoadOptions(),
            flows: flows,
            sweep: nil,
            throughputSamples: [ThroughputSample(run: "flows", elapsedS: 1, perSecond: 801, phase: "warm-up")]
        )
        let html = LoadHTML.render(report.page)
        #expect(html.contains("<td class=\"text\">end-to-end</td>"))
        #expect(html.contains("<p class=\"note\"><code>throughput=801</code></p>"))
        let svgs = charts(html)
        #expect(svgs.count == 2)
        for stage in ["ask → presented", "send → response", "end to end"] {
            #expect(svgs[0].contains("><title>\(stage)</title></polyline>"), "\(stage)")
        }
        #expect(svgs[1].contains("><title>flows</title></polyline>"))
    }

    @Test("the sweep's throughput chart draws every step's samples one after another with its target rate")
    func sweepThroughput() throws {
        var options = SweepOptions()
        options.startRate = 100
        options.maxSteps = 3
        let sweep = try LoadSweep.run(options) { rate in
            SweepStep(
                targetRate: rate,
                achievedRate: rate,
                latency: LatencyHistogram().summary,
                errors: 0,
                inFlightAtEnd: 0
            )
        }
        let samples = [100.0, 150, 225].flatMap { rate in
            (1...3).map {
                ThroughputSample(
                    run: "flows @\(Int(rate))/s",
                    elapsedS: Double($0),
                    perSecond: rate,
                    phase: "measuring"
                )
            }
        }
        let report = LoadReport(
            mode: "flows",
            commandLine: "askrelay load --mode flows --sweep",
            durability: "batch",
            externalBroker: false,
            relayOptions: nil,
            flowOptions: FlowLoadOptions(),
            flows: nil,
            sweep: sweep,
            throughputSamples: samples
        )
        let html = LoadHTML.render(report.page)
        #expect(html.contains("<td class=\"text\">ok</td>"))
        let chart = try #require(charts(html).last)
        for rate in [100, 150, 225] {
            #expect(chart.contains("><title>flows @\(rate)/s</title></polyline>"), "\(rate)")
            #expect(chart.contains(">\(rate)/s</text>"), "\(rate)")
        }
        // Steps follow each other: the last step's line ends at 9 s, the axis' last tick.
        #expect(chart.contains(">9</text>") || chart.contains(">10</text>"))
        #expect(LoadHTML.targetRate(ofRun: "askrelay @3375/s") == 3375)
        #expect(LoadHTML.targetRate(ofRun: "askrelay") == nil)
    }
}
