import AskAgents
import AskBroker
import AskCLI
import AskModel
import AskProtocol
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a run knew only in memory that the invariant checker needs, written into the report folder as
/// `run-facts.json` once every process is stopped and before the check: with it, the records and the journals,
/// the check can be redone from the folder alone (`askrelay check REPORT_DIR`). A versioned file of its own rather
/// than more fields in report.json: report.json is the check's output (for people and tools, and it grows), this is
/// its input, and a folder is checkable even when the run ended before report.json was written.
public struct RunFacts: Codable, Sendable, Equatable {
    /// The file in the report folder.
    public static let fileName = "run-facts.json"
    /// The format this build writes and the only one it reads. Raise it whenever a field is added, removed or
    /// changes meaning; a folder of another format is refused (``RunCheck/incompatibleExitCode``).
    public static let currentFormat = 3

    public var format: Int
    /// The running broker the run used (`--broker`): no journal of it was read. `nil`: simulate started its own.
    public var externalBroker: String?
    public var startedAt: Date
    /// Wall-clock seconds from the first process start to the last exit.
    public var wallSeconds: Double
    /// When the children started playing (every child ready), the origin of the fault schedule.
    public var playStartedAt: Date
    /// When the broker(s) were told to stop at the end of the run.
    public var brokerStoppedAt: Date?
    /// How every run of every process ended.
    public var processes: [ProcessExitReport]
    /// Runs of parent processes our signal ended (see ``InvariantInputs/interruptedParentRuns``).
    public var interruptedParentRuns: [InterruptedRun]
    /// Runs of child processes our signal ended (see ``InvariantInputs/interruptedRuns``).
    public var interruptedRuns: [InterruptedRun]
    /// Every power cut played, with its journal's integrity check.
    public var powerCuts: [PowerCutCheck]
    /// Every fault of the schedule as it played (when, on what) or why it did not, uncounted: the check counts
    /// what each touched (``FaultCoverage/recount(_:scenario:brokers:childRecords:guardianRecords:ledger:)``).
    public var faults: [FaultCoverage]
    /// What the run itself noted (faults, drain), before the check's own notes.
    public var notes: [String]
    /// Every change of the broker list the schedule played (`add-broker`, `remove-broker`), with the moves.
    public var brokerChanges: [BrokerListChange]

    public init(
        externalBroker: String?,
        startedAt: Date,
        wallSeconds: Double,
        playStartedAt: Date,
        brokerStoppedAt: Date?,
        processes: [ProcessExitReport],
        interruptedParentRuns: [InterruptedRun],
        interruptedRuns: [InterruptedRun],
        powerCuts: [PowerCutCheck],
        faults: [FaultCoverage] = [],
        notes: [String],
        brokerChanges: [BrokerListChange] = []
    ) {
        self.brokerChanges = brokerChanges
        format = Self.currentFormat
        self.externalBroker = externalBroker
        self.startedAt = startedAt
        self.wallSeconds = wallSeconds
        self.playStartedAt = playStartedAt
        self.brokerStoppedAt = brokerStoppedAt
        self.processes = processes
        self.interruptedParentRuns = interruptedParentRuns
        self.interruptedRuns = interruptedRuns
        self.powerCuts = powerCuts
        self.faults = faults
        self.notes = notes
    }

    /// Dates to the microsecond, as in the records (`RecordJSON`), so nothing the checker compares is rounded.
    static func encoder() -> JSONEncoder {
        let encoder = WireJSON.makeEncoder(dates: RecordJSON.format)
        encoder.outputFormatting.insert(.prettyPrinted)
        return encoder
    }

    /// Writes `folder/run-facts.json`.
    public func write(into folder: String) throws {
        let data = ReportJSON.collapsingEmptyContainers(try Self.encoder().encode(self))
        try data.write(to: URL(fileURLWithPath: (folder as NSString).appendingPathComponent(Self.fileName)))
    }

    /// Reads `folder/run-facts.json`. - Throws: ``RunCheckError`` when it is missing, of another format or unreadable.
    public static func read(from folder: String) throws(RunCheckError) -> RunFacts {
        let path = (folder as NSString).appendingPathComponent(fileName)
        guard let data = FileManager.default.contents(atPath: path) else {
            let hasReport = FileManager.default.fileExists(
                atPath: (folder as NSString).appendingPathComponent("report.json")
            )
            if hasReport {
                throw RunCheckError(
                    .incompatible,
                    "'\(folder)' was written by an older askrelay (it has report.json but no \(fileName), format "
                        + "\(currentFormat)), so its run cannot be checked again offline: run the scenario again with "
                        + "this build (askrelay simulate --scenario \(folder)/scenario.json)"
                )
            }
            throw RunCheckError(
                .usage,
                "'\(folder)' holds no \(fileName): its run did not finish (interrupted, or a process could not "
                    + "start), so there is nothing to check: give the report folder of a finished askrelay simulate run"
            )
        }
        struct Version: Decodable { var format: Int? }
        let version = try? RecordJSON.decode(Version.self, from: data)
        guard let format = version?.format, format == currentFormat else {
            let found = version.map { $0.format.map { "format \($0)" } ?? "no format field" } ?? "no JSON object"
            let age = (version?.format ?? 0) > currentFormat ? "a newer" : "an older"
            throw RunCheckError(
                .incompatible,
                "\(path) has \(found), but this build reads format \(currentFormat) only: the folder was written by "
                    + "\(age) askrelay; check it with that build, or run the scenario again with this one "
                    + "(askrelay simulate --scenario \(folder)/scenario.json)"
            )
        }
        do { return try RecordJSON.decode(RunFacts.self, from: data) } catch {
            throw RunCheckError(
                .incompatible,
                "\(path) says format \(currentFormat) but does not read as one (\(error)): the file was changed "
                    + "after the run; run the scenario again (askrelay simulate --scenario \(folder)/scenario.json)"
            )
        }
    }
}

/// Why a report folder cannot be checked: what, where and what to do, and the exit code that goes with it.
public struct RunCheckError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        /// Not the folder of a finished run (missing, not a folder, no scenario.json, no run-facts.json).
        case usage
        /// Written by another build: run-facts.json missing beside a report.json, or of another format.
        case incompatible
        /// A live `askrelay simulate` holds the folder.
        case live
    }

    public let kind: Kind
    public let message: String
    public var description: String { message }

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var exitCode: Int32 {
        switch kind {
        case .usage: ExitCode.usage
        case .incompatible: RunCheck.incompatibleExitCode
        case .live: RunCheck.liveRunExitCode
        }
    }
}

/// Reads a finished run's folder — the children's and guardians' records, every shard's journal, run-facts.json —
/// into ``InvariantInputs``, checks them and builds the report. `askrelay simulate` does it right after writing
/// run-facts.json, `askrelay check REPORT_DIR` later, from the folder alone: one function, one verdict.
public enum RunCheck {
    /// `askrelay check`: the folder was written by a build of another format (`EX_DATAERR`).
    public static let incompatibleExitCode: Int32 = 65
    /// `askrelay check`: a live `askrelay simulate` still writes the folder; try again once it ended (`EX_TEMPFAIL`).
    public static let liveRunExitCode: Int32 = 75

    /// The check proper, from what is on disk in `folder` and `facts` (as read back from run-facts.json).
    /// Never starts a process; the report is built, not written.
    public static func report(folder: String, scenario: Scenario, facts: RunFacts) -> SimulationReport {
        // File paths and shard names only: the endpoints of the plan are not used here.
        let plan = WorkerPlan(
            scenario: scenario,
            brokerEndpoint: facts.externalBroker ?? "",
            runDirectory: folder,
            socketDirectory: scenario.brokers > 1 ? "/nonexistent" : nil
        )
        var notes = facts.notes
        var childRecords: [ChildFlowRecord] = []
        var guardianRecords: [GuardianAnswerRecord] = []
        var unreadable = 0
        for index in 1...scenario.childProcesses {
            let read = JSONLinesWriter.read(ChildFlowRecord.self, path: plan.childRecordsPath(index))
            childRecords += read.values
            unreadable += read.unreadable
        }
        for index in 1...scenario.parentProcesses {
            let read = JSONLinesWriter.read(GuardianAnswerRecord.self, path: plan.parentRecordsPath(index))
            guardianRecords += read.values
            unreadable += read.unreadable
        }
        var ledger: [QuestionRecord]?
        if facts.externalBroker == nil {
            if scenario.durability == "off" {
                notes.append("ledger checks skipped: durability 'off' keeps no journal")
            } else {
                // Every shard's journal: a question lives in exactly one of them (its family's shard).
                do {
                    var questions: [QuestionRecord] = []
                    for shard in plan.brokers == nil ? ["b0"] : scenario.allShardNames {
                        let directory = plan.brokerDataDirectory(shard)
                        // A broker the schedule would have added, had the run lasted until then.
                        if scenario.addedShardNames.contains(shard),
                            !FileManager.default.fileExists(atPath: directory)
                        {
                            continue
                        }
                        // Opening a journal creates a missing folder: a check must not.
                        guard FileManager.default.fileExists(atPath: directory) else {
                            throw RunCheckError(.usage, "\(directory) does not exist")
                        }
                        questions += try Journal(
                            directory: directory,
                            durability: Durability(rawValue: scenario.durability) ?? .batch
                        )
                        .loadQuestions(openOnly: false)
                    }
                    ledger = questions
                } catch {
                    notes.append("could not read the broker's journal: \(error)")
                }
            }
        }
        let inputs = InvariantInputs(
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            ledger: ledger,
            processes: facts.processes,
            unreadableLines: unreadable,
            interruptedParentRuns: facts.interruptedParentRuns,
            interruptedRuns: facts.interruptedRuns,
            brokerStoppedAt: facts.brokerStoppedAt,
            powerCuts: facts.powerCuts
        )
        var result = InvariantChecker.check(inputs)
        if ledger == nil && facts.externalBroker == nil && !result.notes.isEmpty {
            result.notes.removeAll { $0.contains("--broker") }
        }
        return SimulationReport.build(
            scenario: scenario,
            broker: facts.externalBroker ?? "internal",
            startedAt: facts.startedAt,
            wallSeconds: facts.wallSeconds,
            childRecords: childRecords,
            guardianRecords: guardianRecords,
            invariants: result,
            processes: facts.processes,
            notes: notes,
            shardFaults: ShardFaultFigures.measure(
                scenario: scenario,
                brokers: plan.brokers,
                playStart: facts.playStartedAt,
                records: childRecords
            ),
            coverage: FaultCoverage.recount(
                facts.faults,
                scenario: scenario,
                brokers: plan.brokers,
                childRecords: childRecords,
                guardianRecords: guardianRecords,
                ledger: ledger,
                brokerChanges: facts.brokerChanges
            ),
            reached: ReachedCount.read(folder: folder, required: scenario.expect.reached),
            brokerChanges: facts.brokerChanges
        )
    }

    /// `askrelay simulate`: reads run-facts.json back (just written into `folder`), then checks as above.
    static func report(folder: String, scenario: Scenario) throws -> SimulationReport {
        report(folder: folder, scenario: scenario, facts: try RunFacts.read(from: folder))
    }

    /// `askrelay check`: a finished run's folder, checked again without starting any process. The folder is held
    /// (a shared lock on its simulate.lock) while it is read, so no run can start in it meanwhile.
    /// - Throws: ``RunCheckError``: not a run's folder, one a live simulate holds, or one of another format.
    public static func recheck(folder: String) throws(RunCheckError) -> SimulationReport {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isFolder) else {
            throw RunCheckError(
                .usage,
                "no such folder '\(folder)': give the report folder of a finished askrelay simulate run (its --report-dir)"
            )
        }
        guard isFolder.boolValue else {
            throw RunCheckError(
                .usage,
                "'\(folder)' is a file, not a folder: give the report folder of a finished askrelay simulate run"
            )
        }
        let hold = try ReadHold(folder)
        defer { withExtendedLifetime(hold) {} }
        let scenarioPath = (folder as NSString).appendingPathComponent("scenario.json")
        guard let scenarioData = FileManager.default.contents(atPath: scenarioPath) else {
            throw RunCheckError(
                .usage,
                "'\(folder)' holds no scenario.json, so it is not the report folder of an askrelay simulate run: give "
                    + "the --report-dir of a finished run"
            )
        }
        let facts = try RunFacts.read(from: folder)
        // Decoded, not validated: the scenario was played, and the checks of what this build can play (a release
        // build refuses power cuts and the test hooks) do not apply to checking it.
        let scenario: Scenario
        do { scenario = try JSONDecoder().decode(Scenario.self, from: scenarioData) } catch {
            throw RunCheckError(
                .incompatible,
                "\(scenarioPath) does not read as a scenario (\(error)): the folder was written by another askrelay "
                    + "or changed after the run; run the scenario again with this build"
            )
        }
        return report(folder: folder, scenario: scenario, facts: facts)
    }

    /// A shared `flock` on the folder's simulate.lock while it is read: refused while a live simulate holds the
    /// exclusive one, and a simulate started meanwhile (`--clean`) is refused. Creates nothing: a folder without
    /// the file has no live run, and a read-only folder can be checked.
    final class ReadHold {
        private let descriptor: Int32?

        init(_ folder: String) throws(RunCheckError) {
            let path = (folder as NSString).appendingPathComponent(ReportFolder.lockName)
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                descriptor = nil
                return
            }
            var result: Int32
            repeat { result = flock(fd, LOCK_SH | LOCK_NB) } while result != 0 && errno == EINTR
            if result != 0 && errno == EWOULDBLOCK {
                var buffer = [UInt8](repeating: 0, count: 32)
                let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
                close(fd)
                let pid = count > 0 ? Int32(String(decoding: buffer[..<count], as: UTF8.self).filter(\.isNumber)) : nil
                let who = pid.map { "process \($0)" } ?? "another process"
                throw RunCheckError(
                    .live,
                    "the report folder '\(folder)' is still being written by \(who) (a live askrelay simulate holds "
                        + "\(path)): check it once that run has ended"
                )
            }
            descriptor = fd
        }

        deinit { if let descriptor { close(descriptor) } }
    }
}
