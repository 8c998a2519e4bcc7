import AskTestKit
import Foundation
import Testing

@testable import AskLoad

@Suite("load sweep and report", .timeLimit(.minutes(1)))
struct LoadSweepTests {
    func step(_ rate: Double, achieved: Double, p99: Double, errors: Int = 0) -> SweepStep {
        SweepStep(
            targetRate: rate,
            achievedRate: achieved,
            latency: LatencySummary(
                count: 10,
                minUs: 1,
                meanUs: 2,
                p50Us: p99 / 4,
                p90Us: p99 / 2,
                p99Us: p99,
                p999Us: p99,
                maxUs: p99
            ),
            errors: errors,
            inFlightAtEnd: 0
        )
    }

    @Test("steps go up by the factor and stop at the first unsustainable one; the knee is the last good rate")
    func knee() throws {
        var options = SweepOptions()
        options.startRate = 100
        options.factor = 2
        options.maxP99Us = 10_000
        // Capacity 500/s: above it the achieved rate falls short; p99 rises with the rate.
        let result = try LoadSweep.run(options) { rate in step(rate, achieved: min(rate, 500), p99: rate * 20) }
        #expect(result.steps.map(\.targetRate) == [100, 200, 400, 800])
        #expect(result.steps.map(\.ok) == [true, true, true, false])
        #expect(result.kneeRate == 400)
        #expect(result.kneeThroughput == 400)
        #expect(result.steps.last?.reason.contains("p99") == true)
        #expect(result.steps.last?.reason.contains("achieved") == true)
    }

    @Test("errors end a sweep; no good step means no knee; maxSteps bounds it")
    func errorsAndBounds() throws {
        var options = SweepOptions()
        options.startRate = 10
        let failing = try LoadSweep.run(options) { rate in step(rate, achieved: rate, p99: 1, errors: 1) }
        #expect(failing.steps.count == 1)
        #expect(failing.kneeRate == nil)
        options.maxSteps = 3
        let bounded = try LoadSweep.run(options) { rate in step(rate, achieved: rate, p99: 1) }
        #expect(bounded.steps.count == 3)
        #expect(bounded.kneeRate == bounded.steps.last?.targetRate)
    }

    @Test("the sweep table and HTML: last line throughput= knee=, charts as inline SVG")
    func report() throws {
        var options = SweepOptions()
        options.startRate = 100
        options.maxSteps = 2
        let sweep = try LoadSweep.run(options) { rate in step(rate, achieved: rate, p99: 100) }
        let report = LoadReport(
            mode: "flows",
            commandLine: "askrelay load --sweep",
            durability: "batch",
            externalBroker: false,
            relayOptions: nil,
            flowOptions: FlowLoadOptions(),
            flows: nil,
            sweep: sweep,
            throughputSamples: [ThroughputSample(run: "a", elapsedS: 1, perSecond: 90, phase: "measuring")]
        )
        #expect(report.table.last == "throughput=150 knee=150 knee_found=false")
        let scratch = TempDirectory(prefix: "load-report")
        let directory = scratch.path + "/report"
        try report.write(to: directory)
        let html = try String(contentsOfFile: directory + "/load.html", encoding: .utf8)
        // latency vs rate, per-step percentiles, throughput
        #expect(html.components(separatedBy: "<svg").count - 1 == 3)
        let json = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: directory + "/load.json")))
                as? [String: Any]
        )
        #expect((json["sweep"] as? [String: Any])?["knee_rate"] as? Double == 150)
        #expect((json["sweep"] as? [String: Any])?["knee_found"] as? Bool == false)
    }

    @Test("steps that run out before one fails: no knee claimed, 'no knee below' the last rate; a failed step: knee")
    func noKneeBelow() throws {
        var options = SweepOptions()
        options.startRate = 1000
        options.maxSteps = 3
        let sweep = try LoadSweep.run(options) { rate in step(rate, achieved: rate, p99: 100) }
        #expect(!sweep.kneeFound)
        let table = LoadSweep.table(sweep, unit: "rt/s")
        #expect(!table.contains { $0.hasPrefix("knee:") }, "\(table)")
        #expect(
            table.last
                == "no knee below 2250 rt/s: all 3 steps were sustainable (p99 ≤ 50000 µs, no errors, ≥ 90% of target); raise --sweep-steps or --sweep-start to find it"
        )
        options.maxSteps = 5
        let failed = try LoadSweep.run(options) { rate in step(rate, achieved: min(rate, 2000), p99: 100) }
        #expect(failed.kneeFound && failed.kneeRate == 1500)
        #expect(LoadSweep.table(failed, unit: "rt/s").last?.hasPrefix("knee: 1500 rt/s sustained") == true)
    }

    @Test("a stop during a step ends the sweep there: the step is kept unjudged and no knee is claimed")
    func interrupted() throws {
        var options = SweepOptions()
        options.startRate = 100
        let stop = LoadStop()
        let sweep = try LoadSweep.run(options, stop: stop) { rate in
            if rate > 200 { stop.request(signal: SIGINT) }
            // A short step looks unsustainable; it must not be judged so.
            return step(rate, achieved: rate > 200 ? rate / 10 : rate, p99: 100)
        }
        #expect(sweep.steps.map(\.targetRate) == [100, 150, 225])
        #expect(sweep.steps.last?.reason == "interrupted" && sweep.interrupted && !sweep.kneeFound)
        #expect(sweep.kneeRate == 150)
        #expect(LoadSweep.table(sweep, unit: "rt/s").last?.hasPrefix("no knee: the sweep was interrupted") == true)
        #expect(LoadSweep.lastLine(sweep) == "throughput=150 knee=150 knee_found=false")
    }

    @Test("throughput samples are completions per second between progress callbacks")
    func samples() {
        let recorder = ThroughputRecorder()
        recorder.record(
            "x",
            RelayLoadProgress(elapsedSeconds: 1, completed: 100, sent: 100, errors: 0, phase: "warm-up")
        )
        recorder.record(
            "x",
            RelayLoadProgress(elapsedSeconds: 2, completed: 300, sent: 300, errors: 0, phase: "measuring")
        )
        recorder.record(
            "y",
            RelayLoadProgress(elapsedSeconds: 0.5, completed: 50, sent: 50, errors: 0, phase: "warm-up")
        )
        #expect(recorder.samples.map(\.perSecond) == [100, 200, 100])
    }

    @Test("an update within 50 ms of the previous sample extends that sample: no completions are lost")
    func closeUpdates() {
        let recorder = ThroughputRecorder()
        for (elapsed, completed) in [(0.01, 1), (1.0, 100), (1.02, 112), (2.0, 300), (2.03, 303)] {
            recorder.record(
                "x",
                RelayLoadProgress(elapsedSeconds: elapsed, completed: completed, sent: 0, errors: 0, phase: "measuring")
            )
        }
        let samples = recorder.samples
        #expect(samples.map(\.elapsedS) == [1.02, 2.03])
        #expect(abs(samples[0].perSecond - 112 / 1.02) < 1e-9)
        #expect(abs(samples[1].perSecond - 191 / 1.01) < 1e-9)
        // Each sample covers the span since the previous one: together, every completion.
        let total = samples[0].perSecond * 1.02 + samples[1].perSecond * (2.03 - 1.02)
        #expect(abs(total - 303) < 1e-6)
    }
}

@Suite("load.html markup")
struct LoadHTMLTests {
    @Test("unquoted attribute values get quotes; quoted ones and text stay as they are")
    func quoting() {
        #expect(
            LoadHTML.quoteAttributes(#"<svg width=760.0 a="x=1"><line x1=70.0 y1=2/><text x=3>p=1 </text></svg>"#)
                == #"<svg width="760.0" a="x=1"><line x1="70.0" y1="2"/><text x="3">p=1 </text></svg>"#
        )
    }
}
