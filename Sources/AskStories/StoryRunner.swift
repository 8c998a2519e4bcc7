import AskClient
import AskRelayCluster
import AskModel
import AskProtocol
import Foundation
import Synchronization

/// Plays stories: each against fresh processes (``StoryProcesses``, an `AskRelayCluster`), its children in-process
/// with one `AskCenter`, its guardians with one `GuardianCenter`. A story stops at its first failing step, or at an
/// ``interruption``; whatever happens, every process it started is stopped before the next story starts.
public struct StoryRunner: Sendable {
    /// Where the executables are (`askrelay-broker`, `askrelay-limits`); `nil`: where `AskRelayCluster` looks
    /// (`ASKRELAY_BIN_DIR`, else next to the running program).
    public var binDirectory: String?
    /// Each story's logs go to a folder of its own under this one.
    public var logsDirectory: String
    /// Ends the run early (SIGINT, SIGTERM): the story playing is stopped and reported as interrupted, the stories
    /// after it as not run.
    public var interruption: StoryInterruption?

    public init(binDirectory: String?, logsDirectory: String, interruption: StoryInterruption? = nil) {
        self.binDirectory = binDirectory
        self.logsDirectory = logsDirectory
        self.interruption = interruption
    }

    /// Plays `stories` in order, giving `output` each story's lines as it ends (``StoryReport/lines(for:)``), then
    /// the summary, and the run's folder when a story did not pass; `progress` gets `playing 2/5 NAME` when a
    /// story's processes are ready and its steps begin.
    public func run(
        _ stories: [Story],
        output: (String) -> Void,
        progress: (String) -> Void = { _ in }
    ) async -> StoryRun {
        let start = ContinuousClock.now
        var results: [StoryResult] = []
        for (index, story) in stories.enumerated() {
            guard interruption?.signal == nil else {
                results.append(
                    StoryResult(
                        name: story.name,
                        file: story.file,
                        outcome: .notRun,
                        seconds: 0,
                        logs: logs(story, index)
                    )
                )
                continue
            }
            let result = await run(story, index: index) {
                progress("playing \(index + 1)/\(stories.count) \(StoryReport.printable(story.name))")
            }
            for line in StoryReport.lines(for: result) { output(line) }
            results.append(result)
        }
        let run = StoryRun(results: results, seconds: (ContinuousClock.now - start).seconds)
        output(StoryReport.summary(results, seconds: run.seconds))
        if run.exitCode != 0 { output("logs: \(logsDirectory)") }
        return run
    }

    /// The folder of the `index`-th story of the run: `NN-<file name>`.
    private func logs(_ story: Story, _ index: Int) -> String {
        let base = ((story.file as NSString).lastPathComponent as NSString).deletingPathExtension
        let safeName = String(base.prefix(64).map { $0.isLetter || $0.isNumber || $0 == "-" ? $0 : "-" })
        return (logsDirectory as NSString).appendingPathComponent(String(format: "%02d-", index + 1) + safeName)
    }

    /// Plays `story` (the `index`-th of the run, for its logs folder's name); `started` is called when its
    /// processes are ready and its steps begin.
    public func run(_ story: Story, index: Int, started: () -> Void = {}) async -> StoryResult {
        let start = ContinuousClock.now
        let logs = logs(story, index)
        let (outcome, diagram) = await play(story, logs: logs, started: started)
        let elapsed = ContinuousClock.now - start
        return StoryResult(
            name: story.name,
            file: story.file,
            outcome: outcome,
            seconds: elapsed.seconds,
            logs: logs,
            diagram: diagram
        )
    }

    private var isInterrupted: Bool { interruption?.signal != nil }

    /// Plays `story`. - Returns: how it ended, and for a failed step the path of its diagram (``StoryDiagram``)
    /// when one could be written.
    private func play(
        _ story: Story,
        logs: String,
        started: () -> Void
    ) async -> (StoryResult.Outcome, diagram: String?) {
        let processes: StoryProcesses
        do {
            processes = try await StoryProcesses.start(story, logs: logs, binDirectory: binDirectory)
        } catch {
            if isInterrupted { return (.interrupted("while its processes were starting"), nil) }
            return (.error("the processes could not be started: \(error)"), nil)
        }
        if isInterrupted {
            await processes.stop()
            return (.interrupted("while its processes were starting"), nil)
        }
        let session: StorySession
        do {
            session = try await StorySession.start(story, processes: processes)
        } catch {
            await processes.stop()
            return (isInterrupted ? .interrupted("before its first step") : .error("\(error)"), nil)
        }
        started()
        let playing = Task { await session.play(story.steps) }
        // Cancelling ends the step's wait; stopping the clients ends an ask, send or answer waiting for the broker.
        let token = interruption?.onInterrupt {
            playing.cancel()
            Task { await session.stop() }
        }
        let failed = await playing.value
        interruption?.remove(token)
        await session.stop()
        // Stopping the processes flushes their trace files and copies them into the story's folder.
        await processes.stop()
        guard let failed else { return (.passed, nil) }
        if isInterrupted { return (.interrupted("at \(failed.failure.step)"), nil) }
        var diagram: String?
        do { diagram = try StoryDiagram.write(failed, story: story, logs: logs) } catch {
            session.logger.error("the failing step's diagram could not be written: \(error)")
        }
        return (.failed(failed.failure), diagram)
    }
}

/// One story being played: the clients and what they saw.
final class StorySession: Sendable {
    let story: Story
    let processes: StoryProcesses
    /// The center of each child: one for all of them, or with links one per child (each with its own link).
    let centers: [String: AskCenter]
    /// The center of each guardian: one for all of them, or with links one per guardian.
    let guardianCenters: [String: GuardianCenter]
    /// With links: the link of each child, guardian and the limits worker, and the cluster's name for it.
    let links: [LinkTarget: (name: String, link: FaultLink)]
    /// By link name: the bytes toward the broker it had read and never delivered, as of its last reset.
    let lostToBroker = Mutex<[String: Int]>([:])
    let logger: AskLogger
    /// What the guardians saw, from the centers' event streams.
    let guardianEvents = EventBoard<GuardianEvent>()
    /// Responses the children surfaced, in order: (question id, choice id).
    let responses = EventBoard<(UUID, String)>()
    let readers: Mutex<[Task<Void, Never>]>
    /// The story's question names and the questions built for them.
    let questions = Mutex<[String: AnyPermissionQuestion]>([:])
    /// By question name: the guardians whose answer to it the broker did not refuse, in the order of the steps.
    let answered = Mutex<[String: [String]]>([:])
    /// The story's own trace file (`trace/story.jsonl`): a `fault` line per `fault` and `network` step, which a
    /// flow's diagram draws as a band.
    let faultTrace: TraceLog?
    /// The marker questions asked by the step playing (``marker(from:through:like:after:step:)``).
    let stepMarkers = Mutex<[UUID]>([])

    private init(
        story: Story,
        processes: StoryProcesses,
        centers: [String: AskCenter],
        guardianCenters: [String: GuardianCenter],
        links: [LinkTarget: (name: String, link: FaultLink)]
    ) {
        self.story = story
        self.processes = processes
        self.centers = centers
        self.guardianCenters = guardianCenters
        self.links = links
        logger = processes.cluster.clientLogger("story")
        faultTrace = processes.cluster.traceFolder.flatMap { try? TraceLog(path: $0 + "/story.jsonl") }
        readers = Mutex([])
    }

    /// Each center once, in the order of the ids it hosts.
    var askCenters: [AskCenter] { Self.unique(centers) }
    var allGuardianCenters: [GuardianCenter] { Self.unique(guardianCenters) }

    private static func unique<Center: AnyObject>(_ centers: [String: Center]) -> [Center] {
        var seen: Set<ObjectIdentifier> = []
        return centers.sorted { $0.key < $1.key }.map(\.value).filter { seen.insert(ObjectIdentifier($0)).inserted }
    }

    static func start(_ story: Story, processes: StoryProcesses) async throws -> StorySession {
        let cluster = processes.cluster
        let perPerson = story.usesLinks
        var centers: [String: AskCenter] = [:]
        var guardianCenters: [String: GuardianCenter] = [:]
        var links: [LinkTarget: (name: String, link: FaultLink)] = [:]
        do {
            let children = story.children.sorted { $0.key < $1.key }.map {
                ChildIdentity(id: $0.key, family: $0.value)
            }
            for group in perPerson ? children.map({ [$0] }) : [children] {
                var options = AskCenter.Options()
                options.askTimeout = story.askTimeout
                options.workerName = perPerson ? "story-child-\(group[0].id)" : "story-children"
                let center = try cluster.makeAskCenter(
                    children: group,
                    stateDirectory: cluster.folder + "/children-state" + (perPerson ? "/\(group[0].id)" : ""),
                    options: options
                )
                for child in group { centers[child.id] = center }
                if perPerson { links[.child(group[0].id)] = try Self.link(of: center, in: cluster) }
            }
            let guardians = story.guardians.sorted { $0.key < $1.key }.map {
                GuardianIdentity(id: $0.key, family: $0.value)
            }
            for group in perPerson ? guardians.map({ [$0] }) : (guardians.isEmpty ? [] : [guardians]) {
                var options = GuardianCenter.Options()
                options.answerTimeout = story.answerTimeout
                options.workerName = perPerson ? "story-guardian-\(group[0].id)" : "story-guardians"
                let center = try cluster.makeGuardianCenter(guardians: group, options: options)
                for guardian in group { guardianCenters[guardian.id] = center }
                if perPerson { links[.guardian(group[0].id)] = try Self.link(of: center, in: cluster) }
            }
            if perPerson { links[.limits] = ("limits", try cluster.link("limits")) }
        } catch {
            for center in Self.unique(centers) { await center.stop() }
            for center in Self.unique(guardianCenters) { await center.stop() }
            throw error
        }
        let session = StorySession(
            story: story,
            processes: processes,
            centers: centers,
            guardianCenters: guardianCenters,
            links: links
        )
        for (target, link) in links.sorted(by: { $0.value.name < $1.value.name }) {
            session.logger.notice("link \(link.name) carries \(target)")
        }
        var registered = true
        for center in session.askCenters where !(await center.waitUntilRegistered(timeout: .seconds(15))) {
            registered = false
        }
        for center in session.allGuardianCenters where !(await center.waitUntilRegistered(timeout: .seconds(15))) {
            registered = false
        }
        guard registered else {
            await session.stop()
            throw StoryRunError("the story's children or guardians did not register with the broker within 15 s")
        }
        session.readResponses()
        return session
    }

    private static func link(of center: AskCenter, in cluster: AskRelayCluster) throws -> (String, FaultLink) {
        let link = try cluster.link(for: center)
        return (link.name, link)
    }

    private static func link(of center: GuardianCenter, in cluster: AskRelayCluster) throws -> (String, FaultLink) {
        let link = try cluster.link(for: center)
        return (link.name, link)
    }

    private func readResponses() {
        let board = responses
        let guardianBoard = guardianEvents
        for guardians in allGuardianCenters {
            let events = Task {
                for await event in guardians.events() {
                    switch event {
                    case .question(let question):
                        guardianBoard.append(.question(guardian: question.guardian.id, id: question.id))
                    case .closed(let closed):
                        guardianBoard.append(
                            .closed(
                                guardian: closed.guardian.id,
                                QuestionClosed(
                                    questionID: closed.questionID,
                                    reason: closed.reason,
                                    answeredBy: closed.answeredBy
                                )
                            )
                        )
                    }
                }
            }
            readers.withLock { $0.append(events) }
        }
        for center in askCenters {
            let communication = Task {
                for await delivered in center.responses(for: CommunicationTopic.self) {
                    board.append((delivered.response.question.id, delivered.response.choice.id))
                }
            }
            let update = Task {
                for await delivered in center.responses(for: SignificantAppUpdateTopic.self) {
                    board.append((delivered.response.question.id, delivered.response.choice.id))
                }
            }
            readers.withLock { $0 += [communication, update] }
        }
    }

    /// Stops the clients; with links, says what each link carried (bytes read and delivered each way, resets), so
    /// the story's clients.log shows what the faults did.
    func stop() async {
        for center in askCenters { await center.stop() }
        for center in allGuardianCenters { await center.stop() }
        for reader in readers.withLock({ $0 }) { reader.cancel() }
        for (target, link) in links.sorted(by: { $0.value.name < $1.value.name }) {
            logger.notice("link \(link.name) (\(target)) at the end: \(link.link.counters)")
        }
    }

    /// Plays the steps in order, until the task is cancelled. - Returns: the first failure (the step playing when
    /// the task was cancelled) with when it began and ended and the questions it concerns, or `nil` when every step
    /// got what it expected.
    func play(_ steps: [Step]) async -> FailedStep? {
        for step in steps {
            stepMarkers.withLock { $0.removeAll() }
            let began = Date()
            var failure = await play(step)
            if Task.isCancelled { failure = StepFailure(step: step.label, expected: "its end", got: "an interruption") }
            guard let failure else { continue }
            var named: [(name: String, id: UUID)] = []
            if let name = step.action.questionName, let question = questions.withLock({ $0[name] }) {
                named.append((name, question.id))
            }
            named += stepMarkers.withLock { $0 }.map { ("marker", $0) }
            return FailedStep(failure: failure, began: began, ended: Date(), questions: named)
        }
        return nil
    }

    func question(_ name: String) -> AnyPermissionQuestion { questions.withLock { $0[name]! } }

    private func play(_ step: Step) async -> StepFailure? {
        func fail(_ expected: String, _ got: String) -> StepFailure {
            StepFailure(step: step.label, expected: expected, got: got)
        }
        switch step.action {
        case .ask(let ask, let expect):
            let question = build(ask)
            var got = "presented"
            do { try await centers[ask.child]!.child(ask.child).ask(question) } catch {
                got = error.caseName + detail(error)
            }
            let wanted = expect.description
            if got != wanted && !got.hasPrefix(wanted + " (") { return fail(wanted, got) }
        case .send(let name, let expect), .cancel(let name, let expect):
            let question = question(name)
            let child = childOf(name)
            var got = "accepted"
            do {
                if case .send = step.action {
                    try await centers[child]!.child(child).send(question.id)
                } else {
                    try await centers[child]!.child(child).cancel(question.id)
                }
            } catch {
                got = error.code?.rawValue ?? (error == .timedOut ? "timed-out" : "\(error)")
            }
            if got != expect.description { return fail(expect.description, got) }
        case .answer(let guardian, let name, let choice, let expect):
            guard let guardians = guardianCenters[guardian] else {
                return fail(expect.description, "no guardian connection")
            }
            var got = "accepted"
            var refused = false
            do {
                try await guardians.answer(questionID: question(name).id, choiceID: choice, as: guardian)
            } catch {
                switch error {
                case .refused(let code, _):
                    got = code.rawValue
                    refused = true
                case .timedOut: got = "timed-out"
                default: got = "\(error)"
                }
            }
            // An answer the broker did not refuse may have won (a timed-out one is still retried): a later
            // expectNoResponse's marker goes through its guardian.
            if !refused { answered.withLock { $0[name, default: []].append(guardian) } }
            if got != expect.description { return fail(expect.description, got) }
        case .expectQuestion(let guardian, let name, let within):
            let id = question(name).id
            let seen = await guardianEvents.wait(timeout: within) { events in
                events.contains { if case .question(guardian, id) = $0 { true } else { false } }
            }
            if seen != true { return fail("question \(name) at \(guardian) within \(durationText(within))", "none") }
        case .expectNoQuestion(let guardian, let name, let during):
            let id = question(name).id
            let wanted = "no question \(name) at \(guardian) for \(durationText(during))"
            do {
                let absence = try await guardianEvents.expectNone(during: during) { events in
                    events.contains { if case .question(guardian, id) = $0 { true } else { false } }
                } evidence: {
                    try await proveNoQuestion(name, at: guardian, after: during, step: step)
                }
                switch absence {
                case .absent: break
                case .arrivedDuring: return fail(wanted, "it arrived")
                case .arrivedBeforeEvidence: return fail(wanted, "it arrived after the window, before the marker")
                }
            } catch let failure as MarkerFailure {
                return fail(wanted + ", then a marker question's round trip", failure.description)
            } catch {
                return nil  // cancelled: `play(_:)` reports the interruption
            }
        case .expectResponse(let name, let choice, let within):
            let id = question(name).id
            let arrived = await responses.wait(timeout: within) { $0.contains { $0.0 == id } }
            guard arrived else { return fail("a response to \(name) within \(durationText(within))", "none") }
            let got = responses.events.filter { $0.0 == id }
            if let choice, got.first?.1 != choice { return fail("choice \(choice)", got.first?.1 ?? "none") }
            if got.count > 1 { return fail("one response to \(name)", "\(got.count)") }
        case .expectNoResponse(let name, let during):
            let id = question(name).id
            let before = responses.events.filter { $0.0 == id }.count
            let wanted = "no \(before == 0 ? "" : "further ")response to \(name) for \(durationText(during))"
            do {
                let absence = try await responses.expectNone(during: during) {
                    $0.filter { $0.0 == id }.count > before
                } evidence: {
                    try await proveNoResponse(name, after: during, step: step)
                }
                let choice = responses.events.last { $0.0 == id }?.1 ?? ""
                switch absence {
                case .absent: break
                case .arrivedDuring: return fail(wanted, "one (\(choice))")
                case .arrivedBeforeEvidence: return fail(wanted, "one (\(choice)) after the window, before the marker")
                }
            } catch let failure as MarkerFailure {
                return fail(wanted + ", then a marker question's round trip", failure.description)
            } catch {
                return nil  // cancelled: `play(_:)` reports the interruption
            }
        case .expectClosed(let guardian, let name, let reason, let answeredBy, let within):
            let id = question(name).id
            var closing: QuestionClosed?
            let arrived = await guardianEvents.wait(timeout: within) { events in
                events.contains {
                    if case .closed(guardian, let closed) = $0 { closed.questionID == id } else { false }
                }
            }
            for case .closed(guardian, let closed) in guardianEvents.events where closed.questionID == id {
                closing = closed
            }
            let wanted = "closed \(reason)" + (answeredBy.map { " by \($0)" } ?? "") + " at \(guardian)"
            guard arrived == true, let closing else { return fail(wanted + " within \(durationText(within))", "none") }
            let got = "closed \(closing.reason.rawValue)" + (closing.answeredBy.map { " by \($0)" } ?? "")
            if closing.reason.rawValue != reason || (answeredBy != nil && closing.answeredBy != answeredBy) {
                return fail(wanted, got)
            }
        case .knownHandles(let child, let handles, let expect):
            do {
                let known = try await centers[child]!.child(child).limits.knownHandles(in: Set(handles))
                let got = Set(known.map(\.value))
                let wanted = Set(expect.map(\.value))
                if got != wanted {
                    return fail(
                        "known [\(wanted.sorted().joined(separator: ", "))]",
                        "[\(got.sorted().joined(separator: ", "))]"
                    )
                }
            } catch {
                return fail("known handles", "\(error)")
            }
        case .limits(let change):
            do { try await processes.cluster.changeLimits(change) } catch {
                return fail("the limits change stored", "\(error)")
            }
        case .fault(let process, let action):
            recordFault(action.rawValue, on: process.rawValue)
            if let problem = await processes.fault(action, on: process) {
                return fail("\(action.rawValue) of \(process.rawValue)", problem)
            }
        case .network(let target, let action):
            recordFault("\(action)", on: links[target]?.name ?? "\(target)")
            return network(action, on: target, step: step)
        }
        return nil
    }

    /// Writes a `fault` line (`code` the action, `to` the process or link) to the story's trace file, before the
    /// fault is played.
    private func recordFault(_ action: String, on target: String) {
        faultTrace?.record(.fault, to: target, code: action)
        faultTrace?.flush()
    }

    // MARK: Markers: the evidence of expectNoQuestion and expectNoResponse

    /// The evidence that question `name` is not on its way to `guardian`: a marker question from a child of the
    /// guardian's family (the question's own child when it is one) reaches the guardian. The broker keeps one
    /// ordered queue per recipient, so had the question been queued for the guardian, it would have come first.
    private func proveNoQuestion(_ name: String, at guardian: String, after during: Duration, step: Step) async throws {
        let family = story.guardians[guardian]
        let own = childOf(name)
        let child =
            story.children[own] == family ? own : story.children.filter { $0.value == family }.map(\.key).min()
        guard let child else {
            throw MarkerFailure("no child in \(guardian)'s family to ask a marker question")
        }
        try await marker(from: child, through: guardian, like: question(name), after: during, step: step)
    }

    /// The evidence that no (further) response to question `name` is on its way: a marker question from the
    /// question's child comes back answered, once through each guardian whose answer to it the broker did not
    /// refuse (an answer still on its way is ahead of the marker's on that guardian's connection), else through the
    /// first guardian of the child's family. The broker queues the responses of a child in order, so a response
    /// queued before the marker's came first.
    private func proveNoResponse(_ name: String, after during: Duration, step: Step) async throws {
        let child = childOf(name)
        var guardians = answered.withLock { $0[name, default: []] }.reduce(into: [String]()) { unique, guardian in
            if !unique.contains(guardian) { unique.append(guardian) }
        }
        if guardians.isEmpty, let first = story.guardians.filter({ $0.value == story.children[child] }).keys.min() {
            guardians = [first]
        }
        guard !guardians.isEmpty else {
            throw MarkerFailure("no guardian in \(child)'s family to answer a marker question")
        }
        for guardian in guardians {
            try await marker(from: child, through: guardian, like: question(name), after: during, step: step)
        }
    }

    /// A marker question's round trip: `child` asks and sends a fresh question (a random phone number, or an app
    /// update, as `like` is, so that its response comes on the same stream), it reaches `guardian`, who declines
    /// it (a decline makes no handle known), and the response comes back to `child`. Each leg waits at most
    /// `during` plus 30 s. A marker the broker expires before its answer (a story's short pending window) is asked
    /// again, three times at most. No step names a marker, so no later step sees it.
    /// - Throws: ``MarkerFailure`` naming the leg that did not happen.
    private func marker(
        from child: String,
        through guardian: String,
        like: AnyPermissionQuestion,
        after during: Duration,
        step: Step
    ) async throws {
        guard let center = centers[child], let guardians = guardianCenters[guardian] else {
            throw MarkerFailure("no connection of \(child) or \(guardian) to pass a marker question")
        }
        let within = during + .seconds(30)
        let start = ContinuousClock.now
        for attempt in 1...3 {
            let marker: AnyPermissionQuestion =
                if case .significantAppUpdate = like.topic {
                    AnyPermissionQuestion(
                        PermissionQuestion(
                            significantAppUpdateTopic: SignificantAppUpdateTopic(description: "askrelay test marker")
                        )
                    )
                } else {
                    AnyPermissionQuestion(
                        PermissionQuestion(
                            handle: CommunicationHandle(
                                value: "+1555\(UInt32.random(in: 1_000_000...9_999_999))",
                                kind: .phoneNumber
                            )
                        )
                    )
                }
            let id = marker.id
            stepMarkers.withLock { $0.append(id) }
            let leg = "\(step.label): marker question \(id) from \(child) through \(guardian)"
            do {
                try await center.child(child).ask(marker)
            } catch {
                logger.notice("\(leg): ask: \(error.caseName)\(detail(error))")
                let limits =
                    [.communicationLimitsNotEnabled, .contactSyncNotSetup, .notAvailable].contains(error)
                    ? " (a marker needs the child's limits on, sync set up and eligible)" : ""
                throw MarkerFailure("the marker asked by \(child): \(error.caseName)\(detail(error))\(limits)")
            }
            do {
                try await center.child(child).send(id)
            } catch {
                logger.notice("\(leg): send: \(error)")
                if error.code == .expired && attempt < 3 { continue }
                throw MarkerFailure("the marker sent by \(child): \(error.code?.rawValue ?? "\(error)")")
            }
            let delivered = await guardianEvents.wait(timeout: within) { events in
                events.contains { if case .question(guardian, id) = $0 { true } else { false } }
            }
            try Task.checkCancellation()
            guard delivered else {
                logger.notice("\(leg): not at \(guardian) within \(durationText(within))")
                throw MarkerFailure("the marker did not reach \(guardian) within \(durationText(within))")
            }
            do {
                try await guardians.answer(questionID: id, choiceID: PermissionChoice.decline.id, as: guardian)
            } catch {
                logger.notice("\(leg): answer: \(error)")
                if error.code == .expired && attempt < 3 { continue }
                // Timed out: the answer is still retried, so its response may yet come.
                if error != .timedOut {
                    throw MarkerFailure("the marker answered by \(guardian): \(error.code?.rawValue ?? "\(error)")")
                }
            }
            let back = await responses.wait(timeout: within) { $0.contains { $0.0 == id } }
            try Task.checkCancellation()
            guard back else {
                logger.notice("\(leg): no response within \(durationText(within))")
                throw MarkerFailure("the marker's response did not reach \(child) within \(durationText(within))")
            }
            let milliseconds = (ContinuousClock.now - start).seconds * 1000
            logger.notice("\(leg): round trip done in \(String(format: "%.1f", milliseconds)) ms (attempt \(attempt))")
            return
        }
    }

    /// Plays a network step on the target's link. A reset fails when there was no connection to reset: a fault
    /// that silently did nothing must not let a story pass.
    private func network(_ action: NetworkAction, on target: LinkTarget, step: Step) -> StepFailure? {
        guard let (name, link) = links[target] else {
            return StepFailure(step: step.label, expected: "a link of \(target)", got: "none")
        }
        switch action {
        case .fault(let fault, let duration):
            link.apply(fault, for: duration)
            logger.notice("\(step.label): \(action) on \(target) (link \(name))")
        case .reset:
            let count = link.reset()
            // Every connection is closed now, so what the link read toward the broker and did not deliver is gone
            // (dropped by this reset, or earlier with a connection its process closed); the counters keep it.
            let after = link.counters
            let lost = lostToBroker.withLock { lost -> Int in
                defer { lost[name] = after.heldToBroker }
                return after.heldToBroker - lost[name, default: 0]
            }
            let connections = "\(count) connection\(count == 1 ? "" : "s")"
            logger.notice(
                "\(step.label): reset on \(target) (link \(name)): \(connections) reset; \(lost) B read toward the broker since the last reset were never delivered; \(after)"
            )
            if count == 0 {
                return StepFailure(step: step.label, expected: "a connection of \(target) reset", got: "none open")
            }
        case .heal:
            link.heal()
            logger.notice("\(step.label): heal on \(target) (link \(name)); \(link.counters)")
        }
        return nil
    }

    private func detail(_ error: AskError) -> String {
        switch error {
        case .invalidQuestion(let reason): " (\(reason))"
        case .systemError(let message): " (\(message))"
        default: ""
        }
    }

    private func childOf(_ name: String) -> String {
        for step in story.steps { if case .ask(let ask, _) = step.action, ask.question == name { return ask.child } }
        return ""
    }

    /// The question a story's `ask` names: built the first time, the same one (same id) when asked again.
    private func build(_ ask: Ask) -> AnyPermissionQuestion {
        if let existing = questions.withLock({ $0[ask.question] }) { return existing }
        let choices = ask.choices ?? PermissionChoice.defaultChoices
        let defaultChoice = ask.defaultChoice.map { id in
            choices.first { $0.id == id } ?? PermissionChoice(id: id, title: id, answer: .denial)
        }
        let expiry = ask.expiresIn.map { Date().addingTimeInterval($0.seconds) }
        let question: AnyPermissionQuestion
        switch ask.topic {
        case .communication(let handles, let actions):
            let topic = CommunicationTopic(
                personInformation: handles.map { .init(handle: $0) },
                actions: Set(actions)
            )
            question = AnyPermissionQuestion(
                PermissionQuestion(topic: topic, choices: choices, defaultChoice: defaultChoice, expirationDate: expiry)
            )
        case .significantAppUpdate(let description):
            question = AnyPermissionQuestion(
                PermissionQuestion(
                    topic: SignificantAppUpdateTopic(description: description),
                    choices: choices,
                    defaultChoice: defaultChoice,
                    expirationDate: expiry
                )
            )
        }
        questions.withLock { $0[ask.question] = question }
        return question
    }
}

/// What a story's guardians saw (from their `GuardianCenter`'s events).
enum GuardianEvent: Sendable {
    case question(guardian: String, id: UUID)
    case closed(guardian: String, QuestionClosed)
}

/// The evidence of an `expectNoQuestion` or `expectNoResponse` step that did not come: which leg of the marker
/// question's round trip did not happen.
struct MarkerFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A story that could not be set up.
public struct StoryRunError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
