import AskTestKit
import Foundation
import Testing

/// `askrelay trace` run as built, on synthetic trace files (docs/tracing.md, *Viewing*).
@Suite("askrelay trace: a flow's timeline from trace files", .timeLimit(.minutes(1)))
struct TraceCommandTests {
    static let question = "6f1c2b7e-0c7a-4d0e-9a53-2f4b8c1d9e00"
    static let t0: Int64 = 1_764_763_200_000_000

    /// A report folder with trace/: an ask child → broker → limits, a fault, a torn last line in child-1's file.
    static func folder() throws -> TempDirectory {
        let scratch = TempDirectory(prefix: "askrelay-trace")
        let trace = scratch.appending("trace")
        try FileManager.default.createDirectory(atPath: trace, withIntermediateDirectories: true)
        let q = question.uppercased()
        let id = "00000000-0000-4000-8000-000000000001"
        func line(_ at: Int64, _ rest: String) -> String { "{\"at_us\":\(t0 + at),\(rest)}\n" }
        let files = [
            "child-1": line(
                0,
                "\"event\":\"sent\",\"kind\":\"ask\",\"question\":\"\(q)\",\"id\":\"\(id)\",\"from\":\"child/c1-1\",\"to\":\"broker\""
            )
                + "{\"at_us\":1764",
            "broker": line(
                1_200,
                "\"event\":\"received\",\"kind\":\"ask\",\"question\":\"\(q)\",\"id\":\"\(id)\",\"from\":\"child/c1-1\",\"to\":\"broker\""
            )
                + line(
                    1_500,
                    "\"event\":\"refused\",\"kind\":\"ask\",\"question\":\"\(q)\",\"id\":\"\(id)\",\"code\":\"invalidQuestion\""
                ),
            "simulate": line(1_300, "\"event\":\"fault\",\"to\":\"limits\",\"code\":\"kill\""),
        ]
        for (process, text) in files {
            try text.write(toFile: "\(trace)/\(process).jsonl", atomically: true, encoding: .utf8)
        }
        return scratch
    }

    @Test("prints the flow hop by hop with deltas, processes, events, kinds, routes and codes; exit 0")
    func timeline() throws {
        let scratch = try Self.folder()
        defer { scratch.cleanup() }
        let run = try UsageExitTests.Run(["askrelay", "trace", Self.question, scratch.path])
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("question \(Self.question): 3 events in 2 processes over 1.5 ms") == true)
        #expect(
            lines.contains {
                $0.contains("+0.0 ms") && $0.contains("child-1") && $0.contains("sent") && $0.contains("ask")
                    && $0.contains("child/c1-1 → broker")
            }
        )
        #expect(lines.contains { $0.contains("+1.2 ms") && $0.contains("broker") && $0.contains("received") })
        #expect(
            lines.contains {
                $0.contains("+1.3 ms") && $0.contains("fault") && $0.contains("kill") && $0.contains("on limits")
            }
        )
        #expect(lines.contains { $0.contains("+1.5 ms") && $0.contains("refused") && $0.contains("[invalidQuestion]") })
        #expect(run.stderr.contains("skipped 1 unreadable line(s)") && run.stderr.contains("child-1.jsonl"))
        // The id in upper case, and the trace folder itself, work the same.
        let upper = try UsageExitTests.Run([
            "askrelay", "trace", Self.question.uppercased(), scratch.appending("trace"),
        ])
        #expect(upper.status == 0 && upper.stdout == run.stdout)
    }

    @Test("exit 1 when no trace file names the question")
    func unknownQuestion() throws {
        let scratch = try Self.folder()
        defer { scratch.cleanup() }
        let other = "6f1c2b7e-0c7a-4d0e-9a53-2f4b8c1d9e99"
        let run = try UsageExitTests.Run(["askrelay", "trace", other, scratch.path])
        #expect(run.status == 1)
        #expect(run.stderr.contains("question \(other) is in none of the 3 trace file(s)"), "\(run.stderr)")
        #expect(run.stdout.isEmpty)
    }

    @Test("exit 64 for a bad id, a folder without trace files, a missing folder, no arguments")
    func badUsage() throws {
        let scratch = try Self.folder()
        defer { scratch.cleanup() }
        let empty = TempDirectory(prefix: "askrelay-trace-empty")
        defer { empty.cleanup() }
        let cases: [([String], String)] = [
            (["not-a-uuid", scratch.path], "'not-a-uuid' is not a question id: give a UUID"),
            ([Self.question, empty.path], "has no trace/ folder (nor .jsonl trace files)"),
            ([Self.question, empty.appending("missing")], "is not a folder"),
            ([], "give the question id to trace"),
            ([Self.question], "'.' has no trace/ folder"),
        ]
        for (arguments, message) in cases {
            let run = try UsageExitTests.Run(["askrelay", "trace"] + arguments)
            #expect(run.status == 64, "\(arguments): exit \(run.status)")
            #expect(run.stderr.contains(message), "\(arguments): \(run.stderr)")
            #expect(run.stdout.isEmpty)
        }
    }
}
