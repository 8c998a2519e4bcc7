import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// scripts/wakeups-per-flow.py (docs/performance.md, "What bounds each figure") with a short, slow run: a line of
/// wake-ups per flow for the load and each process it starts, and their total. What the figures are is the script's
/// business on a quiet machine, not a test's. Bad usage exits 64 with one line.
@Suite("wake-ups per flow script", .serialized, .timeLimit(.minutes(2)))
struct WakeupsScriptTests {
    static let script = Repository.root.appendingPathComponent("scripts/wakeups-per-flow.py").path
    static let release = Repository.root.appendingPathComponent(".build/release").path

    @Test("a line with the load, broker, limits worker and parent, each counted, and the total")
    func counts() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.release + "/askrelay") else {
            Issue.record("no release build at \(Self.release); run `swift build -c release` (make test does)")
            return
        }
        let run = Tool.run(
            "/usr/bin/python3",
            [Self.script, "--bin", Self.release, "--rate", "200", "--window", "1"],
            environment: Tool.cleanEnvironment
        )
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        let line = try #require(run.stdout.split(separator: "\n").last.map(String.init), "\(run.stdout)")
        var values: [String: Double] = [:]
        for field in line.split(separator: " ") {
            let parts = field.split(separator: "=")
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        #expect(Set(values.keys) == ["broker", "limits", "load", "parent", "total"], "\(line)")
        for name in ["broker", "limits", "load", "parent"] { #expect((values[name] ?? 0) > 0, "\(line)") }
    }

    @Test("bad usage: exit 64 and one line naming what is wrong")
    func badUsage() {
        let missing = Tool.run("/usr/bin/python3", [Self.script, "--bin", "/nonexistent-askrelay"])
        #expect(missing.status == 64 && missing.stderr.contains("no executable /nonexistent-askrelay/askrelay"))
        let rate = Tool.run("/usr/bin/python3", [Self.script, "--bin", Self.release, "--rate", "0"])
        #expect(rate.status == 64 && rate.stderr.contains("must be positive"), "\(rate.stderr)")
    }
}
