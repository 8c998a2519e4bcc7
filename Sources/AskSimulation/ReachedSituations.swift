import AskAgents
import AskProtocol
import Foundation

/// How often a run reached one situation (``ReachedSituation``), read from the reached logs its processes wrote
/// (`reached/<process>.jsonl` in the report folder): counted where it happened, not guessed from outcomes.
public struct ReachedCount: Codable, Sendable, Equatable {
    public var situation: String
    public var count: Int
    /// The processes that counted it (`broker`, `child-2`), by count.
    public var processes: [String: Int]
    /// Up to ``ReachedCount/examplesKept`` questions it happened to, first seen first.
    public var questions: [String]
    /// The scenario's `expect.reached` names it.
    public var required: Bool

    static let examplesKept = 5

    public init(situation: String, count: Int, processes: [String: Int], questions: [String], required: Bool) {
        self.situation = situation
        self.count = count
        self.processes = processes
        self.questions = questions
        self.required = required
    }

    /// Every situation, in ``ReachedSituation`` order (zero counts too: what was not reached matters as much), from
    /// the reached logs in `folder`; `nil` when the folder has none (a run of a build before reached logs).
    public static func read(folder: String, required: [String]) -> [ReachedCount]? {
        let directory = (folder as NSString).appendingPathComponent("reached")
        guard let files = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return nil }
        var counts = ReachedSituation.allCases.map {
            ReachedCount(
                situation: $0.rawValue,
                count: 0,
                processes: [:],
                questions: [],
                required: required.contains($0.rawValue)
            )
        }
        for file in files.sorted() where file.hasSuffix(".jsonl") {
            let process = String(file.dropLast(".jsonl".count))
            let lines = JSONLinesWriter.read(
                ReachedLine.self,
                path: (directory as NSString).appendingPathComponent(file)
            ).values
            for line in lines.sorted(by: { $0.atMs < $1.atMs }) {
                guard let index = counts.firstIndex(where: { $0.situation == line.situation }) else { continue }
                counts[index].count += line.count
                counts[index].processes[process, default: 0] += line.count
                if let question = line.question, counts[index].questions.count < examplesKept,
                    !counts[index].questions.contains(question)
                {
                    counts[index].questions.append(question)
                }
            }
        }
        return counts
    }
}

extension SimulationReport {
    /// The situations the scenario's `expect.reached` asks for that the run never reached.
    public var unreachedExpectations: [String] {
        (reached ?? []).filter { $0.required && $0.count == 0 }.map(\.situation)
    }

    /// The one line a run that missed an expectation fails with; `nil` when it missed none.
    public var expectationFailure: String? {
        let missed = unreachedExpectations
        guard !missed.isEmpty else { return nil }
        let external = broker != "internal" ? " (with --broker, the broker's situations are not counted)" : ""
        return "expect.reached: never reached \(missed.joined(separator: ", "))\(external): the run did not exercise "
            + "what the scenario asks for; make it more likely (more flows, faults, a shorter think time) or drop it "
            + "from expect.reached"
    }

    /// The summary table's lines for the reached situations.
    var reachedLines: [String] {
        guard let reached else { return [] }
        let hit = reached.filter { $0.count > 0 }.count
        var lines = [
            "reached          \(hit) of \(reached.count) situations (counted where they happen; docs/simulation.md)"
        ]
        for entry in reached {
            let count = String(entry.count)
            let padded = String(repeating: " ", count: max(0, 8 - count.count)) + count
            var line = "  \(entry.situation.padding(toLength: 26, withPad: " ", startingAt: 0))\(padded)"
            if entry.required { line += entry.count > 0 ? "   required" : "   required, NOT REACHED" }
            lines.append(line)
        }
        return lines
    }
}
