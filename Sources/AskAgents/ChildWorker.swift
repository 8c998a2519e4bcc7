import AskBasics
import AskClient
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// What the child worker does: which children, how many flows, and the odds of each turn. Defaults are the
/// documented ones (docs/workers.md, "askrelay-child").
public struct ChildWorkerConfiguration: Sendable {
    public var broker: String
    /// Sharded brokers: when set, replaces `broker`, and each shard of the children's families gets its own
    /// ``AskCenter`` (its own connection).
    public var brokers: BrokerList?
    public var children: [ChildIdentity]
    public var seed: UInt64 = 1
    /// JSON Lines file of ``ChildFlowRecord``s; none when `nil`.
    public var recordsPath: String?
    /// The ``AskCenter``'s response record; in memory when `nil`.
    public var stateDirectory: String?
    /// Flows per child; unlimited when `nil` (then `duration` ends the run).
    public var flows: Int? = 10
    /// How long to keep starting flows; no limit when `nil`.
    public var duration: Duration?
    /// Mean pause between a child's flows (each pause is uniform in 0.5...1.5 times this; the first in 0...1 times).
    public var think: Duration = .milliseconds(100)
    public var cancelProbability = 0.1
    /// Presented questions neither sent nor cancelled (they end as `abandoned` when the pending window closes).
    public var abandonProbability = 0.0
    /// Sent questions the child also cancels at the same moment (a double tap: Send and dismiss at once), racing the
    /// two at the broker: whichever it takes first wins and the other is refused (docs/simulation.md,
    /// `send-racing-cancel`). The flow ends `cancelled` when the cancel won, and goes on as sent when the send did.
    public var raceCancelProbability = 0.0
    public var contactsPerChild = 8
    /// Share of contacts the system knows beforehand (the simulation seeds the limits state with the same list).
    public var knownRatio = 0.2
    /// Share of flows that ask a deliberately invalid question.
    public var invalidRatio = 0.0
    /// Share of communication flows that ask about several people at once.
    public var groupRatio = 0.2
    /// Share of flows that ask about a significant app update instead of people.
    public var appUpdateRatio = 0.1
    /// The product's pending window before scaling.
    public var pendingWindow: Duration = .seconds(48 * 3600)
    /// Divides `pendingWindow` and `expireAfter`.
    public var timeScale = 1.0
    /// When set, every question gets `expirationDate = now + expireAfter / timeScale`.
    public var expireAfter: Duration?
    /// Extra wait after a sent question's expiry before it counts as `expired`.
    public var grace: Duration = .seconds(2)
    public var center = AskCenter.Options()

    public init(broker: String, children: [ChildIdentity]) {
        self.broker = broker
        self.children = children
    }

    /// The pending window after time scaling.
    public var scaledPendingWindow: Duration { Self.scale(pendingWindow, by: timeScale) }

    static func scale(_ duration: Duration, by factor: Double) -> Duration {
        .nanoseconds(Int64(max(1, duration.seconds * 1e9 / factor)))
    }

    /// Problems that make the configuration unusable, in words for an operator.
    public func problems() -> [String] {
        var problems: [String] = []
        if children.isEmpty {
            problems.append("no children: give --child ID@FAMILY or --families and --children-per-family")
        }
        if flows == nil && duration == nil { problems.append("give --flows or --duration (or both)") }
        for (name, p) in [
            ("cancel-probability", cancelProbability), ("abandon-probability", abandonProbability),
            ("race-cancel-probability", raceCancelProbability),
            ("known-ratio", knownRatio), ("invalid-ratio", invalidRatio), ("group-ratio", groupRatio),
            ("app-update-ratio", appUpdateRatio),
        ] where !(0...1).contains(p) {
            problems.append("--\(name) must be between 0 and 1")
        }
        if cancelProbability + abandonProbability > 1 {
            problems.append("--cancel-probability plus --abandon-probability must not exceed 1")
        }
        if !(timeScale > 0 && timeScale.isFinite) { problems.append("--time-scale must be a positive number") }
        if contactsPerChild < 1 { problems.append("--contacts must be at least 1") }
        return problems
    }
}

/// Totals of a child worker run.
public struct ChildWorkerSummary: Sendable, Codable, Hashable {
    /// Flows recorded, by outcome (`FlowOutcome` raw values).
    public var outcomes: [String: Int] = [:]
    /// Responses for questions this run did not ask (asked before a restart) or that arrived after the flow ended.
    public var strayResponses = 0
    public var flows: Int { outcomes.values.reduce(0, +) }

    public init() {}
}

/// The child worker: hosts many children over one ``AskCenter`` per broker shard of their families (one with a
/// single broker) and plays ask flows for each (see ``ChildWorkerConfiguration``), writing a ``ChildFlowRecord``
/// per finished flow.
public final class ChildWorker: Sendable {
    public let configuration: ChildWorkerConfiguration
    /// One ask center per shard of the children's families.
    public let centers: ShardedConnections<AskCenter>
    let logger: AskLogger
    let records: FlowRecordSink
    let router = ResponseRouter()
    /// Every finished flow's stages and outcome, for `--metrics-endpoint`.
    public let flowMetrics = ChildFlowMetrics()
    /// Bumped on every reconnect; each child re-checks its known handles when it sees a new value.
    let reconnectGeneration = Mutex(0)

    /// Opens the records file and the ask centers (which start connecting).
    /// - Throws: an error opening the records file, a state database or a socket.
    public init(configuration: ChildWorkerConfiguration, logger: AskLogger, context: ZMQContext) throws {
        self.configuration = configuration
        self.logger = logger
        records = FlowRecordSink(try JSONLinesWriter(path: configuration.recordsPath))
        centers = try AskCenter.sharded(
            brokers: configuration.brokers ?? BrokerList(single: configuration.broker),
            children: configuration.children,
            stateDirectory: configuration.stateDirectory,
            logger: logger,
            context: ClientContext(context),
            options: configuration.center
        )
    }

    /// The center of `child`'s shard.
    func center(of child: ChildIdentity) -> AskCenter {
        // Every child's shard was opened by `init`.
        (try? centers.member(forFamily: child.family)) ?? centers.opened[0].member
    }

    /// Waits until every center is registered (at least once). - Returns: `false` if `timeout` passed first, or at
    /// once when a connection ended for good (``connectionFailure``).
    public func waitUntilRegistered(timeout: Duration) async -> Bool {
        for (_, center) in centers.opened where !(await center.waitUntilRegistered(timeout: timeout)) { return false }
        return true
    }

    /// Why a center's connection ended by itself (the first, in list order), or `nil`.
    public var connectionFailure: WorkerConnectionError? {
        centers.opened.lazy.compactMap { $0.member.connectionFailure }.first
    }

    /// Plays every child's flows; returns when all are done, or early (without recording unfinished flows) when the
    /// calling task is cancelled.
    public func run() async -> ChildWorkerSummary {
        let deadline = configuration.duration.map { ContinuousClock.now + $0 }
        await withTaskGroup(of: Void.self) { group in
            for (shard, center) in centers.opened {
                // Each center's tasks run on its connection thread (``AskCenter/executor``): a call and its result
                // then cost no thread switch.
                group.addTask(executorPreference: center.executor) {
                    await self.routeResponses(CommunicationTopic.self, center: center)
                }
                group.addTask(executorPreference: center.executor) {
                    await self.routeResponses(SignificantAppUpdateTopic.self, center: center)
                }
                group.addTask {
                    for await count in center.reconnections() {
                        self.logger.notice(
                            "registered again; children re-check known handles",
                            metadata: ["registrations": "\(count)", "shard": "\(shard.name)"]
                        )
                        self.reconnectGeneration.withLock { $0 += 1 }
                    }
                }
            }
            await withTaskGroup(of: Void.self) { children in
                for child in configuration.children {
                    children.addTask(executorPreference: center(of: child).executor) {
                        await self.play(child, deadline: deadline)
                    }
                }
            }
            group.cancelAll()
        }
        var summary = records.summary()
        summary.strayResponses = router.strays
        return summary
    }

    /// Deliveries its ask centers dropped as repeats: responses already recorded, and messages their connections had
    /// already seen (``ReachedSituation/redeliveryDeduplicated``). After ``stop()``, the counts at the stop.
    public func redeliveriesDeduplicated() async -> Int {
        var total = 0
        for (_, center) in centers.opened {
            let counters = await center.counters()
            total += counters.responsesDuplicate + counters.connection.duplicates
        }
        return total
    }

    /// Stops the ask centers and closes the records.
    public func stop() async {
        for (_, center) in centers.opened { await center.stop() }
    }

    private func routeResponses<Topic: QuestionTopic>(_ topic: Topic.Type, center: AskCenter) async {
        for await item in center.responses(for: Topic.self) {
            if Task.isCancelled { break }
            if let anomaly = router.deliver(child: item.child, response: AnyPermissionResponse(item.response)) {
                logger.warning(
                    "response for a finished flow",
                    metadata: ["question": "\(item.response.question.id)", "outcome": "\(anomaly.outcome.rawValue)"]
                )
                records.write(anomaly)
            }
        }
    }

    // MARK: One child

    func play(_ child: ChildIdentity, deadline: ContinuousClock.Instant?) async {
        var random = SeededGenerator(seed: configuration.seed, stream: "flows/\(child.id)")
        let contacts = ContactGenerator.contacts(
            for: child.id,
            seed: configuration.seed,
            count: configuration.contactsPerChild,
            knownRatio: configuration.knownRatio
        )
        var approvals = ContactApprovals(pendingWindow: configuration.scaledPendingWindow)
        let session = center(of: child).child(child.id)
        var seenGeneration = reconnectGeneration.withLock { $0 }
        var flow = 0
        while !Task.isCancelled {
            if let flows = configuration.flows, flow >= flows { break }
            if let deadline, ContinuousClock.now >= deadline { break }
            let pause = configuration.think.seconds * (flow == 0 ? random.unit() : 0.5 + random.unit())
            if pause > 0 { try? await Task.sleep(for: Duration(seconds: pause, rounding: .towardZero)) }
            if Task.isCancelled { break }
            // The duration may have ended during the pause: no new flow then.
            if let deadline, ContinuousClock.now >= deadline { break }
            let generation = reconnectGeneration.withLock { $0 }
            if generation != seenGeneration {
                seenGeneration = generation
                do { try await session.recheckKnownHandles(&approvals) } catch {
                    logger.info(
                        "re-checking known handles failed",
                        metadata: ["child": "\(child.id)", "error": "\(error)"]
                    )
                }
            }
            let plan = FlowPlan.make(
                using: &random,
                contacts: contacts,
                configuration: configuration,
                approvals: approvals
            )
            if let record = await runFlow(
                plan,
                child: child,
                session: session,
                approvals: &approvals,
                random: &random,
                deadline: deadline
            ) {
                records.write(record)
                flowMetrics.record(record)
            }
            flow += 1
        }
    }

    /// Plays one flow. After `deadline` (the end of `duration`) a flow that has not asked yet asks nothing; one that
    /// has asked runs to its end, which its own timeouts and the question's expiry bound (the drain).
    /// - Returns: its record, or `nil` if the task was cancelled before it finished or the flow asked nothing.
    func runFlow(
        _ plan: FlowPlan,
        child: ChildIdentity,
        session: ChildSession,
        approvals: inout ContactApprovals,
        random: inout SeededGenerator,
        deadline: ContinuousClock.Instant? = nil
    ) async -> ChildFlowRecord? {
        var question = plan.question
        var record = ChildFlowRecord(
            question: nil,
            child: child.id,
            family: child.family,
            topic: question.topicID,
            outcome: .refused,
            closedAt: Date()
        )
        var handles = question.topic.handles
        if !plan.invalid && !handles.isEmpty {
            // CommunicationLimits first: no question about people the system already knows.
            do {
                let known = try await session.center.knownHandles(in: Set(handles), child: child.id)
                approvals.markKnown(known)
                if known.count == handles.count {
                    record.outcome = .knownHandle
                    record.closedAt = Date()
                    return record
                }
                if !known.isEmpty, case .communication(var topic) = question.topic {
                    topic.personInformation.removeAll { known.contains($0.handle) }
                    question.topic = .communication(topic)
                    handles = topic.handles
                }
            } catch {
                if Task.isCancelled { return nil }
                logger.info(
                    "known-handles query failed; asking anyway",
                    metadata: ["child": "\(child.id)", "error": "\(error)"]
                )
            }
            // Still waiting on an earlier question about them: ask again once that window has closed.
            let waits = handles.compactMap { handle -> Date? in
                if case .pending(let until) = approvals.status(for: handle) { return until }
                return nil
            }
            if let until = waits.max() {
                let seconds = until.timeIntervalSinceNow
                if seconds > 0 {
                    try? await Task.sleep(for: Duration(seconds: seconds, rounding: .towardZero) + .milliseconds(1))
                }
                if Task.isCancelled { return nil }
                if let deadline, ContinuousClock.now >= deadline { return nil }
            }
        }
        if let expireAfter = configuration.expireAfter {
            question.expirationDate = Date().addingTimeInterval(
                (ChildWorkerConfiguration.scale(expireAfter, by: configuration.timeScale)).seconds
            )
        }
        record.question = question.id
        record.askedAt = Date()
        do {
            try await session.ask(question)
        } catch {
            if Task.isCancelled { return nil }
            approvals.refused(error, questionID: question.id)
            record.askError = error.caseName
            record.closedAt = Date()
            return record
        }
        let presentedAt = Date()
        record.presentedAt = presentedAt
        approvals.presented()
        let until = approvals.asked(
            question.id,
            handles: handles,
            now: presentedAt,
            expirationDate: question.expirationDate
        )
        record.expiresAt = until
        let turn = random.unit()
        if turn < configuration.cancelProbability {
            router.cancelled(question.id)
            do {
                try await session.cancel(question.id)
                record.outcome = .cancelled
            } catch {
                if Task.isCancelled { return nil }
                logger.info("cancel refused", metadata: ["question": "\(question.id)", "error": "\(error)"])
                record.outcome = .abandoned
            }
            approvals.cancelled(question.id)
            record.closedAt = Date()
            router.finished(record)
            return record
        }
        if turn < configuration.cancelProbability + configuration.abandonProbability {
            let seconds = until.timeIntervalSinceNow
            if seconds > 0 { try? await Task.sleep(for: Duration(seconds: seconds, rounding: .towardZero)) }
            if Task.isCancelled { return nil }
            approvals.expired(question.id)
            record.outcome = .abandoned
            record.closedAt = Date()
            router.finished(record)
            return record
        }
        router.expect(question.id)
        // When the child sends, not when the broker's ACK comes back: the broker delivers the question to the
        // guardians in the same turn as that ACK (deliveries first), so a guardian may hold it before the ACK does.
        let sentAt = Date()
        // Drawn only when racing is on, so the seeds of runs without it keep every other draw.
        let racing = configuration.raceCancelProbability > 0 && random.unit() < configuration.raceCancelProbability
        let sent: Result<Void, SheetError>
        if racing {
            let id = question.id
            let send = { () async throws(SheetError) in try await session.send(id) }
            let cancel = { () async throws(SheetError) in try await session.cancel(id) }
            let cancelled: Result<Void, SheetError>
            // The call made here goes out first (the other waits for its task to start): either may win.
            if random.unit() < 0.5 {
                async let sending = Self.outcome(send)
                cancelled = await Self.outcome(cancel)
                sent = await sending
            } else {
                async let cancelling = Self.outcome(cancel)
                sent = await Self.outcome(send)
                cancelled = await cancelling
            }
            if case .success = cancelled {
                // The broker took the cancel first (the send was refused as cancelled): no guardian sees it.
                router.forget(question.id)
                approvals.cancelled(question.id)
                record.outcome = .cancelled
                record.closedAt = Date()
                router.finished(record)
                return record
            }
        } else {
            let id = question.id
            sent = await Self.outcome { () async throws(SheetError) in try await session.send(id) }
        }
        if case .failure(let error) = sent {
            router.forget(question.id)
            if Task.isCancelled { return nil }
            logger.info("send refused", metadata: ["question": "\(question.id)", "error": "\(error)"])
            approvals.expired(question.id)
            if error.code == .expired {
                record.outcome = .abandoned
            } else {
                record.askError = AskError.systemError("").caseName
            }
            record.closedAt = Date()
            router.finished(record)
            return record
        }
        record.sentAt = sentAt
        let wait = max(0, until.timeIntervalSinceNow) + configuration.grace.seconds
        var response = await router.wait(question.id, timeout: Duration(seconds: wait, rounding: .towardZero))
        // No response by the deadline means "expired" only if the broker could have delivered one: a guardian may
        // have answered in time while this connection was cut, and the broker then holds the response until the
        // child is back. So conclude only once the broker has been heard, on a live session, after the deadline
        // and at least half a heartbeat after the session began (it delivers in order, and redelivers what waited
        // right after WELCOME); until then wait for the session to come back, within one more pending window.
        let giveUp = Date().addingTimeInterval(configuration.scaledPendingWindow.seconds)
        let settle = configuration.center.heartbeatInterval.seconds / 2
        let center = session.center
        func brokerHadItsSay() -> Bool {
            center.isConnected
                && center.lastHeardFromBroker > max(until, center.lastRegistration.addingTimeInterval(settle))
        }
        var reconnected = false
        while response == nil && !Task.isCancelled && Date() < giveUp && !brokerHadItsSay() {
            reconnected = true
            if !center.isConnected {
                _ = await center.waitForRegistration(after: center.registrationCount, timeout: configuration.grace)
            }
            response = await router.wait(question.id, timeout: configuration.grace)
        }
        if response == nil && reconnected && !Task.isCancelled {
            // What the broker redelivered after the reconnect may still be on its way to this flow: one grace more.
            response = await router.wait(question.id, timeout: configuration.grace)
        }
        if Task.isCancelled && response == nil { return nil }
        record.closedAt = Date()
        if let response {
            let answer = response.question.choice(withID: response.choice.id)?.answer
            approvals.record(question.id, handles: handles, answer: answer)
            record.outcome = answer == .approval ? .approved : .denied
            record.choiceID = response.choice.id
            record.respondedAt = record.closedAt
            record.responsesSurfaced = 1
        } else {
            approvals.expired(question.id)
            record.outcome = .expired
        }
        router.finished(record)
        return record
    }
}

extension ChildWorker {
    /// A sheet call's result as a value, so two can run at once (``ChildWorkerConfiguration/raceCancelProbability``).
    static func outcome(_ call: () async throws(SheetError) -> Void) async -> Result<Void, SheetError> {
        do {
            try await call()
            return .success(())
        } catch {
            return .failure(error)
        }
    }
}

/// What one flow asks.
struct FlowPlan {
    var question: AnyPermissionQuestion
    var invalid: Bool

    static func make(
        using random: inout SeededGenerator,
        contacts: [GeneratedContact],
        configuration: ChildWorkerConfiguration,
        approvals: ContactApprovals
    ) -> FlowPlan {
        if random.chance(configuration.invalidRatio) {
            let person: CommunicationTopic.PersonInformation
            switch random.next() % 3 {
            case 0: person = .init(handle: CommunicationHandle(value: "", kind: .custom))
            case 1: person = .init(handle: CommunicationHandle(value: "+12", kind: .phoneNumber))
            default: person = .init(handle: CommunicationHandle(value: "not-an-address", kind: .emailAddress))
            }
            return FlowPlan(
                question: AnyPermissionQuestion(topic: .communication(CommunicationTopic(personInformation: [person]))),
                invalid: true
            )
        }
        if random.chance(configuration.appUpdateRatio) {
            let version = 2 + random.next() % 20
            let topic = SignificantAppUpdateTopic(
                description: "Version \(version).0 adds chat with people outside your contacts."
            )
            return FlowPlan(question: AnyPermissionQuestion(topic: .significantAppUpdate(topic)), invalid: false)
        }
        // Prefer people not decided yet; fall back to anyone.
        let open = contacts.filter { !approvals.status(for: $0.handle).isTerminal }
        let pool = open.isEmpty ? contacts : open
        var chosen: [GeneratedContact] = []
        let size = random.chance(configuration.groupRatio) ? min(pool.count, 2 + Int(random.next() % 3)) : 1
        var indices = Array(pool.indices)
        for _ in 0..<size {
            let pick = Int(random.next() % UInt64(indices.count))
            chosen.append(pool[indices.remove(at: pick)])
        }
        var actions: Set<CommunicationTopic.Action> = []
        let actionCount = 1 + Int(random.next() % 3)
        while actions.count < actionCount {
            actions.insert(
                CommunicationTopic.Action.allCases[
                    Int(random.next() % UInt64(CommunicationTopic.Action.allCases.count))
                ]
            )
        }
        let topic = CommunicationTopic(
            personInformation: chosen.map { .init(handle: $0.handle, nameComponents: $0.name) },
            actions: actions
        )
        return FlowPlan(question: AnyPermissionQuestion(topic: .communication(topic)), invalid: false)
    }
}

/// Appends flow records and counts outcomes, from any task.
final class FlowRecordSink: Sendable {
    private struct State {
        var writer: JSONLinesWriter
        var summary = ChildWorkerSummary()
    }

    private let state: Mutex<State>

    init(_ writer: consuming sending JSONLinesWriter) {
        state = Mutex(State(writer: writer))
    }

    func write(_ record: ChildFlowRecord) {
        state.withLock { state in
            state.writer.write(record)
            state.summary.outcomes[record.outcome.rawValue, default: 0] += 1
        }
    }

    func summary() -> ChildWorkerSummary { state.withLock { $0.summary } }
}

/// Matches responses to the flows waiting for them, and notices responses that must not exist.
final class ResponseRouter: Sendable {
    private enum Entry {
        case expecting(response: AnyPermissionResponse?, waiter: CheckedContinuation<AnyPermissionResponse?, Never>?)
        case cancelled
        case finished(ChildFlowRecord)
    }

    private struct State {
        var entries: [UUID: Entry] = [:]
        var strays = 0
    }

    private let state = Mutex(State())

    var strays: Int { state.withLock { $0.strays } }

    /// A flow is about to send this question: hold its response if it comes before the flow waits.
    func expect(_ question: UUID) {
        state.withLock { $0.entries[question] = .expecting(response: nil, waiter: nil) }
    }

    func cancelled(_ question: UUID) {
        state.withLock { $0.entries[question] = .cancelled }
    }

    func forget(_ question: UUID) {
        _ = state.withLock { $0.entries.removeValue(forKey: question) }
    }

    /// The flow ended with `record`; a response arriving later is an anomaly worth a record of its own.
    func finished(_ record: ChildFlowRecord) {
        guard let question = record.question else { return }
        state.withLock { $0.entries[question] = .finished(record) }
    }

    /// A response arrived. - Returns: a record to write when it breaks a rule (a response for a cancelled or
    /// finished flow: the record repeats the flow with `responsesSurfaced` counting this one).
    func deliver(child: String, response: AnyPermissionResponse) -> ChildFlowRecord? {
        let question = response.question.id
        let (waiter, anomaly) = state.withLock {
            state -> (CheckedContinuation<AnyPermissionResponse?, Never>?, ChildFlowRecord?) in
            switch state.entries[question] {
            case .expecting(nil, let waiter?):
                state.entries.removeValue(forKey: question)
                return (waiter, nil)
            case .expecting(nil, nil):
                state.entries[question] = .expecting(response: response, waiter: nil)
                return (nil, nil)
            case .expecting(.some, _):
                state.strays += 1
                return (nil, nil)
            case .cancelled:
                state.strays += 1
                return (nil, nil)
            case .finished(var record):
                state.strays += 1
                record.responsesSurfaced += 1
                record.choiceID = record.choiceID ?? response.choice.id
                state.entries[question] = .finished(record)
                return (nil, record)
            case nil:
                state.strays += 1
                return (nil, nil)
            }
        }
        waiter?.resume(returning: response)
        return anomaly
    }

    /// Waits for the response to `question` (after ``expect(_:)``); `nil` after `timeout` or on cancellation.
    func wait(_ question: UUID, timeout: Duration) async -> AnyPermissionResponse? {
        let timer = Task {
            try? await Task.sleep(for: timeout)
            self.resolve(question)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<AnyPermissionResponse?, Never>) in
                let ready = state.withLock { state -> AnyPermissionResponse?? in
                    guard case .expecting(let response, _) = state.entries[question] else { return .some(nil) }
                    if let response {
                        state.entries.removeValue(forKey: question)
                        return .some(response)
                    }
                    // A cancellation that came before this point found no waiter to end (`onCancel` may run
                    // first): checked under the lock, so no waiter is left for the timer alone (up to the pending
                    // window) to end.
                    if Task.isCancelled { return .some(nil) }
                    state.entries[question] = .expecting(response: nil, waiter: continuation)
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            self.resolve(question)
        }
    }

    /// Ends a wait with no response (timeout or cancellation), also one that has not begun yet.
    private func resolve(_ question: UUID) {
        let waiter = state.withLock { state -> CheckedContinuation<AnyPermissionResponse?, Never>? in
            guard case .expecting(nil, let waiter) = state.entries[question] else { return nil }
            // Still expected: the flow may wait again (after a reconnect); `finished` closes the entry.
            state.entries[question] = .expecting(response: nil, waiter: nil)
            return waiter
        }
        waiter?.resume(returning: nil)
    }
}
