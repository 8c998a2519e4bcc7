import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// `make bench-compare`'s script (scripts/bench-compare.py, docs/performance.md "Comparing two builds") with the
/// release build as both builds and short runs: every round and every figure is printed, then the medians; bad usage
/// exits 64 with one line. What the figures are is `make bench-compare`'s business on a quiet machine, not a test's.
@Suite("make bench-compare's script", .serialized, .timeLimit(.minutes(3)))
struct BenchCompareTests {
    static let script = Repository.root.appendingPathComponent("scripts/bench-compare.py").path
    static let release = Repository.root.appendingPathComponent(".build/release").path

    static func compare(_ arguments: [String]) -> ToolRun {
        Tool.run("/usr/bin/python3", [script] + arguments, environment: Tool.cleanEnvironment)
    }

    @Test("two rounds of two figures: each round's figures, then a row of medians and ratio per figure")
    func twoRounds() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.release + "/askrelay") else {
            Issue.record("no release build at \(Self.release); run `swift build -c release` (make test does)")
            return
        }
        let run = Self.compare([
            "--base-bin", Self.release, "--rounds", "2", "--duration", "300ms", "--warmup", "100ms", "--figures",
            "relay/proxy,flows/s",
        ])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        for round in 1...2 {
            for figure in ["relay/proxy", "flows/s"] {
                #expect(lines.contains { $0.hasPrefix("round \(round): \(figure) ") }, "\(lines)")
            }
        }
        #expect(lines.contains { $0.hasPrefix("medians of 2 round(s)") }, "\(lines)")
        for figure in ["relay/proxy", "flows/s"] {
            let row = try #require(lines.last { $0.hasPrefix(figure + " ") }, "\(lines)")
            // base, head, head/base, then which way is better and the figure's description.
            let numbers = row.dropFirst(figure.count).split(separator: " ").prefix(3).compactMap { Double($0) }
            #expect(numbers.count == 3 && numbers.allSatisfy { $0 > 0 }, "\(row)")
        }
        #expect(!lines.contains { $0.hasPrefix("p99") }, "only the figures asked for")
    }

    @Test("bad usage exits 64 with one line naming the problem, and runs nothing")
    func badUsage() {
        let cases: [([String], String)] = [
            (["--base-bin", Self.release, "--figures", "nope"], "unknown figure(s) nope"),
            (["--rounds", "1"], "give --base REVISION (it is built) or --base-bin FOLDER"),
            (["--base", "no-such-revision-askrelay"], "--base no-such-revision-askrelay is not a revision"),
            (["--base-bin", "/nonexistent-askrelay"], "no base build at /nonexistent-askrelay/askrelay"),
        ]
        for (arguments, message) in cases {
            let run = Self.compare(arguments)
            #expect(run.status == 64, "\(arguments): \(run.stderr)")
            #expect(run.stderr.hasPrefix("bench-compare: " + message), "\(arguments): \(run.stderr)")
            #expect(run.stdout.isEmpty, "\(arguments): \(run.stdout)")
        }
    }
}
