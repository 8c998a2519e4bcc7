import Foundation
import Testing

@testable import AskLoad

@Suite("load thresholds")
struct LoadThresholdTests {
    @Test("FIGURE OP VALUE: durations in µs, numbers as written, two-character operators before one")
    func parsing() throws {
        let p99 = try LoadThreshold(parsing: "p99<5ms")
        #expect(p99.figure == "p99" && p99.comparison == .less && p99.bound == 5_000 && p99.boundIsDuration)
        let errors = try LoadThreshold(parsing: "errors==0")
        #expect(
            errors.figure == "errors" && errors.comparison == .equal && errors.bound == 0 && !errors.boundIsDuration
        )
        let spaced = try LoadThreshold(parsing: " throughput >= 10000 ")
        #expect(spaced.figure == "throughput" && spaced.comparison == .greaterOrEqual && spaced.bound == 10_000)
        #expect(try LoadThreshold(parsing: "p99.9<=250us").comparison == .lessOrEqual)
        #expect(try LoadThreshold(parsing: "recovery<2s").bound == 2_000_000)
        #expect(try LoadThreshold(parsing: "ratio!=0.5").comparison == .notEqual)
    }

    @Test("a threshold that cannot be read says what is wrong", arguments: ["p99", "p99<fast", "<5ms", "p99<"])
    func unreadable(_ text: String) {
        #expect(throws: LoadThresholdError.self) { try LoadThreshold(parsing: text) }
    }

    @Test("a figure the mode does not report, or a bound of the wrong kind, is refused before the run")
    func checkedUpFront() throws {
        var experiment = LoadExperiment(executableDirectory: URL(fileURLWithPath: "/"), commandLine: "")
        experiment.mode = .relay
        experiment.thresholds = [try LoadThreshold(parsing: "dropped==0")]
        #expect {
            try experiment.checkThresholds()
        } throws: { error in
            "\(error)".contains("no figure 'dropped'") && "\(error)".contains("p99")
        }
        experiment.thresholds = [try LoadThreshold(parsing: "p99<5")]
        #expect {
            try experiment.checkThresholds()
        } throws: { error in
            "\(error)".contains("p99 is a latency; give the bound a unit")
        }
        experiment.thresholds = [try LoadThreshold(parsing: "errors<5ms")]
        #expect(throws: LoadThresholdError.self) { try experiment.checkThresholds() }
        experiment.mode = .flows
        experiment.thresholds = [try LoadThreshold(parsing: "dropped==0"), try LoadThreshold(parsing: "send.p99<5ms")]
        try experiment.checkThresholds()
        experiment.mode = .relay
        experiment.thresholds = [try LoadThreshold(parsing: "ratio>0.5")]
        #expect(throws: LoadThresholdError.self) { try experiment.checkThresholds() }
        experiment.baseline = true
        try experiment.checkThresholds()
    }

    @Test("one line per threshold with the measured value; a breach, or a figure not measured, is a breach")
    func verdicts() throws {
        let figures: [String: LoadFigure] = ["p99": .latency(3_210), "errors": .count(0), "throughput": .count(9_000)]
        let thresholds = try ["p99<5ms", "errors==0", "throughput>10000"].map { try LoadThreshold(parsing: $0) }
        let (lines, breached) = LoadThreshold.verdicts(thresholds, figures: figures)
        #expect(
            lines == [
                "threshold p99<5ms: p99=3.21ms ok", "threshold errors==0: errors=0 ok",
                "threshold throughput>10000: throughput=9000 BREACHED",
            ]
        )
        #expect(breached)
        let missing = LoadThreshold.verdicts([try LoadThreshold(parsing: "late_starts==0")], figures: figures)
        #expect(missing.breached && missing.lines == ["threshold late_starts==0: late_starts=not measured BREACHED"])
        #expect(!LoadThreshold.verdicts(Array(thresholds.prefix(2)), figures: figures).breached)
    }

    @Test("a verdict's number is written as the table writes it, never in exponent notation")
    func verdictNumbers() throws {
        let figures: [String: LoadFigure] = [
            "throughput": .count(46_714.3), "ratio": .ratio(0.205_12), "p50_ratio": .ratio(4.854_9),
            "bytes_per_pending": .count(304.4), "recovery": .latency(1_234_600_000), "p99": .latency(250),
            "max": .latency(2_500_000),
        ]
        let thresholds = try [
            "throughput>1", "ratio>0", "p50_ratio>0", "bytes_per_pending>0", "recovery<1h", "p99<1s",
            "max<1h",
        ].map { try LoadThreshold(parsing: $0) }
        let measured = LoadThreshold.verdicts(thresholds, figures: figures).lines.map {
            String($0.split(separator: " ")[2])
        }
        #expect(
            measured == [
                "throughput=46714", "ratio=0.205", "p50_ratio=4.855", "bytes_per_pending=304", "recovery=1235s",
                "p99=250µs", "max=2.5s",
            ]
        )
    }

    @Test("the threshold lines come before the table's last line, which scripts read")
    func lastLineStays() {
        let lines = LoadExperiment.stdoutLines(
            files: ["report: /r/load.json"],
            table: ["workload: x", "throughput=10"],
            verdicts: ["threshold errors==0: errors=0 ok"]
        )
        #expect(
            lines == [
                "report: /r/load.json", "workload: x", "threshold errors==0: errors=0 ok", "throughput=10",
            ]
        )
    }
}
