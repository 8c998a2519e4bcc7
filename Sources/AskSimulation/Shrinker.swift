import AskCLI
import AskModel
import AskLogging
import Foundation

/// Shrinks a scenario whose run broke an invariant to a smaller one whose replay breaks the same invariant:
/// delta debugging over the fault list, then each count to 1 or halved (families, child and parent processes,
/// children and guardians per family, flows per child), then the duration halved, then each fault moved earlier.
/// Every replay is a real simulation in its own report folder `replay-NN` inside the output folder; nothing else is
/// written outside it. Blocking; call it from a dedicated thread. See docs/simulation.md, *Shrinking*.
public struct Shrinker: Sendable {
    /// Plays `scenario` with its report folder at `folder` (new) and returns its report.
    public typealias Replay = @Sendable (_ scenario: Scenario, _ folder: String) throws -> SimulationReport

    public var original: Scenario
    /// The invariant a smaller scenario must still break.
    public var invariant: Invariant
    /// A new or empty folder for the replays, `minimal-scenario.json` and `shrink.json`.
    public var outputDirectory: String
    /// No replay starts once this much time has passed; the best scenario so far is the result.
    public var budget: Duration
    /// The original run's report folder, named as the minimal report while no replay is smaller.
    public var originalReport: String?
    let replay: Replay
    /// One line per replay and the summary.
    let progress: @Sendable (String) -> Void
    /// True once the user asked to stop (SIGINT): no replay starts after it.
    let stopRequested: @Sendable () -> Bool

    public init(
        original: Scenario,
        invariant: Invariant,
        outputDirectory: String,
        budget: Duration,
        originalReport: String? = nil,
        replay: @escaping Replay,
        progress: @escaping @Sendable (String) -> Void,
        stopRequested: @escaping @Sendable () -> Bool = { false }
    ) {
        self.original = original
        self.invariant = invariant
        self.outputDirectory = outputDirectory
        self.budget = budget
        self.originalReport = originalReport
        self.replay = replay
        self.progress = progress
        self.stopRequested = stopRequested
    }

    /// Replays a scenario the way `base` plays one (the same executables, endpoint, CURVE, wrappers, log level),
    /// quietly and without the `running:` line.
    public static func replay(like base: SimulationOptions, logger: AskLogger) -> Replay {
        { scenario, folder in
            var options = base
            options.scenario = scenario
            options.reportDirectory = folder
            // Each replay claims its own folder (the base run's claim is for the base run's folder).
            options.reportFolder = nil
            options.quiet = true
            options.onStarted = { _ in }
            return try Simulation(options: options, logger: logger).run().report
        }
    }

    /// The invariant to shrink for: `named` if the report broke it, else the report's first broken one.
    /// - Throws: ``ShrinkError`` when every invariant held, or `named` is unknown or was not broken.
    public static func target(_ invariants: InvariantResult, named: String?) throws -> Invariant {
        let broken = invariants.violations.map(\.invariant)
        guard let first = broken.first else {
            throw ShrinkError("every invariant held in that run; there is nothing to shrink")
        }
        guard let named else { return first }
        guard let invariant = Invariant(rawValue: named) else {
            let known = Invariant.allCases.map(\.rawValue).joined(separator: ", ")
            throw ShrinkError("--shrink-invariant must be one of \(known), got '\(named)'")
        }
        guard broken.contains(invariant) else {
            let names = Set(broken).map(\.rawValue).sorted().joined(separator: ", ")
            throw ShrinkError("that run did not break '\(named)' (it broke \(names)); give one of those")
        }
        return invariant
    }

    /// Shrinks, writes `minimal-scenario.json` and `shrink.json` into the output folder, prints the summary.
    /// - Throws: when the output folder cannot be written; a replay that cannot run counts as not failing.
    public func run() throws -> ShrinkSummary {
        try ReportFolder.prepare(outputDirectory, clean: false, flag: "the shrink folder", contents: .shrink)
        let state = ShrinkState(original: original, originalReport: originalReport)
        let clock = ContinuousClock.now
        progress(
            "shrink: looking for the smallest scenario that still breaks [\(invariant.rawValue)]; budget "
                + "\(budget.text); replays in \(outputDirectory)/"
        )
        var stopped: ShrinkSummary.Stop?
        do {
            try shrinkFaults(state, clock)
            try shrinkCounts(state, clock)
            try shrinkDuration(state, clock)
            try moveFaultsEarlier(state, clock)
        } catch let stop as StopShrinking {
            stopped = stop.reason
        }
        let minimalPath = (outputDirectory as NSString).appendingPathComponent("minimal-scenario.json")
        try ReportJSON.simulationFile(state.best).write(to: URL(fileURLWithPath: minimalPath))
        let summary = ShrinkSummary(
            invariant: invariant,
            original: original,
            minimal: state.best,
            minimalScenario: minimalPath,
            minimalReport: state.bestReport,
            replays: state.replays,
            seconds: (ContinuousClock.now - clock).seconds,
            stopped: stopped,
            removed: Self.changes(from: original, to: state.best)
        )
        try ReportJSON.simulationFile(summary, escapingSlashes: false).write(
            to: URL(fileURLWithPath: (outputDirectory as NSString).appendingPathComponent("shrink.json"))
        )
        for line in summary.lines { progress(line) }
        return summary
    }

    // MARK: - The passes

    private func shrinkFaults(_ state: ShrinkState, _ clock: ContinuousClock.Instant) throws {
        guard !state.best.faults.isEmpty else { return }
        let base = state.best
        let all = base.faults
        let numbered = Array(all.enumerated())
        _ = try DeltaDebugging.minimize(numbered) { kept in
            var candidate = base
            candidate.faults = kept.map(\.element)
            let names = kept.isEmpty ? "none" : kept.map { "#\($0.offset + 1)" }.joined(separator: ",")
            return try attempt(candidate, "faults \(all.count) → \(kept.count) (kept \(names))", state, clock)
        }
    }

    private func shrinkCounts(_ state: ShrinkState, _ clock: ContinuousClock.Instant) throws {
        let counts: [(name: String, path: WritableKeyPath<Scenario, Int>)] = [
            ("families", \.families), ("childProcesses", \.childProcesses), ("parentProcesses", \.parentProcesses),
            ("childrenPerFamily", \.childrenPerFamily), ("guardiansPerFamily", \.guardiansPerFamily),
            ("flowsPerChild", \.flowsPerChild),
        ]
        for (name, path) in counts {
            // 1 first (one replay when the count does not matter), then halving from the top while it still fails.
            let value = state.best[keyPath: path]
            if value > 1, try attempt(with(state.best, path, 1), "\(name) \(value) → 1", state, clock) { continue }
            while state.best[keyPath: path] / 2 > 1 {
                let from = state.best[keyPath: path]
                let candidate = with(state.best, path, from / 2)
                guard try attempt(candidate, "\(name) \(from) → \(from / 2)", state, clock) else { break }
            }
        }
    }

    private func with(_ scenario: Scenario, _ path: WritableKeyPath<Scenario, Int>, _ value: Int) -> Scenario {
        var copy = scenario
        copy[keyPath: path] = value
        return copy
    }

    private func shrinkDuration(_ state: ShrinkState, _ clock: ContinuousClock.Instant) throws {
        while state.best.duration / 2 >= .seconds(1) {
            var candidate = state.best
            candidate.duration = state.best.duration / 2
            guard
                try attempt(
                    candidate,
                    "duration \(state.best.duration.text) → \(candidate.duration.text)",
                    state,
                    clock
                )
            else { return }
        }
    }

    private func moveFaultsEarlier(_ state: ShrinkState, _ clock: ContinuousClock.Instant) throws {
        for index in state.best.faults.indices where state.best.faults[index].at > .zero {
            // At once first, then halving its time while it still fails.
            var candidate = state.best
            candidate.faults[index].at = .zero
            let from = state.best.faults[index].at.text
            if try attempt(candidate, "fault #\(index + 1) at \(from) → 0s", state, clock) { continue }
            while state.best.faults[index].at / 2 >= .milliseconds(100) {
                var earlier = state.best
                earlier.faults[index].at = state.best.faults[index].at / 2
                let tried =
                    "fault #\(index + 1) at \(state.best.faults[index].at.text) → \(earlier.faults[index].at.text)"
                guard try attempt(earlier, tried, state, clock) else { break }
            }
        }
    }

    // MARK: - One replay

    /// Replays `candidate` unless it is invalid or already played; true when it broke the invariant (it is then the
    /// best so far). - Throws: ``StopShrinking`` when the budget is spent or the user asked to stop.
    private func attempt(
        _ candidate: Scenario,
        _ tried: String,
        _ state: ShrinkState,
        _ clock: ContinuousClock.Instant
    ) throws -> Bool {
        guard (try? candidate.validate()) != nil else { return false }
        let key = (try? ReportJSON.simulationFileEncoder().encode(candidate)) ?? Data()
        if let known = state.played[key] { return known }
        if stopRequested() { throw StopShrinking(reason: .interrupted) }
        if ContinuousClock.now - clock >= budget { throw StopShrinking(reason: .budget) }
        let number = state.replays.count + 1
        let folder = (outputDirectory as NSString).appendingPathComponent(String(format: "replay-%02d", number))
        let started = ContinuousClock.now
        var step = ShrinkSummary.Replay(number: number, tried: tried, folder: folder)
        do {
            let report = try replay(candidate, folder)
            step.broken = Array(Set(report.invariants.violations.map(\.invariant.rawValue))).sorted()
            step.failed = report.invariants.violations.contains { $0.invariant == invariant }
        } catch {
            step.error = "\(error)"
        }
        step.seconds = (ContinuousClock.now - started).seconds
        if stopRequested() {
            // Its processes were killed mid-run: its verdict says nothing.
            step.failed = false
            step.error = "interrupted"
            state.replays.append(step)
            progress(step.line(invariant))
            throw StopShrinking(reason: .interrupted)
        }
        state.replays.append(step)
        state.played[key] = step.failed
        progress(step.line(invariant))
        if step.failed {
            state.best = candidate
            state.bestReport = folder
        }
        return step.failed
    }

    /// What differs between the original and the minimal scenario, in words (`families 240 → 4`).
    static func changes(from original: Scenario, to minimal: Scenario) -> [String] {
        var changes: [String] = []
        let removed = original.faults.count - minimal.faults.count
        if removed > 0 {
            changes.append("faults \(original.faults.count) → \(minimal.faults.count) (\(removed) removed)")
        }
        // A kept fault that is not among the original ones had its time moved.
        let moved = minimal.faults.filter { !original.faults.contains($0) }.count
        if moved > 0 { changes.append("\(moved) fault(s) moved earlier") }
        let counts: [(String, KeyPath<Scenario, Int>)] = [
            ("families", \.families), ("childProcesses", \.childProcesses), ("parentProcesses", \.parentProcesses),
            ("childrenPerFamily", \.childrenPerFamily), ("guardiansPerFamily", \.guardiansPerFamily),
            ("flowsPerChild", \.flowsPerChild),
        ]
        for (name, path) in counts where original[keyPath: path] != minimal[keyPath: path] {
            changes.append("\(name) \(original[keyPath: path]) → \(minimal[keyPath: path])")
        }
        if original.duration != minimal.duration {
            changes.append("duration \(original.duration.text) → \(minimal.duration.text)")
        }
        return changes
    }
}

/// What a shrink did: written as `shrink.json` into the output folder, printed as its last lines.
public struct ShrinkSummary: Codable, Sendable {
    public enum Stop: String, Codable, Sendable {
        /// The time budget was spent before every pass had run.
        case budget
        /// SIGINT or SIGTERM.
        case interrupted
    }

    /// One replay: what it changed, whether it broke the invariant, how long it took, where its report is.
    public struct Replay: Codable, Sendable {
        public var number: Int
        public var tried: String
        public var folder: String
        /// It broke the invariant being shrunk for.
        public var failed = false
        /// Every invariant it broke.
        public var broken: [String] = []
        /// It could not run (a process did not start or get ready); counts as not failing.
        public var error: String?
        public var seconds: Double = 0

        init(number: Int, tried: String, folder: String) {
            self.number = number
            self.tried = tried
            self.folder = folder
        }

        func line(_ invariant: Invariant) -> String {
            let verdict: String
            if error == "interrupted" {
                verdict = "interrupted"
            } else if let error {
                verdict = "could not run (\(error))"
            } else if failed {
                verdict = "fails [\(invariant.rawValue)]"
            } else if broken.isEmpty {
                verdict = "passes"
            } else {
                verdict = "does not break [\(invariant.rawValue)] (breaks \(broken.joined(separator: ", ")))"
            }
            return "replay \(number): \(tried): \(verdict), \(String(format: "%.1f", seconds)) s"
        }
    }

    public var invariant: Invariant
    public var original: Scenario
    public var minimal: Scenario
    public var minimalScenario: String
    /// The report folder of the replay that played `minimal`; the original run's when no replay was smaller.
    public var minimalReport: String?
    public var replays: [Replay]
    public var seconds: Double
    /// Why it stopped early; `nil` when every pass ran.
    public var stopped: Stop?
    /// What the minimal scenario changed, in words.
    public var removed: [String]

    /// The minimal scenario is smaller than the original.
    public var shrunk: Bool { !removed.isEmpty }

    /// The summary printed at the end.
    public var lines: [String] {
        let time = String(format: "%.1f", seconds)
        var lines: [String] = []
        switch stopped {
        case .budget: lines.append("shrink: the budget is spent; stopped with the best scenario so far")
        case .interrupted: lines.append("shrink: interrupted; stopped with the best scenario so far")
        case nil: break
        }
        let changes = removed.isEmpty ? "no smaller scenario still breaks it" : removed.joined(separator: ", ")
        lines.append("shrunk [\(invariant.rawValue)] in \(replays.count) replays, \(time) s: \(changes)")
        lines.append("minimal scenario: \(minimalScenario) (seed \(minimal.seed))")
        if let minimalReport { lines.append("minimal report:   \(minimalReport)") }
        lines.append("replay it:        askrelay simulate --scenario \(minimalScenario)")
        return lines
    }
}

/// Why a shrink cannot start, in words.
public struct ShrinkError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The best scenario so far and every replay; one shrink's state on its one thread.
private final class ShrinkState {
    var best: Scenario
    var bestReport: String?
    var replays: [ShrinkSummary.Replay] = []
    /// Encoded scenario → whether its replay broke the invariant.
    var played: [Data: Bool] = [:]

    init(original: Scenario, originalReport: String?) {
        best = original
        bestReport = originalReport
    }
}

private struct StopShrinking: Error {
    var reason: ShrinkSummary.Stop
}
