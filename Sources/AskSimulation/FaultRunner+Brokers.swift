import AskBasics
import AskLogging
import AskBroker
import AskProtocol
import AskRelayProcesses
import Foundation
import Synchronization

/// One change of the broker list that a scenario's `add-broker` or `remove-broker` fault played (docs/simulation.md,
/// "Changing the broker list"), as the report shows it.
public struct BrokerListChange: Codable, Sendable, Equatable {
    /// `add-broker` or `remove-broker`.
    public var action: String
    /// The broker added or removed (`broker-b2`).
    public var broker: String
    /// When the fault played, from the start of the play (`2.0s`).
    public var at: String
    /// The list's epoch after the change.
    public var epoch: Int64
    /// The brokers' names before and after.
    public var from: [String]
    public var to: [String]
    /// From the fault to the last family's release (an added broker's start included).
    public var tookMs: Int
    /// Every family that changed broker.
    public var moves: [MovedFamily]

    /// The report's lines: the change, then a line per family moved.
    public var summaryLines: [String] {
        let open = moves.reduce(0) { $0 + $1.openQuestions }
        var lines = [
            "broker change: \(action) \(broker) at \(at): epoch \(epoch), \(from.joined(separator: ",")) → "
                + "\(to.joined(separator: ",")); \(moves.count) famil\(moves.count == 1 ? "y" : "ies") moved in "
                + "\(tookMs) ms, \(open) open question\(open == 1 ? "" : "s") crossed"
        ]
        for move in moves {
            lines.append(
                "  \(move.family) \(move.from) → \(move.to) in \(move.tookMs) ms: \(move.openQuestions) open of "
                    + "\(move.questions) questions, \(move.messages) undelivered messages, "
                    + "\(move.limitsStates ?? 0) children's limits state"
            )
        }
        return lines
    }
}

/// One family a broker change moved.
public struct MovedFamily: Codable, Sendable, Equatable {
    public var family: String
    public var from: String
    public var to: String
    /// From the family's hold to its release at the old broker.
    public var tookMs: Int
    /// The family's flows in flight at the move: its open questions, carried to the new broker.
    public var openQuestions: Int
    /// Question rows carried (open, and closed within the retention).
    public var questions: Int
    /// Undelivered copies carried.
    public var messages: Int
    /// Children whose limits state (their limits worker's row) was carried (absent in facts of older runs).
    public var limitsStates: Int?
}

/// What a broker change needs from the run: each broker's entry and admin endpoint, and how to start a broker and
/// its limits worker for a list.
struct BrokerLauncher {
    let initial: BrokerList
    let entry: (String) -> BrokerEntry
    let admin: (String) -> String
    /// Starts shard `name`'s broker and limits worker, given `list` (returns without waiting for ready lines).
    let start: (String, BrokerList) throws -> [SupervisedProcess]
}

/// A broker change running on a thread of its own (an added broker's ready lines, then the moves), so the fault
/// loop keeps playing the other faults meanwhile; it pokes the supervisor when done.
final class BrokerChangeRun: Sendable {
    let fault: Scenario.Fault
    let to: BrokerList
    let started: [SupervisedProcess]
    private let outcome = Mutex<Result<[Rebalancer.Move], any Error>?>(nil)

    init(
        fault: Scenario.Fault,
        from: BrokerList,
        to: BrokerList,
        epoch: Int64,
        admin: [String: String],
        started: [SupervisedProcess],
        readyTimeout: Duration,
        supervisor: ProcessSupervisor,
        logger: AskLogger
    ) {
        self.fault = fault
        self.to = to
        self.started = started
        startThread(name: "sim.broker-change") { [self] in
            let result = Result<[Rebalancer.Move], any Error> {
                for process in started { try process.waitForLine(timeout: readyTimeout) }
                var options = Rebalancer.Options()
                options.requestTimeout = max(readyTimeout, .seconds(60))
                let rebalancer = try Rebalancer(from: from, to: to, epoch: epoch, admin: admin, options: options)
                return try rebalancer.run { line in logger.notice("rebalance", metadata: ["step": "\(line)"]) }
            }
            outcome.withLock { $0 = result }
            supervisor.poke()
        }
    }

    /// The moves, once done (or what stopped it).
    var result: Result<[Rebalancer.Move], any Error>? { outcome.withLock { $0 } }
}

extension FaultRunner {
    /// Starts a broker change: an added broker and its limits worker start now, and the moves run on a thread.
    func playBrokerChange(_ step: Step, fault: Scenario.Fault, now: ContinuousClock.Instant) throws {
        guard let launcher = brokerLauncher else { return }
        let name = String(fault.process.dropFirst("broker-".count))
        let from = currentList ?? launcher.initial
        var entries = from.entries
        var started: [SupervisedProcess] = []
        if fault.action == .addBroker {
            entries.append(launcher.entry(name))
            let list = try BrokerList(entries)
            started = try launcher.start(name, list)
            for process in started { processes[process.name] = process }
        } else {
            entries.removeAll { $0.name == name }
        }
        let to = try BrokerList(entries)
        played(step, now)
        logger.notice(
            "fault: broker list change",
            metadata: ["action": "\(fault.action.rawValue)", "broker": "\(fault.process)", "to": "\(to)"]
        )
        let admin = Dictionary((from.entries + to.entries).map { ($0.name, launcher.admin($0.name)) }) { first, _ in
            first
        }
        epoch += 1
        brokerChange = (
            BrokerChangeRun(
                fault: fault,
                from: from,
                to: to,
                epoch: epoch,
                admin: admin,
                started: started,
                readyTimeout: readyTimeout,
                supervisor: supervisor,
                logger: logger
            ), now, step.at
        )
    }

    /// A finished broker change: the new list is the run's, a removed broker and its limits worker stop (SIGTERM),
    /// and the report gets the change.
    /// - Throws: what stopped the change (a broker that did not answer, an added broker that did not start).
    func collectBrokerChange(_ now: ContinuousClock.Instant) throws {
        guard let (run, began, at) = brokerChange, let result = run.result else { return }
        brokerChange = nil
        let moves: [Rebalancer.Move]
        do { moves = try result.get() } catch {
            throw SupervisorError(
                process: run.fault.process,
                "\(run.fault.action.rawValue) at \(at.text) failed: \(error)"
            )
        }
        let from = currentList ?? brokerLauncher?.initial
        currentList = run.to
        if run.fault.action == .removeBroker {
            let name = String(run.fault.process.dropFirst("broker-".count))
            for process in [processes[run.fault.process], processes["limits-\(name)"]].compactMap({ $0 })
            where process.isRunning {
                process.signal(SIGTERM, expected: true)
                ended(process.name, restartAfter: nil, now: now)
            }
        }
        let change = BrokerListChange(
            action: run.fault.action.rawValue,
            broker: run.fault.process,
            at: at.text,
            epoch: epoch,
            from: from?.entries.map(\.name) ?? [],
            to: run.to.entries.map(\.name),
            tookMs: Int((now - began).milliseconds),
            moves: moves.map {
                MovedFamily(
                    family: $0.family,
                    from: $0.from,
                    to: $0.to,
                    tookMs: Int($0.took.milliseconds),
                    openQuestions: $0.openQuestions,
                    questions: $0.questions,
                    messages: $0.messages,
                    limitsStates: $0.limitsStates
                )
            }
        )
        listChanges.append(change)
        for line in change.summaryLines { logger.notice("\(line)") }
    }
}
