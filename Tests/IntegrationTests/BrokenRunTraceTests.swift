import AskAgents
import AskProtocol
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// trace.json as a test reads it back (docs/tracing.md, "trace.json in Perfetto"): the lines by process, from the
/// tracks (`process_name` and `thread_name` per pid) and their slices and instants.
struct ChromeTrace {
    /// Track names by pid.
    var tracks: [Int: String] = [:]
    /// Every slice and instant as a trace line, by the process of its track.
    var lines: [String: [TraceLine]] = [:]
    /// The fault instants: their scope, track and line.
    var faults: [(scope: String?, process: String, line: TraceLine)] = []
    /// Flow arrows (`s`/`f`) by id: how many starts and finishes.
    var arrows: [Int: (starts: Int, finishes: Int)] = [:]
    /// What does not read as the docs say.
    var problems: [String] = []

    init(data: Data) throws {
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let events = try #require(root["traceEvents"] as? [[String: Any]], "no traceEvents")
        let other = root["otherData"] as? [String: Any] ?? [:]
        let origin = (other["origin_us"] as? NSNumber)?.int64Value ?? 0
        var threads: [Int: String] = [:]
        for event in events where event["ph"] as? String == "M" {
            guard let pid = event["pid"] as? Int, let name = (event["args"] as? [String: Any])?["name"] as? String
            else { continue }
            if event["name"] as? String == "process_name" { tracks[pid] = name }
            if event["name"] as? String == "thread_name" { threads[pid] = name }
        }
        if threads != tracks { problems.append("thread names \(threads) differ from process names \(tracks)") }
        for event in events {
            let phase = event["ph"] as? String ?? "?"
            guard phase != "M" else { continue }
            let pid = event["pid"] as? Int ?? 0
            let name = event["name"] as? String ?? ""
            if event["tid"] as? Int != 1 { problems.append("\(name): tid \(event["tid"] ?? "none"), not 1") }
            guard let process = tracks[pid] else {
                problems.append("\(phase) \(name): pid \(pid) has no track")
                continue
            }
            if phase == "s" || phase == "f", let id = event["id"] as? Int {
                var counts = arrows[id] ?? (0, 0)
                if phase == "s" { counts.starts += 1 } else { counts.finishes += 1 }
                arrows[id] = counts
                continue
            }
            let args = event["args"] as? [String: String] ?? [:]
            let at = origin + ((event["ts"] as? NSNumber)?.int64Value ?? 0)
            var line = TraceLine(
                atMicroseconds: at,
                event: "",
                kind: args["kind"],
                question: args["question"],
                id: args["id"],
                from: args["from"],
                to: args["to"],
                code: args["code"]
            )
            switch phase {
            case "X":
                // `event kind`: the event is the name's first word, the kind the rest (as args.kind).
                let words = name.split(separator: " ", maxSplits: 1).map(String.init)
                line.event = words.first ?? ""
                if words.count > 1, words[1] != line.kind {
                    problems.append("\(name): args.kind \(line.kind ?? "none")")
                }
            case "i":
                line.event = TraceEvent.fault.rawValue
                let expected = "fault \(line.code ?? "?")" + (line.to.map { " \($0)" } ?? "")
                if name != expected { problems.append("instant \(name), not \(expected)") }
                faults.append((event["s"] as? String, process, line))
                // A fault on the track of the process it hit repeats simulate's line, which holds it once.
                guard event["s"] as? String == "g" else { continue }
            default:
                problems.append("\(phase) \(name): an event of no documented phase")
                continue
            }
            lines[process, default: []].append(line)
        }
    }

    /// trace.json `data` without the events `drop` selects (a test's mutation). - Returns: the bytes and how many
    /// events went.
    static func removing(_ data: Data, where drop: ([String: Any]) -> Bool) throws -> (data: Data, removed: Int) {
        var root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let events = try #require(root["traceEvents"] as? [[String: Any]])
        let kept = events.filter { !drop($0) }
        root["traceEvents"] = kept
        return (try JSONSerialization.data(withJSONObject: root), events.count - kept.count)
    }
}

/// report.html's invariants and Flows, as a test reads them back: the violations' items with the anchors they
/// link to, and the diagrams by anchor.
struct ReportPage {
    struct Violation {
        var text: String
        var links: [String]
    }

    struct Figure {
        var caption: String
        var svg: String
        /// The hop arrows' labels.
        var arrows: [String]
    }

    var violations: [Violation] = []
    var figures: [String: Figure] = [:]
    /// Anchors that more than one element has as its id.
    var duplicateIDs: [String] = []

    init(html: String) throws {
        func matches(_ pattern: String, in text: String) throws -> [[String]] {
            let regex = try NSRegularExpression(pattern: pattern, options: [.dotMatchesLineSeparators])
            let range = NSRange(text.startIndex..., in: text)
            return regex.matches(in: text, range: range).map { match in
                (0..<match.numberOfRanges).map { index in
                    Range(match.range(at: index), in: text).map { String(text[$0]) } ?? ""
                }
            }
        }
        for item in try matches(#"<li class=bad>(.*?)</li>"#, in: html) {
            let links = try matches(##"<a href="#([^"]+)">"##, in: item[1]).map { $0[1] }
            violations.append(Violation(text: item[1], links: links))
        }
        for figure in try matches(#"<figure id="([^"]+)">(.*?)</figure>"#, in: html) {
            let caption = try matches(#"<figcaption>(.*?)</figcaption>"#, in: figure[2]).first?[1] ?? ""
            let svg = try matches(#"<svg (.*?)</svg>"#, in: figure[2]).first?[0] ?? ""
            let arrows = try matches(#"<g class="hop"><line [^>]*/><text [^>]*>([^<]*)</text></g>"#, in: svg).map {
                $0[1]
            }
            if figures[figure[1]] != nil { duplicateIDs.append(figure[1]) }
            figures[figure[1]] = Figure(caption: caption, svg: svg, arrows: arrows)
        }
        let ids = try matches(#" id="([^"]+)""#, in: html).map { $0[1] }
        duplicateIDs += Dictionary(grouping: ids, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
    }
}

/// A broken run with faults, looked at as a user would (issue 31, "See why"): every violation in report.html links
/// to its flow's diagram, and trace.json holds, for every flow a child finished, its chain of events from the ask
/// to its end on the tracks of the processes it went through, with the faults as instants.
@Suite("a broken run with faults: each violation's diagram, every flow's chain in trace.json", .serialized)
struct BrokenRunTraceTests {
    /// Every guardian answers after expiry (the checker's debug hook), so `guardians-honour-expiry` breaks; the
    /// broker, limits, both parents and a child are killed, stopped or terminated while flows are in flight.
    static let broken = """
        {"seed": 31, "families": 24, "flowsPerChild": 2, "childThink": "200ms", "grace": "500ms",
         "answerAfterExpiry": true,
         "faults": [
          {"at": "500ms", "process": "broker", "action": "kill", "restartAfter": "300ms"},
          {"at": "1s", "process": "parent-1", "action": "stop", "continueAfter": "300ms"},
          {"at": "1500ms", "process": "limits", "action": "term", "restartAfter": "300ms"},
          {"at": "2s", "process": "child-1", "action": "kill", "restartAfter": "300ms"},
          {"at": "2500ms", "process": "parent-2", "action": "kill", "restartAfter": "300ms"},
          {"at": "3s", "process": "broker", "action": "stop", "continueAfter": "300ms"},
          {"at": "3500ms", "process": "limits", "action": "kill", "restartAfter": "300ms"},
          {"at": "4s", "process": "broker", "action": "term", "restartAfter": "300ms"}]}
        """

    @Test("report.html: every violation links to its flow's diagram; trace.json: every finished flow's chain")
    func brokenRun() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try FaultSupport.simulate(Self.broken, directory: directory)
        #expect(run.exit == .exited(1), "\(run.exit)")
        #expect(ShrinkIntegrationTests.broke(run, "guardians-honour-expiry"), "\(run.violations)")
        let coverage = run.stdout.first { $0.hasPrefix("coverage ") } ?? "no coverage line"
        #expect(coverage.contains("8 faults"), "\(coverage)")

        // report.html: every violation (up to the bound) links to a diagram of each of its questions.
        let violations = try JSONDecoder().decode(
            [InvariantViolation].self,
            from: try JSONSerialization.data(withJSONObject: run.violations)
        )
        let trace = try TraceFolder(path: run.directory + "/trace")
        let page = try ReportPage(html: try String(contentsOfFile: run.directory + "/report.html", encoding: .utf8))
        try Self.expectDiagrams(page, violations: violations, trace: trace)

        // trace.json: every line of every trace file, on its process's track; the faults as instants.
        let json = try Data(contentsOf: URL(fileURLWithPath: run.directory + "/trace.json"))
        let merged = try ChromeTrace(data: json)
        #expect(merged.problems.isEmpty, "\(merged.problems.prefix(10))")
        Self.expectSameLines(merged, trace)
        let played = trace.processes["simulate"] ?? []
        #expect(played.filter { $0.code == "kill" }.count == 4, "\(played)")
        Self.expectFaults(merged, played: played)
        #expect(merged.arrows.values.allSatisfy { $0 == (1, 1) }, "every hop an arrow with one start and one end")

        // Each of these checks fails on a page or trace.json that lacks one thing.
        let html = try String(contentsOfFile: run.directory + "/report.html", encoding: .utf8)
        let figure = try #require(html.range(of: "<figure id=\"flow-"))
        let figureEnd = try #require(html.range(of: "</figure>", range: figure.upperBound..<html.endIndex))
        let withoutFigure = try ReportPage(
            html: html.replacingCharacters(in: figure.lowerBound..<figureEnd.upperBound, with: "")
        )
        withKnownIssue("a violation's diagram missing") {
            try Self.expectDiagrams(withoutFigure, violations: violations, trace: trace)
        }
        let link = try #require(html.range(of: "<a href=\"#flow-"))
        let badLink = try ReportPage(html: html.replacingCharacters(in: link, with: "<a href=\"#flow-x"))
        withKnownIssue("a violation's link to no diagram") {
            try Self.expectDiagrams(badLink, violations: violations, trace: trace)
        }
        let withoutSlice = try ChromeTrace.removing(json) {
            $0["ph"] as? String == "X" && $0["name"] as? String == "closed"
        }
        #expect(withoutSlice.removed > 0)
        withKnownIssue("a broker line missing from trace.json") {
            Self.expectSameLines(try ChromeTrace(data: withoutSlice.data), trace)
        }
        for scope in ["g", "p"] {
            let withoutFault = try ChromeTrace.removing(json) {
                $0["ph"] as? String == "i" && $0["s"] as? String == scope
                    && $0["name"] as? String == "fault kill limits"
            }
            #expect(withoutFault.removed == 1)
            withKnownIssue("a fault instant (scope \(scope)) missing from trace.json") {
                Self.expectFaults(try ChromeTrace(data: withoutFault.data), played: played)
            }
        }

        // Every finished flow's chain, from trace.json's tracks.
        let records = FlowChain.records(run.directory)
        let asked = records.filter { $0.record.question != nil }
        #expect(asked.count >= 40, "\(records.count) records, \(asked.count) with a question")
        let findings = FlowChain.check(records, in: merged.lines)
        #expect(findings.count == asked.count)
        let broken = findings.filter { !$0.missing.isEmpty }
        #expect(broken.isEmpty, "\(broken.count) flows: \(broken.prefix(5).map { "\($0.flow): \($0.missing)" })")
        // A kill may lose the lines of the turn it cut (docs/tracing.md): tolerated, but a rare case, never the rule.
        let lost = findings.filter { !$0.lostToKill.isEmpty }
        #expect(lost.count <= asked.count / 4, "lost to kills: \(lost.map { "\($0.flow): \($0.lostToKill)" })")

        // The check can fail: trace.json without one flow's ask.result at its child breaks that flow's chain (a
        // flow of the child no fault killed, whose ask.result came once).
        let received = (merged.lines["child-2"] ?? []).filter { $0.event == "received" && $0.kind == "ask.result" }
        let once = Dictionary(grouping: received, by: { $0.question?.uppercased() ?? "" }).filter {
            $0.value.count == 1
        }
        let whole = try #require(
            findings.first {
                $0.flow.hasPrefix("child-2 ") && $0.missing.isEmpty && $0.lostToKill.isEmpty
                    && once[String($0.flow.split(separator: " ").last ?? "").uppercased()] != nil
            }
        )
        let question = String(whole.flow.split(separator: " ").last ?? "").uppercased()
        let child2 = try #require(merged.tracks.first { $0.value == "child-2" }?.key)
        let mutated = try ChromeTrace.removing(json) {
            ($0["name"] as? String) == "received ask.result" && ($0["pid"] as? Int) == child2
                && ((($0["args"] as? [String: String])?["question"])?.uppercased() == question)
        }
        #expect(mutated.removed == 1)
        let found = FlowChain.check(records, in: try ChromeTrace(data: mutated.data).lines)
        #expect(found.filter { !$0.missing.isEmpty }.map(\.flow) == [whole.flow])
    }

    /// Every one of the first ``ReportFlows`` bound's violations that names questions links to a diagram of each
    /// traced one, and that diagram is in the page: its anchor, its SVG naming the question, an arrow per hop kind.
    static func expectDiagrams(_ page: ReportPage, violations: [InvariantViolation], trace: TraceFolder) throws {
        #expect(page.violations.count == violations.count)
        #expect(page.duplicateIDs.isEmpty, "\(page.duplicateIDs)")
        for (index, (violation, item)) in zip(violations, page.violations).enumerated() {
            #expect(item.text.contains(violation.invariant.rawValue), "\(item.text)")
            let traced = violation.questions.filter { !trace.flow($0.uuidString).isEmpty }
            #expect(traced.count == violation.questions.count, "untraced questions of \(violation)")
            guard index < 20 else {  // the documented bound
                #expect(item.links.isEmpty && item.text.contains("no diagram"), "\(item.text)")
                continue
            }
            #expect(item.links == traced.map { "flow-" + $0.uuidString.lowercased() }, "\(violation)")
            for question in traced {
                let anchor = "flow-" + question.uuidString.lowercased()
                let figure = try #require(page.figures[anchor], "no diagram \(anchor) for \(violation)")
                #expect(figure.svg.contains("aria-label=\"flow of question \(question.uuidString.lowercased())\""))
                #expect(figure.caption.contains(question.uuidString.lowercased()), "\(figure.caption)")
                // Drawn under the first violation naming the question: its caption names that violation.
                if let first = violations.first(where: { $0.questions.contains(question) }) {
                    #expect(figure.caption.contains(first.invariant.rawValue), "\(figure.caption)")
                }
                // An arrow for each kind of message that went from a process to another.
                let flow = trace.flow(question.uuidString)
                var kinds: Set<String> = []
                for sent in flow where sent.line.event == TraceEvent.sent.rawValue && !sent.isBroker {
                    if flow.contains(where: { $0.isBroker && $0.line.event == "received" && $0.line.id == sent.line.id }
                    ) {
                        kinds.insert(sent.line.kind ?? "?")
                    }
                }
                for delivered in flow where delivered.line.event == TraceEvent.delivered.rawValue {
                    if flow.contains(where: {
                        !$0.isBroker && $0.line.event == "received" && $0.line.id == delivered.line.id
                    }) {
                        kinds.insert(delivered.line.kind ?? "?")
                    }
                }
                #expect(!kinds.isEmpty, "\(anchor): no message went between processes")
                #expect(kinds.isSubset(of: Set(figure.arrows)), "\(anchor): arrows \(figure.arrows), kinds \(kinds)")
            }
        }
    }

    /// Each fault simulate played (its `fault` lines) is a global instant on simulate's track in trace.json, named
    /// after its action and the process it hit, and an instant on that process's track.
    static func expectFaults(_ merged: ChromeTrace, played: [TraceLine]) {
        let global = merged.faults.filter { $0.scope == "g" }
        let same = global.map(\.line) == played && global.allSatisfy { $0.process == "simulate" }
        #expect(same, "\(global.count) global fault instants on simulate's track, \(played.count) faults played")
        let onTracks = merged.faults.filter { $0.scope == "p" }
        #expect(onTracks.count == played.count, "\(onTracks.count) fault instants on tracks")
        for fault in played {
            let hit = fault.to ?? ""
            #expect(merged.tracks.values.contains(hit), "\(fault) names no track")
            #expect(onTracks.contains { $0.process == hit && $0.line == fault }, "\(fault): not on \(hit)'s track")
        }
    }

    /// trace.json holds every readable line of every trace file, on the track of its file's process.
    static func expectSameLines(_ merged: ChromeTrace, _ trace: TraceFolder) {
        #expect(Set(merged.tracks.values) == Set(trace.processes.keys), "\(merged.tracks)")
        #expect(merged.tracks.count == trace.processes.count, "one track per process")
        func key(_ line: TraceLine) -> String {
            [
                String(line.atMicroseconds), line.event, line.kind, line.question?.uppercased(), line.id, line.from,
                line.to, line.code,
            ]
            .map { $0 ?? "-" }.joined(separator: " ")
        }
        for (process, lines) in trace.processes {
            let want = lines.map(key).sorted()
            let got = (merged.lines[process] ?? []).map(key).sorted()
            let first = zip(want, got).first { $0 != $1 }.map { "first difference: \($0.0) vs \($0.1)" } ?? ""
            let same = want == got
            #expect(same, "\(process): \(want.count) lines in its file, \(got.count) on its track; \(first)")
        }
    }
}
