import AskProtocol
import AskTestKit
import Foundation
import Synchronization
import Testing

@testable import AskSimulation

@Suite("Delta debugging finds a 1-minimal failing sublist; the shrinker keeps what still breaks the invariant")
struct ShrinkerTests {
    /// Every subset of 0..<n as a bit mask.
    static func members(_ mask: Int, _ n: Int) -> [Int] { (0..<n).filter { mask & (1 << $0) != 0 } }
    static func mask(_ items: [Int]) -> Int { items.reduce(0) { $0 | (1 << $1) } }

    @Test("every predicate over the subsets of up to 4 items: the result fails, is 1-minimal, keeps order, no repeats")
    func exhaustive() {
        for n in 0...4 {
            let subsets = 1 << n
            let full = subsets - 1
            // A predicate is a set of failing subsets (bit `s` of `table`): all 2^(2^n) of them that fail in full.
            for table in 0..<(1 << subsets) where table & (1 << full) != 0 {
                var calls: [Int] = []
                let result = DeltaDebugging.minimize(Array(0..<n)) { sublist in
                    calls.append(Self.mask(sublist))
                    return table & (1 << Self.mask(sublist)) != 0
                }
                let resultMask = Self.mask(result)
                #expect(result == result.sorted(), "n \(n) table \(table): order \(result)")
                #expect(table & (1 << resultMask) != 0, "n \(n) table \(table): \(result) does not fail")
                for item in result {
                    let smaller = resultMask & ~(1 << item)
                    #expect(table & (1 << smaller) == 0, "n \(n) table \(table): \(result) without \(item) fails")
                }
                #expect(Set(calls).count == calls.count, "n \(n) table \(table): a sublist tried twice: \(calls)")
                if n == 4 && table == (1 << full) { #expect(calls.count <= 16) }
            }
        }
    }

    @Test("monotone causes among 8 items are found exactly, in few tests; the empty list is tried first")
    func monotone() {
        let items = Array(0..<8)
        var calls = 0
        let none = DeltaDebugging.minimize(items) { _ in
            calls += 1
            return true
        }
        #expect(none.isEmpty)
        #expect(calls == 1, "a failure that needs no item costs one test")
        for cause in [[3], [0, 7], [1, 2, 5], [6]] {
            calls = 0
            let found = DeltaDebugging.minimize(items) { sublist in
                calls += 1
                return Set(cause).isSubset(of: sublist)
            }
            #expect(found == cause)
            #expect(calls <= 2 * 8 * cause.count + 1, "\(cause): \(calls) tests")
        }
        for n in 0...6 {
            for causeMask in 0..<(1 << n) {
                let cause = Self.members(causeMask, n)
                let found = DeltaDebugging.minimize(Array(0..<n)) { Set(cause).isSubset(of: $0) }
                #expect(found == cause, "n \(n)")
            }
        }
    }

    @Test("a thrown error (a spent budget) ends the search at once")
    func throwsThrough() {
        struct Spent: Error {}
        var calls = 0
        #expect(throws: Spent.self) {
            _ = try DeltaDebugging.minimize(Array(0..<8)) { _ in
                calls += 1
                if calls == 3 { throw Spent() }
                return false
            }
        }
        #expect(calls == 3)
    }

    /// A replay that breaks `invariant` when the scenario has the fault at 4s, at least 3 families and 2 flows.
    static func fakeReplay(log: Collected<Scenario>) -> Shrinker.Replay {
        { scenario, _ in
            log.append(scenario)
            let fails =
                scenario.faults.contains { $0.process == "limits" } && scenario.families >= 3
                && scenario.flowsPerChild >= 2
            let violations =
                fails
                ? [InvariantViolation(.guardiansHonourExpiry, "late")] : [InvariantViolation(.endsExactlyOnce, "x")]
            return SimulationReport.build(
                scenario: scenario,
                broker: "internal",
                startedAt: Date(),
                wallSeconds: 0,
                childRecords: [],
                guardianRecords: [],
                invariants: InvariantResult(violations: violations, checked: Invariant.allCases, notes: []),
                processes: []
            )
        }
    }

    @Test("the shrinker removes the unrelated faults, halves counts and duration, moves the fault earlier")
    func shrinksAFakeRun() throws {
        let scratch = TempDirectory(prefix: "askrelay-shrink")
        let folder = scratch.path + "/run"
        var original = Scenario()
        original.faults = [
            .init(at: .seconds(1), process: "broker", action: .kill, restartAfter: .seconds(1)),
            .init(at: .seconds(2), process: "parent-2", action: .stop),
            .init(at: .seconds(4), process: "limits", action: .kill, restartAfter: .seconds(1)),
            .init(at: .seconds(6), process: "child-2", action: .term, restartAfter: .seconds(1)),
        ]
        let log = Collected<Scenario>()
        let lines = Collected<String>()
        let summary = try Shrinker(
            original: original,
            invariant: .guardiansHonourExpiry,
            outputDirectory: folder,
            budget: .seconds(60),
            replay: Self.fakeReplay(log: log),
            progress: { line in lines.append(line) }
        ).run()
        let minimal = summary.minimal
        #expect(minimal.faults.map(\.process) == ["limits"])
        #expect(minimal.faults.first?.at == .zero)
        #expect(minimal.families == 3, "240 → 1 passes, then 120, 60, 30, 15, 7, 3 fail, 1 is known to pass")
        #expect(minimal.flowsPerChild == 2)
        #expect(minimal.childProcesses == 1 && minimal.parentProcesses == 1)
        #expect(minimal.duration == .milliseconds(1250))
        #expect(summary.stopped == nil)
        let played = log.all
        #expect(summary.replays.count == played.count)
        let distinct = Set(played.compactMap { try? ReportJSON.simulationFileEncoder().encode($0) })
        #expect(distinct.count == played.count, "no scenario is replayed twice")
        #expect(summary.removed.contains("families 240 → 3"))
        #expect(summary.removed.contains("1 fault(s) moved earlier"))
        #expect(summary.removed.first == "faults 4 → 1 (3 removed)")
        let written = try Scenario.load(path: folder + "/minimal-scenario.json")
        #expect(written == minimal)
        let last = try #require(summary.replays.last { $0.failed })
        #expect(summary.minimalReport == last.folder)
        #expect(last.folder.hasPrefix(folder + "/replay-"))
        let printed = lines.all
        #expect(printed.contains { $0.hasPrefix("replay 1: faults 4 → 0 (kept none): does not break") })
        #expect(printed.contains { $0.hasPrefix("shrunk [guardians-honour-expiry] in \(played.count) replays") })
        #expect(FileManager.default.fileExists(atPath: folder + "/shrink.json"))
    }

    @Test("a spent budget, or a stop request, ends with the best scenario so far and says so")
    func stops() throws {
        var original = Scenario()
        original.faults = [
            .init(at: .seconds(2), process: "broker", action: .kill),
            .init(at: .seconds(4), process: "limits", action: .kill),
        ]
        for (budget, stopAfter) in [(Duration.zero, Int.max), (.seconds(60), 4)] {
            let scratch = TempDirectory(prefix: "askrelay-shrink")
            let folder = scratch.path + "/run"
            let log = Collected<Scenario>()
            let lines = Collected<String>()
            let summary = try Shrinker(
                original: original,
                invariant: .guardiansHonourExpiry,
                outputDirectory: folder,
                budget: budget,
                originalReport: "/somewhere/original",
                replay: Self.fakeReplay(log: log),
                progress: { line in lines.append(line) },
                stopRequested: { log.all.count >= stopAfter }
            ).run()
            let printed = lines.all
            if budget == .zero {
                #expect(summary.stopped == .budget)
                #expect(summary.replays.isEmpty)
                #expect(summary.minimal == original && summary.minimalReport == "/somewhere/original")
                #expect(printed.contains("shrink: the budget is spent; stopped with the best scenario so far"))
            } else {
                // faults → none (passes), → [broker] (passes), → [limits] (fails), families → 1 (interrupted: its
                // verdict does not count).
                #expect(summary.stopped == .interrupted)
                #expect(summary.replays.count == 4)
                #expect(summary.replays.last?.error == "interrupted" && summary.replays.last?.failed == false)
                #expect(summary.minimal.faults.map(\.process) == ["limits"])
                #expect(summary.minimal.families == 240)
                #expect(summary.minimalReport == folder + "/replay-03")
                #expect(printed.contains { $0.hasPrefix("replay 4: families 240 → 1: interrupted, ") })
                #expect(printed.contains("shrink: interrupted; stopped with the best scenario so far"))
            }
            #expect(try Scenario.load(path: folder + "/minimal-scenario.json") == summary.minimal)
        }
    }

    @Test("--clean empties a report folder that holds a shrink folder (simulate --shrink wrote it)")
    func cleanTakesTheShrinkFolder() throws {
        let scratch = TempDirectory(prefix: "askrelay-shrink")
        let folder = scratch.path + "/run"
        try FileManager.default.createDirectory(atPath: folder + "/shrink/replay-01", withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: folder + "/report.json"))
        try ReportFolder.prepare(folder, clean: true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).isEmpty)
    }

    @Test("the target: the first broken invariant, or the one named if it broke; refused when none broke")
    func target() throws {
        let result = InvariantResult(
            violations: [InvariantViolation(.endsExactlyOnce, "a"), InvariantViolation(.guardiansHonourExpiry, "b")],
            checked: Invariant.allCases,
            notes: []
        )
        #expect(try Shrinker.target(result, named: nil) == .endsExactlyOnce)
        #expect(try Shrinker.target(result, named: "guardians-honour-expiry") == .guardiansHonourExpiry)
        #expect(throws: ShrinkError.self) { try Shrinker.target(result, named: "no-answer-after-expiry") }
        #expect(throws: ShrinkError.self) {
            try Shrinker.target(InvariantResult(violations: [], checked: [], notes: []), named: nil)
        }
    }
}

extension ShrinkerTests {
    @Test("link faults shrink like the others: the unrelated ones go, the one that matters moves earlier")
    func shrinksLinkFaults() throws {
        let scratch = TempDirectory(prefix: "askrelay-shrink")
        defer { scratch.cleanup() }
        let folder = scratch.path + "/run"
        var original = Scenario()
        original.faults = [
            .init(at: .seconds(1), link: "parent-1", action: .partition, direction: .toBroker, healAfter: .seconds(3)),
            .init(at: .seconds(2), link: "child-2", action: .reset),
            .init(at: .seconds(4), link: "limits", action: .delay, delay: .milliseconds(100)),
            .init(at: .seconds(5), link: "parent-2", action: .stall, healAfter: .seconds(1)),
        ]
        let log = Collected<Scenario>()
        let summary = try Shrinker(
            original: original,
            invariant: .guardiansHonourExpiry,
            outputDirectory: folder,
            budget: .seconds(60),
            replay: Self.fakeReplay(log: log),
            progress: { _ in }
        ).run()
        let minimal = summary.minimal
        #expect(minimal.faults.count == 1, "\(minimal.faults)")
        let kept = try #require(minimal.faults.first)
        #expect(kept.process == "limits" && kept.action == .delay && kept.delay == .milliseconds(100))
        #expect(kept.at == .zero)
        #expect(summary.removed.first == "faults 4 → 1 (3 removed)")
        #expect(try Scenario.load(path: folder + "/minimal-scenario.json") == minimal)
    }
}
