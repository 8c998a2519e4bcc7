import AskBasics
import AskCLI
import AskLogging
import AskBroker
import AskLinks
import AskProtocol
import AskRelayProcesses
import Foundation
import SQLite
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Plays a scenario's fault schedule while the children play, and returns once every child process has ended by
/// itself and every fault has played out.
///
/// Every fault is an independent event on one process. A restart waits for that process's exit only, a restarted
/// process's ready line is awaited with a deadline of its own, a `run` command runs on a thread of its own: none of
/// them holds up another fault or another process. One loop wakes at the next due time or on any process event
/// (an exit, a stdout line, a finished command); nothing sleeps.
///
/// A child process still running `duration` plus ``Scenario/drainBound`` after its start is told to finish with
/// SIGTERM; its in-flight flows are then lost, which ``interruptedRuns(children:endTerminated:)`` reports.
final class FaultRunner {
    struct Step {
        var at: Duration
        var process: String
        var action: Action
        /// The scenario fault it plays (its index in `faults`); `nil` for a resume or an undo.
        var fault: Int? = nil
    }

    enum Action {
        case signal(Int32, restartAfter: Duration?)
        /// SIGKILL of a process under the fault VFS (its unsynced writes are lost), then the journal's check.
        case powerCut(restartAfter: Duration?)
        case resume
        case run([String], undo: [String]?, undoAfter: Duration)
        case undo(Int)
        /// A fault on the process's link to the broker, healed after the duration (or at the end of the run).
        case link(LinkFault, healAfter: Duration?)
        /// Every connection of the process's link reset.
        case linkReset
        /// `add-broker` or `remove-broker` (``FaultRunner+Brokers.swift``).
        case brokers
    }

    /// A process that a fault ended (or is ending), to be started again `after` its exit.
    struct PendingRestart {
        var after: Duration
        var signalledAt: ContinuousClock.Instant
        var exitedAt: ContinuousClock.Instant?
        var escalated = false
    }

    let supervisor: ProcessSupervisor
    var processes: [String: SupervisedProcess]
    let children: [SupervisedProcess]
    let start: ContinuousClock.Instant
    let scenario: Scenario
    let readyTimeout: Duration
    let drainTimeout: Duration
    let logger: AskLogger
    let undos: PendingUndos
    let commands = CommandRuns()
    /// Each broker's journal folder, for the integrity check after its power cuts.
    let journalDirectories: [String: String]
    /// Each worker process's link to the broker, when the scenario has link faults.
    let links: [String: FaultLink]
    /// `trace/simulate.jsonl`: a `fault` line per fault played, restart and continue (docs/tracing.md,
    /// "Recording"); `nil` with `--no-trace`.
    let trace: TraceLog?

    private(set) var notes: [String] = []
    /// Every power cut played, with the journal's `integrity_check` just after it.
    private(set) var powerCuts: [PowerCutCheck] = []
    /// Pids of child runs told to finish because they outlived `duration` plus the drain bound.
    private(set) var endTerminated: Set<pid_t> = []
    /// Every fault of the schedule, as played (or skipped), for the coverage.
    private(set) var plays: [FaultPlay] = []
    private var steps: [Step]
    private var restarts: [String: PendingRestart] = [:]
    private var readyWaits: [String: ContinuousClock.Instant] = [:]
    /// Per process, the end of the longest SIGSTOP in force (overlapping stops end with the last one).
    private var stoppedUntil: [String: Duration] = [:]
    /// Per child process, when its current run started playing (its own `--duration` counts from there).
    private var playingSince: [String: ContinuousClock.Instant] = [:]
    /// Children told to finish, and when they are killed if they have not.
    private var finishing: [String: ContinuousClock.Instant] = [:]
    private var crashRestarted = false
    /// How a broker change starts a broker and reaches the admin endpoints; `nil` when the run changes no list.
    let brokerLauncher: BrokerLauncher?
    /// The broker list after the changes played so far (`nil`: the one the run started with).
    var currentList: BrokerList?
    /// The epoch of the last list change.
    var epoch: Int64 = 0
    /// The broker change running, when it started, and its schedule time: one at a time.
    var brokerChange: (BrokerChangeRun, ContinuousClock.Instant, Duration)?
    /// Every broker change played, for the report.
    var listChanges: [BrokerListChange] = []

    init(
        supervisor: ProcessSupervisor,
        children: [SupervisedProcess],
        start: ContinuousClock.Instant,
        options: SimulationOptions,
        logger: AskLogger,
        undos: PendingUndos,
        journalDirectories: [String: String] = [:],
        links: [String: FaultLink] = [:],
        trace: TraceLog? = nil,
        brokerLauncher: BrokerLauncher? = nil
    ) {
        self.brokerLauncher = brokerLauncher
        self.journalDirectories = journalDirectories
        self.links = links
        self.trace = trace
        self.supervisor = supervisor
        self.children = children
        self.start = start
        self.scenario = options.scenario
        self.readyTimeout = options.readyTimeout
        self.drainTimeout = options.drainTimeout
        self.logger = logger
        self.undos = undos
        processes = Dictionary(supervisor.all.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        steps = options.scenario.faults.map { fault in
            switch fault.action {
            case .run:
                Step(
                    at: fault.at,
                    process: "",
                    action: .run(fault.command ?? [], undo: fault.undo, undoAfter: fault.undoAfter ?? .seconds(1))
                )
            case .kill:
                Step(at: fault.at, process: fault.process, action: .signal(SIGKILL, restartAfter: fault.restartAfter))
            case .term:
                Step(at: fault.at, process: fault.process, action: .signal(SIGTERM, restartAfter: fault.restartAfter))
            case .powerCut:
                Step(at: fault.at, process: fault.process, action: .powerCut(restartAfter: fault.restartAfter))
            case .stop:
                Step(
                    at: fault.at,
                    process: fault.process,
                    action: .signal(SIGSTOP, restartAfter: fault.continueAfter ?? .seconds(1))
                )
            case .partition, .delay, .stall, .bandwidth, .drop, .duplicate, .delayMessage:
                Step(
                    at: fault.at,
                    process: fault.process,
                    action: .link(
                        Self.linkFault(fault, seed: Self.messageSeed(options.scenario)),
                        healAfter: fault.healAfter
                    )
                )
            case .reset:
                Step(at: fault.at, process: fault.process, action: .linkReset)
            case .addBroker, .removeBroker:
                Step(at: fault.at, process: fault.process, action: .brokers)
            }
        }
        // Each step of a scenario fault knows which one it is (for the coverage): one step per fault, in order.
        for index in steps.indices { steps[index].fault = index }
        for child in children { playingSince[child.name] = start }
    }

    /// Runs until every child process has ended and nothing is pending.
    /// - Throws: on interruption, a failed `run` command, or a restarted process that does not get ready.
    func run() throws {
        let crashingBroker = scenario.brokerCrashAt == nil ? nil : processes["broker"]
        while true {
            steps.sort { $0.at < $1.at }
            _ = supervisor.wait(until: nextWake()) {
                for (name, restart) in restarts where restart.exitedAt == nil {
                    if processes[name]?.exitStatusUnlocked != nil { return true }
                }
                for name in readyWaits.keys where processes[name]?.readinessUnlocked() != .waiting { return true }
                if !crashRestarted, crashingBroker?.exitStatusUnlocked != nil,
                    crashingBroker?.expectedSignalUnlocked == nil
                {
                    return true
                }
                if commands.hasNews { return true }
                if brokerChange?.0.result != nil { return true }
                return children.allSatisfy { $0.exitStatusUnlocked != nil } && nothingPending
            }
            // The run turns this into a ``SimulationInterrupted`` that says what it cleaned up.
            if supervisor.interrupted != nil { throw CancellationError() }
            let now = ContinuousClock.now
            try collectCommands(now)
            try collectBrokerChange(now)
            // The broker's own crash, not the end of a fault's signal (that fault restarts it, if it says so).
            if !crashRestarted, let broker = crashingBroker, let exit = broker.exitStatus,
                broker.incarnations.last?.expectedSignal == nil
            {
                crashRestarted = true
                notes.append(
                    "the broker crashed at --crash-at \(scenario.brokerCrashAt ?? "") (\(exit)) and was restarted on its journal"
                )
                logger.notice("broker crashed at its crash point; restarting", metadata: ["exit": "\(exit)"])
                if exit == .signaled(SIGKILL) { broker.expectExit(by: SIGKILL) }
                restarts["broker"] = PendingRestart(after: .zero, signalledAt: now, exitedAt: now)
            }
            try playRestarts(now)
            try checkReadyWaits(now)
            finishChildren(now)
            if children.allSatisfy({ !$0.isRunning }) && nothingPending {
                for step in steps where !isUndo(step) {
                    skipped(step, "every child had finished")
                    notes.append(
                        "fault at \(step.at.text) (\(step.process.isEmpty ? "run" : step.process)) not played: every child had finished"
                    )
                }
                return
            }
            while let step = steps.first, start + step.at <= ContinuousClock.now {
                steps.removeFirst()
                if case .brokers = step.action, brokerChange != nil {
                    // One list change at a time: this one waits for the running one, the other faults do not.
                    var later = step
                    later.at = ContinuousClock.now - start + .milliseconds(50)
                    steps.append(later)
                    steps.sort { $0.at < $1.at }
                    if steps.first?.at == later.at, steps.count == 1 || steps[1].at > later.at { break }
                    continue
                }
                try play(step, now: ContinuousClock.now)
            }
        }
    }

    private func isUndo(_ step: Step) -> Bool {
        if case .undo = step.action { return true }
        if case .resume = step.action { return true }
        return false
    }

    /// Nothing a fault started is still playing out (a restart, a ready line, a command).
    private var nothingPending: Bool {
        restarts.isEmpty && readyWaits.isEmpty && commands.isIdle && brokerChange == nil
    }

    private func drainDeadline(_ child: String) -> ContinuousClock.Instant {
        (playingSince[child] ?? start) + scenario.duration + scenario.drainBound
    }

    private func nextWake() -> ContinuousClock.Instant {
        var times: [ContinuousClock.Instant] = steps.first.map { [start + $0.at] } ?? []
        for restart in restarts.values {
            if let exitedAt = restart.exitedAt {
                times.append(exitedAt + restart.after)
            } else if !restart.escalated {
                times.append(restart.signalledAt + drainTimeout)
            }
        }
        times += readyWaits.values
        times += finishing.values
        for child in children where child.isRunning && finishing[child.name] == nil && restarts[child.name] == nil {
            times.append(drainDeadline(child.name))
        }
        return times.min() ?? ContinuousClock.now + .seconds(1)
    }

    // MARK: restarts and ready lines

    private func playRestarts(_ now: ContinuousClock.Instant) throws {
        for (name, var restart) in restarts {
            guard let process = processes[name] else { continue }
            if restart.exitedAt == nil {
                if !process.isRunning {
                    restart.exitedAt = now
                } else if !restart.escalated && now >= restart.signalledAt + drainTimeout {
                    notes.append("\(name) did not exit within \(drainTimeout.text) of the fault's signal; killed")
                    process.signal(SIGKILL, expected: true)
                    restart.escalated = true
                }
                restarts[name] = restart
            }
            guard let exitedAt = restart.exitedAt, now >= exitedAt + restart.after else { continue }
            restarts[name] = nil
            logger.notice("fault: restart", metadata: ["process": "\(name)", "at": "\((now - start).text)"])
            traceFault("restart", to: name)
            try process.restart()
            readyWaits[name] = now + readyTimeout
            if playingSince[name] != nil { playingSince[name] = now }
        }
    }

    private func checkReadyWaits(_ now: ContinuousClock.Instant) throws {
        for (name, deadline) in readyWaits {
            guard let process = processes[name] else { continue }
            switch process.readiness() {
            case .ready:
                readyWaits[name] = nil
                logger.notice("fault: ready again", metadata: ["process": "\(name)", "at": "\((now - start).text)"])
            case .exited(let status):
                readyWaits[name] = nil
                // Ended by another fault before it got ready: that fault's own restart (if any) takes over.
                if process.incarnations.last?.expectedSignal != nil { continue }
                let log = process.logPath.map { " (log: \($0))" } ?? ""
                throw SupervisorError(
                    process: name,
                    "exited (\(status)) after its restart, before printing 'ready ...'\(log)\(process.tail())"
                )
            case .waiting:
                guard now >= deadline else { continue }
                let log = process.logPath.map { " (log: \($0))" } ?? ""
                throw SupervisorError(
                    process: name,
                    "did not print 'ready ...' within \(readyTimeout.text) of its restart\(log)\(process.tail())"
                )
            }
        }
    }

    /// The bounded end of a child's play: SIGTERM once it outlived its duration and the drain bound, SIGKILL if it
    /// still runs a grace and the drain timeout later.
    private func finishChildren(_ now: ContinuousClock.Instant) {
        for child in children where child.isRunning {
            if let killAt = finishing[child.name] {
                guard now >= killAt else { continue }
                notes.append("\(child.name) did not finish within \(drainTimeout.text) of SIGTERM; killed")
                child.signal(SIGKILL, expected: true)
                finishing[child.name] = .now + .seconds(3600)  // killed: only its exit is awaited now
                continue
            }
            guard now >= drainDeadline(child.name), restarts[child.name] == nil else { continue }
            notes.append(
                "\(child.name) was still playing \(scenario.drainBound.text) after its duration (\(scenario.duration.text)) ended, longer than any flow can take, and was told to finish (SIGTERM)"
            )
            if let pid = child.pid { endTerminated.insert(pid) }
            child.signal(SIGTERM, expected: true)
            finishing[child.name] = now + scenario.grace + drainTimeout
        }
        for child in children where !child.isRunning { finishing[child.name] = nil }
    }

    // MARK: faults

    private func play(_ step: Step, now: ContinuousClock.Instant) throws {
        switch step.action {
        case .brokers:
            guard let index = step.fault else { return }
            try playBrokerChange(step, fault: scenario.faults[index], now: now)
            return
        case .run(let command, let undo, let undoAfter):
            logger.notice(
                "fault: run",
                metadata: ["command": "\(command.joined(separator: " "))", "at": "\(step.at.text)"]
            )
            played(step, now)
            let token = undo.map { undos.add($0) }
            commands.launch(command, step: step.at, undo: token.map { ($0, undoAfter) }, supervisor: supervisor)
            return
        case .undo(let token):
            guard let command = undos.take(token) else { return }
            logger.notice(
                "fault: undo",
                metadata: ["command": "\(command.joined(separator: " "))", "at": "\(step.at.text)"]
            )
            commands.launch(command, step: step.at, undo: nil, supervisor: supervisor)
            return
        case .link, .linkReset:
            let targets = linkTargets(step)
            guard !targets.isEmpty else {
                notes.append("fault at \(step.at.text): no link of '\(step.process)' in this run; skipped")
                skipped(step, "no link of '\(step.process)' in this run")
                return
            }
            played(step, now)
            var metadata: AskLogger.Metadata = [
                "links": "\(targets.map(\.name).joined(separator: ","))", "at": "\(step.at.text)",
                "played": "\((now - start).text)",
            ]
            if case .link(let fault, let healAfter) = step.action {
                metadata["fault"] = "\(fault)"
                metadata["heal_after"] = "\(healAfter?.text ?? "end of run")"
                logger.notice("fault: link", metadata: metadata)
                for link in targets { link.apply(fault, for: healAfter) }
            } else {
                metadata["connections"] = "\(targets.map { $0.reset() }.reduce(0, +))"
                logger.notice("fault: link reset", metadata: metadata)
            }
            return
        case .signal, .powerCut, .resume: break
        }
        guard let process = processes[step.process] else {
            notes.append("fault at \(step.at.text): no process '\(step.process)' in this run; skipped")
            skipped(step, "no process '\(step.process)' in this run")
            return
        }
        switch step.action {
        case .resume:
            // Overlapping stops: the process continues when the last of them ends.
            guard let until = stoppedUntil[step.process], step.at >= until else { return }
            stoppedUntil[step.process] = nil
            traceFault("continue", to: step.process)
            logger.notice(
                "fault: continue",
                metadata: ["process": "\(step.process)", "at": "\(step.at.text)", "played": "\((now - start).text)"]
            )
            process.signal(SIGCONT)
        case .signal(let number, let follow):
            logger.notice(
                "fault",
                metadata: [
                    "process": "\(step.process)", "signal": "\(signalName(number))", "at": "\(step.at.text)",
                    "played": "\((now - start).text)",
                ]
            )
            guard process.isRunning else {
                let why = restarts[step.process] != nil ? "was down, its restart pending" : "had already exited"
                notes.append("fault at \(step.at.text): \(step.process) \(why); \(signalName(number)) skipped")
                skipped(step, "\(step.process) \(why)")
                return
            }
            played(step, now)
            if number == SIGSTOP {
                process.signal(SIGSTOP)
                let until = step.at + (follow ?? .seconds(1))
                stoppedUntil[step.process] = max(stoppedUntil[step.process] ?? .zero, until)
                steps.append(Step(at: until, process: step.process, action: .resume))
                return
            }
            process.signal(number, expected: true)  // SIGKILL and SIGTERM also continue a stopped process
            ended(step.process, restartAfter: follow, now: now)
        case .powerCut(let follow):
            logger.notice(
                "fault: power cut",
                metadata: ["process": "\(step.process)", "at": "\(step.at.text)", "played": "\((now - start).text)"]
            )
            guard process.isRunning else {
                let why = restarts[step.process] != nil ? "was down, its restart pending" : "had already exited"
                notes.append("fault at \(step.at.text): \(step.process) \(why); power cut skipped")
                skipped(step, "\(step.process) \(why)")
                return
            }
            played(step, now)
            // The fault VFS holds every write since the last fsync in the process: SIGKILL loses them.
            process.signal(SIGKILL, expected: true)
            ended(step.process, restartAfter: follow, now: now)
            // A SIGKILLed process ends at once; its files are then what the disk kept.
            _ = try? process.waitForExit(timeout: .seconds(10))
            let integrity =
                journalDirectories[step.process].map(Self.journalIntegrity) ?? ["no journal folder for this process"]
            powerCuts.append(PowerCutCheck(process: step.process, at: (now - start).text, integrity: integrity))
        case .run, .undo, .link, .linkReset, .brokers: break
        }
    }

    /// The links a link fault's step acts on: those of its process (or group), to its shard when it names one.
    private func linkTargets(_ step: Step) -> [FaultLink] {
        guard let index = step.fault else { return [] }
        return linkTargets(of: index)
    }

    private func linkTargets(of index: Int) -> [FaultLink] {
        let fault = scenario.faults[index]
        return links.sorted { $0.key < $1.key }.compactMap { name, link in
            let parts = name.split(separator: "@", maxSplits: 1).map(String.init)
            guard parts.count == 2, fault.targets(parts[0]) else { return nil }
            if let shard = fault.shard, shard != parts[1] { return nil }
            return link
        }
    }

    /// The seed of every message fault's draws in a run of `scenario`.
    static func messageSeed(_ scenario: Scenario) -> UInt64 { SeedDerivation.seed(scenario.seed, "link-fault") }

    /// Reads, once the play ended, what each message fault that played matched and took on its links (before the
    /// links heal and stop): its coverage.
    func countMessages() {
        for index in plays.indices where plays[index].playedAt != nil && plays[index].fault.action.isMessage {
            guard case .message(let fault) = Self.linkFault(plays[index].fault, seed: Self.messageSeed(scenario))
            else { continue }
            var matched = 0
            var taken = 0
            for link in linkTargets(of: plays[index].index) {
                let counters = link.counters.messageFaults[fault] ?? LinkMessageCounters()
                matched += counters.matched
                taken += counters.taken
            }
            plays[index].messages = (matched, taken)
        }
    }

    /// The link fault a scenario fault plays (validated: `delay` has its delay, `bandwidth` its rate).
    /// - Parameter seed: the seed of a message fault's draws (one per run and scenario seed: the same run takes the
    ///   same messages).
    static func linkFault(_ fault: Scenario.Fault, seed: UInt64 = 0) -> LinkFault {
        let direction: LinkDirection =
            switch fault.direction ?? .both {
            case .both: .both
            case .toBroker: .toBroker
            case .fromBroker: .fromBroker
            }
        func message(_ action: LinkMessageFault.Action) -> LinkFault {
            .message(
                LinkMessageFault(
                    action,
                    direction,
                    command: fault.messageCommand.flatMap(Scenario.messageCommand),
                    kind: fault.kind,
                    probability: fault.probability ?? 1,
                    count: fault.count,
                    seed: seed
                )
            )
        }
        switch fault.action {
        case .delay: return .delay(fault.delay ?? .zero, jitter: fault.jitter ?? .zero, direction)
        case .stall: return .stall
        case .bandwidth: return .bandwidth(bytesPerSecond: fault.bytesPerSecond ?? 1, direction)
        case .drop: return message(.drop)
        case .duplicate: return message(.duplicate)
        case .delayMessage: return message(.delay(fault.delay ?? .zero))
        default: return .partition(direction)
        }
    }

    /// Notes that the scenario fault `step` plays now.
    func played(_ step: Step, _ now: ContinuousClock.Instant) {
        guard let index = step.fault else { return }
        let fault = scenario.faults[index]
        plays.append(FaultPlay(index: index, fault: fault, playedAt: now - start))
        // A link fault names the message kind (or command) it takes, when it takes only some.
        traceFault(fault.action.rawValue, to: step.process, kind: fault.kind ?? fault.messageCommand)
    }

    /// A `fault` line in `trace/simulate.jsonl`, written at once: `code` the action, `to` the process (or group).
    private func traceFault(_ action: String, to process: String, kind: String? = nil) {
        guard let trace else { return }
        trace.record(.fault, kind: kind, from: "simulate", to: process.isEmpty ? nil : process, code: action)
        trace.flush()
    }

    /// Notes that the scenario fault `step` did not play, and why.
    private func skipped(_ step: Step, _ why: String) {
        guard let index = step.fault else { return }
        plays.append(FaultPlay(index: index, fault: scenario.faults[index], playedAt: nil, skipped: why))
    }

    /// Bookkeeping for a process a fault just ended: no stop, drain or ready wait is pending for it any more; with
    /// `restartAfter` it starts again that long after its exit.
    func ended(_ name: String, restartAfter follow: Duration?, now: ContinuousClock.Instant) {
        stoppedUntil[name] = nil
        finishing[name] = nil
        readyWaits[name] = nil
        if let follow, restarts[name] == nil {
            restarts[name] = PendingRestart(after: follow, signalledAt: now)
        }
    }

    /// `PRAGMA integrity_check` of a copy of the journal's files in `directory` (the copy keeps the check from
    /// touching what the restarted broker reads): `["ok"]` when sound.
    static func journalIntegrity(_ directory: String) -> [String] {
        let files = FileManager.default
        let journal = (directory as NSString).appendingPathComponent(Journal.fileName)
        guard files.fileExists(atPath: journal) else { return ["the journal file \(journal) is gone"] }
        do {
            let scratch = try ScratchFolder(prefix: "askrelay-power-cut")
            defer { scratch.remove() }
            let copy = scratch.path
            for suffix in ["", "-wal"] where files.fileExists(atPath: journal + suffix) {
                try files.copyItem(
                    atPath: journal + suffix,
                    toPath: (copy as NSString).appendingPathComponent(Journal.fileName + suffix)
                )
            }
            let database = try Database(path: (copy as NSString).appendingPathComponent(Journal.fileName))
            return try database.query("PRAGMA integrity_check") { $0.text(at: 0) }
        } catch {
            return ["cannot check the journal: \(error)"]
        }
    }

    private func collectCommands(_ now: ContinuousClock.Instant) throws {
        for finished in commands.takeFinished() {
            logger.notice(
                "fault: run done",
                metadata: [
                    "process": "command", "at": "\(finished.step.text)",
                    "played": "\((finished.endedAt - start).text)",
                ]
            )
            if let error = finished.error { throw error }
            if let (token, after) = finished.undo {
                steps.append(Step(at: max(finished.step + after, now - start), process: "", action: .undo(token)))
            }
        }
    }

    // MARK: what the checker needs

    /// Every run of a child or parent process that our signal ended (a fault, or the end of a drain that took too
    /// long), with the span of time in which the broker may have recorded its questions or answers: from its start
    /// until the next run of the process registered.
    /// - Parameter processes: child processes (`child-<n>`, ids `c<n>-`) or parent processes (`parent-<n>`, `g<n>-`).
    static func interruptedRuns(_ processes: [SupervisedProcess], endTerminated: Set<pid_t> = []) -> [InterruptedRun] {
        var runs: [InterruptedRun] = []
        for child in processes {
            let parts = child.name.split(separator: "-")
            guard parts.count == 2, let index = Int(parts[1]) else { continue }
            let prefix = parts[0] == "parent" ? WorkerPlan.guardianPrefix(index) : WorkerPlan.childPrefix(index)
            let incarnations = child.incarnations
            for (position, run) in incarnations.enumerated() {
                guard let signal = run.expectedSignal, run.exit != nil else { continue }
                let atEnd = endTerminated.contains(run.pid)
                runs.append(
                    InterruptedRun(
                        process: child.name,
                        idPrefix: prefix,
                        from: run.startedAt,
                        // A later run asks or answers only once registered (its ready line), while this run's
                        // last messages may reach a broker that was stopped or slow only after the later run began.
                        until: incarnations[(position + 1)...].lazy.compactMap(\.readyAt).first,
                        cause: atEnd
                            ? "told to finish (SIGTERM) after its drain bound"
                            : "\(signal == SIGKILL ? "killed" : "terminated") by the fault schedule"
                                + " (\(signalName(signal)))"
                    )
                )
            }
        }
        return runs
    }
}

/// `run` fault commands running on threads of their own, and their results.
final class CommandRuns: Sendable {
    struct Finished: @unchecked Sendable {  // @unchecked: `error` is a SupervisorError, itself Sendable.
        var step: Duration
        var undo: (token: Int, after: Duration)?
        var error: (any Error)?
        /// When the command ended.
        var endedAt: ContinuousClock.Instant
    }

    private let state = Mutex<(running: Int, finished: [Finished])>((0, []))

    var isIdle: Bool { state.withLock { $0.running == 0 && $0.finished.isEmpty } }
    var hasNews: Bool { state.withLock { !$0.finished.isEmpty } }

    func launch(
        _ command: [String],
        step: Duration,
        undo: (token: Int, after: Duration)?,
        supervisor: ProcessSupervisor
    ) {
        state.withLock { $0.running += 1 }
        startThread(name: "sim.fault-command") { [self] in
            var failure: (any Error)?
            do { try Simulation.runCommand(command) } catch { failure = error }
            state.withLock {
                $0.running -= 1
                $0.finished.append(Finished(step: step, undo: undo, error: failure, endedAt: .now))
            }
            supervisor.poke()
        }
    }

    func takeFinished() -> [Finished] {
        state.withLock { state in
            defer { state.finished = [] }
            return state.finished
        }
    }
}
