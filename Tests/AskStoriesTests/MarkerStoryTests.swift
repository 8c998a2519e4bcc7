import AskTestKit
import Foundation
import Testing

/// `expectNoQuestion` and `expectNoResponse` need positive evidence: after the quiet window a marker question makes
/// the round trip along the same path, and what was on its way arrives before it. Two stories whose no-arrival step
/// is wrong (what it says does not come is held in a delaying link, past the window) fail at that step; an honest
/// one over the same delayed link passes, its markers' round trips in clients.log.
extension AskRelayTestCommandTests {
    @Test("a no-arrival step whose thing is on its way fails at its marker; an honest one passes with its markers")
    func noArrivalStepsNeedTheirMarker() throws {
        let scratch = TempDirectory(prefix: "askrelay-test")
        defer { scratch.cleanup() }
        let folder = scratch.url
        let logs = folder.appendingPathComponent("logs")
        let run = try askrelay(
            [
                Self.fixtures.appendingPathComponent("late-response-story.json").path,
                Self.fixtures.appendingPathComponent("late-question-story.json").path,
                Self.fixtures.appendingPathComponent("quiet-with-markers-story.json").path, "--logs", logs.path,
            ],
            in: folder
        )
        let output = "\(run.stdout.joined(separator: "\n"))\n\(run.stderr)"
        #expect(run.status == .exited(1), "\(output)")
        #expect(run.stdout.contains { $0.hasPrefix("1 passed, 2 failed (") }, "\(output)")

        // Each wrong step fails. The link holds what it says does not come for 400 ms, past its 1 ms window, so the
        // bare window would have passed; the marker, queued behind it, makes it arrive first. (A machine that
        // stalls the runner for those 400 ms sees it arrive in the window instead: the step fails all the same.)
        let response = try #require(
            run.stdout.first { $0.hasPrefix("  step 5 \"wrong: the approval is on its way\" (expectNoResponse): ") },
            "\(output)"
        )
        #expect(
            response.hasSuffix(
                ": expected no response to q1 for 1ms, got one (askrelay.approve) after the window, before the marker"
            )
                || response.hasSuffix(": expected no response to q1 for 1ms, got one (askrelay.approve)"),
            "\(response)"
        )
        let question = try #require(
            run.stdout.first { $0.hasPrefix("  step 3 \"wrong: q1 is on its way\" (expectNoQuestion): ") },
            "\(output)"
        )
        #expect(
            question.hasSuffix(
                ": expected no question q1 at mum for 1ms, got it arrived after the window, before the marker"
            )
                || question.hasSuffix(": expected no question q1 at mum for 1ms, got it arrived"),
            "\(question)"
        )

        // The honest story: one marker for each no-arrival step, each back (joe's through jo, ann's through mum,
        // over ann's delayed link).
        #expect(run.stdout.contains { $0.hasPrefix("PASS nothing is on its way, and the markers show it (") })
        let clients = logs.appendingPathComponent("03-quiet-with-markers-story/clients.log")
        let markers = lines(clients, containing: ": marker question ")
        #expect(markers.count == 2, "\(markers)")
        #expect(
            markers.first?.contains("\"another family's guardian never gets it\" (expectNoQuestion): marker question ")
                == true && markers.first?.contains(" from joe through jo: round trip done in ") == true,
            "\(markers)"
        )
        #expect(
            markers.last?.contains("\"no second response\" (expectNoResponse): marker question ") == true
                && markers.last?.contains(" from ann through mum: round trip done in ") == true,
            "\(markers)"
        )
    }
}
