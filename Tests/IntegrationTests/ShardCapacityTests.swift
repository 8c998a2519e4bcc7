import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// scripts/shard-capacity.py (docs/scaling.md, "Capacity") with short runs: k = 1 and 2 shards, each broker and its
/// limits worker held to a CPU budget by a cgroup, one round; every k is printed, then the medians. What the figures
/// are is the script's business on a quiet machine, not a test's. Bad usage exits 64 with one line.
@Suite("shard capacity script", .serialized, .timeLimit(.minutes(3)))
struct ShardCapacityTests {
    static let script = Repository.root.appendingPathComponent("scripts/shard-capacity.py").path
    static let release = Repository.root.appendingPathComponent(".build/release").path

    static func capacity(_ arguments: [String]) -> ToolRun {
        Tool.run("/usr/bin/python3", [script] + arguments, environment: Tool.cleanEnvironment)
    }

    @Test("k = 1 and 2 under a CPU budget each: a line per k, then the medians with flows/s per shard")
    func twoShardCounts() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.release + "/askrelay") else {
            Issue.record("no release build at \(Self.release); run `swift build -c release` (make test does)")
            return
        }
        let run = Self.capacity([
            "--shards", "1,2", "--cpus", "0.5", "--rounds", "1", "--duration", "500ms", "--warmup", "300ms",
            "--children", "40", "--inflight", "20",
        ])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        for k in [1, 2] {
            #expect(lines.contains { $0.hasPrefix("round 1: k=\(k) ") && $0.contains(" flows/s") }, "\(lines)")
            let row = try #require(lines.last { $0.hasPrefix("  \(k) ") }, "\(lines)")
            let numbers = row.split(separator: " ").compactMap { Double($0) }
            #expect(numbers.count == 5 && numbers[1] > 0, "\(row)")
        }
        // Every cgroup it made is gone.
        for root in ["/sys/fs/cgroup/askrelay-capacity", "/sys/fs/cgroup/cpu/askrelay-capacity"] {
            let left = (try? FileManager.default.contentsOfDirectory(atPath: root))?.filter { $0.hasPrefix("k") }
            #expect(left?.isEmpty ?? true, "\(root): \(left ?? [])")
        }
    }

    @Test("bad usage exits 64 with one line naming the problem, and starts nothing")
    func badUsage() {
        let cases: [([String], String)] = [
            (["--shards", "1,x"], "--shards 1,x: give whole numbers"),
            (["--shards", "0"], "--shards 0: every k must be 1 or more"),
            (["--cpus", "0"], "--cpus 0.0: give a budget from 0.01"),
            (["--bin", "/nonexistent-askrelay"], "no release build at /nonexistent-askrelay"),
        ]
        for (arguments, message) in cases {
            let run = Self.capacity(arguments)
            #expect(run.status == 64, "\(arguments): \(run.stderr)")
            #expect(run.stderr.hasPrefix("shard-capacity: " + message), "\(arguments): \(run.stderr)")
            #expect(run.stdout.isEmpty, "\(arguments): \(run.stdout)")
        }
    }
}
