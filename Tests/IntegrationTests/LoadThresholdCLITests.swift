import AskCLI
import AskLoad
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// `askrelay load --threshold` and dropped starts, with the real executable and the processes it starts.
@Suite("askrelay load thresholds and dropped starts", .timeLimit(.minutes(2)), .serialized)
struct LoadThresholdCLITests {
    /// Runs `askrelay load <flags>`; returns its exit status and stdout lines.
    func load(_ flags: [String]) throws -> (exit: ProcessExitStatus, stdout: [String], log: String) {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let askrelay = try RelayProcess(
            "askrelay",
            ["load"] + flags,
            logPath: directory.path + "/askrelay.log"
        )
        let exit = try askrelay.wait(timeout: .seconds(90))
        let log = String(
            decoding: FileManager.default.contents(atPath: directory.path + "/askrelay.log") ?? Data(),
            as: UTF8.self
        )
        return (exit, askrelay.output, log)
    }

    /// A threshold every value of each figure of `mode` meets (`>= 0`), to show the report has them all.
    static func everyFigure(mode: LoadMode, baseline: Bool = false) -> [String] {
        var experiment = LoadExperiment(executableDirectory: URL(fileURLWithPath: "/"), commandLine: "")
        experiment.mode = mode
        experiment.baseline = baseline
        return experiment.thresholdFigures.sorted { $0.key < $1.key }.map { $0.key + ($0.value ? ">=0us" : ">=0") }
    }

    @Test("a threshold that must fail fails with exit 99 and says which; the others pass on their own line")
    func breachedExits99() throws {
        let run = try load([
            "--mode", "relay", "--duration", "1s", "--warmup", "0s", "--threshold", "errors==0",
            "--threshold", "throughput<1",
        ])
        #expect(run.exit == .exited(99), "\(run.log.suffix(2000))")
        #expect(run.stdout.contains("threshold errors==0: errors=0 ok"), "\(run.stdout)")
        #expect(
            run.stdout.contains { $0.hasPrefix("threshold throughput<1: throughput=") && $0.hasSuffix(" BREACHED") },
            "\(run.stdout)"
        )
        // The machine-readable line stays last, after the threshold lines.
        #expect(run.stdout.last?.hasPrefix("throughput=") == true, "\(run.stdout)")
    }

    @Test("thresholds that hold exit 0")
    func heldExits0() throws {
        let run = try load(
            ["--mode", "relay", "--baseline", "proxy", "--duration", "1s", "--warmup", "0s", "--threshold", "p99<60s"]
                + Self.everyFigure(mode: .relay, baseline: true).flatMap { ["--threshold", $0] }
        )
        #expect(run.exit == .exited(0), "\(run.log.suffix(2000)) \(run.stdout)")
        let verdicts = run.stdout.filter { $0.hasPrefix("threshold ") }
        #expect(verdicts.count == 1 + LoadExperiment.figureCount(mode: .relay, baseline: true))
        #expect(run.stdout.contains { $0.hasPrefix("threshold p99<60s: p99=") && $0.hasSuffix(" ok") })
    }

    @Test("a threshold on a figure the mode does not have is refused before anything runs (exit 64)")
    func unknownFigure() throws {
        let run = try load(["--mode", "relay", "--threshold", "dropped==0"])
        #expect(run.exit == .exited(64))
        #expect(run.log.contains("no figure 'dropped'"), "\(run.log)")
        #expect(run.stdout.isEmpty)
    }

    @Test("open loop at a cap of one flow in flight: starts are dropped, counted, warned about, and gate a threshold")
    func droppedStarts() throws {
        let run = try load(
            [
                "--mode", "flows", "--endpoints", "4", "--families", "2", "--rate", "2000", "--max-inflight", "1",
                "--duration", "1s", "--warmup", "0s", "--threshold", "dropped==0",
            ] + Self.everyFigure(mode: .flows).flatMap { ["--threshold", $0] }
        )
        #expect(run.exit == .exited(99), "\(run.log.suffix(2000))")
        let counts = try #require(run.stdout.first { $0.hasPrefix("started=") }, "\(run.stdout)")
        let dropped = counts.split(separator: " ").first { $0.hasPrefix("dropped=") }.flatMap { Int($0.dropFirst(8)) }
        #expect((dropped ?? 0) > 0, "\(counts)")
        #expect(run.stdout.contains { $0.hasPrefix("warning: ") && $0.contains("starts dropped") }, "\(run.stdout)")
        #expect(run.stdout.contains { $0.hasPrefix("threshold dropped==0: dropped=") && $0.hasSuffix("BREACHED") })
        // Every other figure the mode lists is in the report (a missing one would be "not measured", a breach).
        let verdicts = run.stdout.filter { $0.hasPrefix("threshold ") && !$0.hasPrefix("threshold dropped==0") }
        #expect(
            verdicts.count == LoadExperiment.figureCount(mode: .flows) && verdicts.allSatisfy { $0.hasSuffix(" ok") }
        )
    }
}

extension LoadExperiment {
    static func figureCount(mode: LoadMode, baseline: Bool = false) -> Int {
        var experiment = LoadExperiment(executableDirectory: URL(fileURLWithPath: "/"), commandLine: "")
        experiment.mode = mode
        experiment.baseline = baseline
        return experiment.thresholdFigures.count
    }
}
