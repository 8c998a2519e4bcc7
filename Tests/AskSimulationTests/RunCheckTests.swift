import AskAgents
import AskModel
import AskTestKit
import Foundation
import Testing

@testable import AskSimulation

/// run-facts.json and the check that reads a run's folder (RunCheck): what `askrelay simulate` and `askrelay check`
/// share.
@Suite("RunCheck: a run's folder alone gives its verdict; another format or a live run is refused")
struct RunCheckTests {
    let scratch = TempDirectory(prefix: "askrelay-run-check")
    var folder: String { scratch.path + "/run" }

    static let start = Date(timeIntervalSince1970: 1_800_000_000.25)

    static func facts(processes: [ProcessExitReport] = [], notes: [String] = []) -> RunFacts {
        RunFacts(
            externalBroker: nil,
            startedAt: start,
            wallSeconds: 12.5,
            playStartedAt: start.addingTimeInterval(1),
            brokerStoppedAt: start.addingTimeInterval(10.123456),
            processes: processes,
            interruptedParentRuns: [],
            interruptedRuns: [
                InterruptedRun(
                    process: "child-1",
                    idPrefix: "c1-",
                    from: start.addingTimeInterval(0.000123),
                    until: start.addingTimeInterval(4.5),
                    cause: "killed by the fault schedule (SIGKILL)"
                )
            ],
            powerCuts: [PowerCutCheck(process: "broker", at: "2s", integrity: ["ok"])],
            notes: notes
        )
    }

    /// One child and one parent process, no journal (durability off), so the records alone are checked.
    static var scenario: Scenario {
        var scenario = Scenario()
        scenario.childProcesses = 1
        scenario.parentProcesses = 1
        scenario.families = 1
        scenario.durability = "off"
        return scenario
    }

    /// A run folder with `scenario.json`, `facts` and one approved flow; its guardian record says `result`.
    func writeRun(facts: RunFacts, answer result: String, scenario: Scenario = scenario) throws {
        try FileManager.default.createDirectory(atPath: folder + "/records", withIntermediateDirectories: true)
        try ReportJSON.simulationFile(scenario).write(to: URL(fileURLWithPath: folder + "/scenario.json"))
        try facts.write(into: folder)
        let question = UUID()
        let asked = Self.start.addingTimeInterval(2)
        let child = ChildFlowRecord(
            question: question,
            child: "c1-1-1",
            family: "f1",
            topic: "communication",
            outcome: .approved,
            choiceID: "askrelay.approve",
            askedAt: asked,
            presentedAt: asked,
            sentAt: asked,
            respondedAt: asked.addingTimeInterval(0.5),
            closedAt: asked.addingTimeInterval(0.5),
            expiresAt: asked.addingTimeInterval(60),
            responsesSurfaced: 1
        )
        let answer = GuardianAnswerRecord(
            question: question,
            guardian: "g1-1-1",
            family: "f1",
            choiceID: "askrelay.approve",
            receivedAt: asked.addingTimeInterval(0.1),
            answeredAt: asked.addingTimeInterval(0.2),
            result: result,
            expiresAt: asked.addingTimeInterval(60)
        )
        try Data(try RecordJSON.encode(child) + [0x0A]).write(
            to: URL(fileURLWithPath: folder + "/records/child-1.jsonl")
        )
        try Data(try RecordJSON.encode(answer) + [0x0A]).write(
            to: URL(fileURLWithPath: folder + "/records/parent-1.jsonl")
        )
    }

    /// The refusal `body` threw, if it threw one.
    func refusal(_ body: () throws -> Void) -> RunCheckError? {
        do {
            try body()
            return nil
        } catch {
            return error as? RunCheckError
        }
    }

    @Test("run-facts.json reads back what was written, dates to the microsecond")
    func roundTrip() throws {
        defer { scratch.cleanup() }
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let written = Self.facts(
            processes: [ProcessExitReport(name: "broker", runs: [.init(pid: 7, signal: 9, expectedSignal: 9)])],
            notes: ["a note"]
        )
        try written.write(into: folder)
        let read = try RunFacts.read(from: folder)
        #expect(read.format == RunFacts.currentFormat)
        #expect(read.processes == written.processes)
        #expect(read.powerCuts == written.powerCuts)
        #expect(read.notes == written.notes)
        #expect(read.wallSeconds == written.wallSeconds)
        let run = try #require(read.interruptedRuns.first)
        let original = try #require(written.interruptedRuns.first)
        #expect(abs(run.from.timeIntervalSince(original.from)) < 0.000_001, "\(run.from) vs \(original.from)")
        #expect(abs((run.until ?? .distantPast).timeIntervalSince(original.until!)) < 0.000_001)
        #expect(abs(read.brokerStoppedAt!.timeIntervalSince(written.brokerStoppedAt!)) < 0.000_001)
        #expect(run.cause == original.cause && run.idPrefix == original.idPrefix)
    }

    @Test("a folder of another format is refused as incompatible, naming the file and what to do")
    func otherFormats() throws {
        defer { scratch.cleanup() }
        try writeRun(facts: Self.facts(), answer: "accepted")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: folder + "/report.json"))
        let path = folder + "/" + RunFacts.fileName
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let current = RunFacts.currentFormat
        for (replacement, words) in [
            ("\"format\" : 0", "format 0"), ("\"format\" : \(current + 1)", "format \(current + 1)"),
            ("\"formerly\" : 1", "no format field"),
        ] {
            try Data(text.replacingOccurrences(of: "\"format\" : \(current)", with: replacement).utf8)
                .write(to: URL(fileURLWithPath: path))
            let error = try #require(refusal { _ = try RunCheck.recheck(folder: folder) }, "\(replacement)")
            #expect(error.kind == .incompatible)
            #expect(error.exitCode == 65)
            #expect(error.message.contains(words) && error.message.contains(path), "\(error)")
            #expect(error.message.contains("askrelay simulate --scenario"), "\(error)")
        }
        // An older build wrote report.json and no run-facts.json at all.
        try FileManager.default.removeItem(atPath: path)
        let older = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(older.kind == .incompatible && older.exitCode == 65)
        #expect(older.message.contains("older askrelay") && older.message.contains(RunFacts.fileName), "\(older)")
        // Neither: the run never finished.
        try FileManager.default.removeItem(atPath: folder + "/report.json")
        let unfinished = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(unfinished.kind == .usage && unfinished.exitCode == 64, "\(unfinished)")
    }

    @Test("no folder, a file, or a folder without scenario.json is bad usage (64)")
    func notARunFolder() throws {
        defer { scratch.cleanup() }
        let missing = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(missing.exitCode == 64 && missing.message.contains("no such folder '\(folder)'"), "\(missing)")
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder))
        let file = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(file.exitCode == 64 && file.message.contains("is a file"), "\(file)")
        try FileManager.default.removeItem(atPath: folder)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let empty = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(empty.exitCode == 64 && empty.message.contains("no scenario.json"), "\(empty)")
    }

    @Test("a folder a live run holds (its simulate.lock) is refused (75) until the lock is released")
    func liveRun() throws {
        defer { scratch.cleanup() }
        var claim: ReportFolderClaim? = try ReportFolder.claim(folder, clean: false)
        try writeRun(facts: Self.facts(), answer: "accepted")
        let error = try #require(refusal { _ = try RunCheck.recheck(folder: folder) })
        #expect(error.kind == .live && error.exitCode == 75, "\(error)")
        #expect(error.message.contains("process \(getpid())"), "\(error)")
        withExtendedLifetime(claim) {}
        claim = nil
        #expect(try RunCheck.recheck(folder: folder).invariants.ok)
    }

    @Test("the verdict comes from the records and the stored facts: an edited record or an unclean exit fails it")
    func verdictFromFolder() throws {
        defer { scratch.cleanup() }
        try writeRun(facts: Self.facts(notes: ["run note"]), answer: "accepted")
        let passing = try RunCheck.recheck(folder: folder)
        #expect(passing.invariants.ok, "\(passing.invariants.violations)")
        #expect(passing.exitCode == 0)
        #expect(passing.notes.first == "run note")
        #expect(passing.flows == 1 && passing.wallSeconds == 12.5)
        #expect(passing.invariants.checked.contains(.journalSurvivesPowerCuts))

        try writeRun(facts: Self.facts(), answer: "already-closed")
        let forged = try RunCheck.recheck(folder: folder)
        #expect(forged.exitCode == 1)
        #expect(forged.invariants.violations.map(\.invariant) == [.responseNeedsAcceptedAnswer])
        #expect(forged.summaryTable.contains("✗ [response-needs-accepted-answer]"))

        let crashed = ProcessExitReport(name: "child-1", runs: [.init(pid: 9, signal: 11)])
        try writeRun(facts: Self.facts(processes: [crashed]), answer: "accepted")
        let unclean = try RunCheck.recheck(folder: folder)
        #expect(unclean.invariants.violations.map(\.invariant) == [.processesExitCleanly])
        #expect(unclean.invariants.violations.first?.processes == ["child-1"])
    }

    @Test("a sharded run's journals are read per shard; a missing one is noted, never created")
    func shardedJournals() throws {
        defer { scratch.cleanup() }
        var scenario = Self.scenario
        scenario.brokers = 2
        scenario.durability = "batch"
        try writeRun(facts: Self.facts(), answer: "accepted", scenario: scenario)
        let report = try RunCheck.recheck(folder: folder)
        let note = "could not read the broker's journal: \(folder)/broker-data-b0 does not exist"
        #expect(report.notes.contains(note), "\(report.notes)")
        #expect(!FileManager.default.fileExists(atPath: folder + "/broker-data-b0"))
        #expect(!FileManager.default.fileExists(atPath: folder + "/broker-data"))
    }
}
