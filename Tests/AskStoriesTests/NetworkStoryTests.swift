import AskTestKit
import Foundation
import Testing

/// The network stories of docs/stories pass, and their logs show that each fault did what the story relies on: a
/// story that passed because a link silently did nothing would prove nothing.
extension AskRelayTestCommandTests {
    /// The lines of a story's log that contain `text`.
    func lines(_ log: URL, containing text: String) -> [String] { lines(log).filter { $0.contains(text) } }

    func lines(_ log: URL) -> [String] {
        ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The lines of `log` containing `text` that come after the first line containing `after`.
    func lines(_ log: URL, containing text: String, after: String) -> [String] {
        let all = lines(log)
        guard let start = all.firstIndex(where: { $0.contains(after) }) else { return [] }
        return all[(start + 1)...].filter { $0.contains(text) }
    }

    @Test("the network stories pass, and their logs show the answer lost on the wire and the session ended")
    func networkStoriesDoWhatTheySay() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let logs = folder.appendingPathComponent("logs")
        let run = try askrelay(
            [
                Self.story("answer-lost-on-the-wire"), Self.story("guardian-partitioned-past-liveness"), "--logs",
                logs.path,
            ],
            in: folder
        )
        #expect(run.status == .exited(0), "\(run.stdout.joined(separator: "\n"))\n\(run.stderr)")

        // The answer: mum's link held it (the story's answer step timed out: no acknowledgement while her bytes
        // toward the broker were held), the reset cut the connection holding it and the bytes the link had read
        // toward the broker were never delivered; then mum registered again and the retried answer got through
        // (the story's expectResponse).
        let lost = logs.appendingPathComponent("01-answer-lost-on-the-wire")
        let clients = lost.appendingPathComponent("clients.log")
        let reset = try #require(lines(clients, containing: "(network): reset on guardian mum").first)
        let counts = try #require(reset.firstMatch(of: /: (\d+) connections? reset; (\d+) B read toward the broker/))
        #expect(Int(counts.1)! >= 1, "\(reset)")
        #expect(Int(counts.2)! > 0, "\(reset)")
        let again = lines(
            lost.appendingPathComponent("broker.log"),
            containing: "worker=story-guardian-mum session registered",
            after: "worker=story-guardian-mum session registered"
        )
        #expect(!again.isEmpty)
        let end = try #require(lines(clients, containing: "(guardian mum) at the end:").first)
        #expect(end.contains("resets 1,"), "\(end)")

        // The partition: the broker ended mum's session for missed heartbeats, her center gave up the silent
        // broker, and she registered again after the heal (and got the question: the story's expectQuestion).
        let partitioned = logs.appendingPathComponent("02-guardian-partitioned-past-liveness")
        let broker = partitioned.appendingPathComponent("broker.log")
        let ended = "missed 3 heartbeats\" worker=story-guardian-mum session ended"
        #expect(!lines(broker, containing: "worker=story-guardian-mum session registered", after: ended).isEmpty)
        #expect(lines(broker, containing: "worker=story-guardian-dad session registered").count == 1)
        let silent = lines(partitioned.appendingPathComponent("clients.log"), containing: "broker silent; reconnecting")
        #expect(!silent.isEmpty)
    }
}
