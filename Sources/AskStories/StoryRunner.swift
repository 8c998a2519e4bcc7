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
        let outcome = await play(story, logs: logs, started: started)
        let elapsed = ContinuousClock.now - start
        return StoryResult(
            name: story.name,
            file: story.file,
            outcome: outcome,
            seconds: elapsed.seconds,
            logs: logs
        )
    }

    private var isInterrupted: Bool { interruption?.signal != nil }

    private func play(_ story: Story, logs: String, started: () -> Void) async -> StoryResult.Outcome {
        let processes: StoryProcesses
        do {
            processes = try await StoryProcesses.start(story, logs: logs, binDirectory: binDirectory)
        } catch {
            if isInterrupted { return .interrupted("while its processes were starting") }
            return .error("the processes could not be started: \(error)")
        }
        if isInterrupted {
            await processes.stop()
            return .interrupted("while its processes were starting")
        }
        let session: StorySession
        do {
            session = try await StorySession.start(story, processes: processes)
        } catch {
            await processes.stop()
            return isInterrupted ? .interrupted("before its first step") : .error("\(error)")
        }
        started()
        let playing = Task { await session.play(story.steps) }
        // Cancelling ends the step's wait; stopping the clients ends an ask, send or answer waiting for the broker.
        let token = interruption?.onInterrupt {
            playing.cancel()
            Task { await session.stop() }
        }
        let failure = await playing.value
        interruption?.remove(token)
        await session.stop()
        await processes.stop()
        if let failure, isInterrupted { return .interrupted("at \(failure.step)") }
        return failure.map { .failed($0) } ?? .passed
    }
}

/// One story being played: the clients and what they saw.
final class StorySession: Sendable {
    let story: Story
    let processes: StoryProcesses
    let center: AskCenter
    let guardians: GuardianCenter?
    /// What the guardians saw, from the center's event stream.
    let guardianEvents = EventBoard<GuardianEvent>()
    /// Responses the children surfaced, in order: (question id, choice id).
    let responses = EventBoard<(UUID, String)>()
    let readers: Mutex<[Task<Void, Never>]>
    /// The story's question names and the questions built for them.
    let questions = Mutex<[String: AnyPermissionQuestion]>([:])

    private init(
        story: Story,
        processes: StoryProcesses,
        center: AskCenter,
        guardians: GuardianCenter?
    ) {
        self.story = story
        self.processes = processes
        self.center = center
        self.guardians = guardians
        readers = Mutex([])
    }

    static func start(_ story: Story, processes: StoryProcesses) async throws -> StorySession {
        let cluster = processes.cluster
        var options = AskCenter.Options()
        options.askTimeout = story.askTimeout
        options.workerName = "story-children"
        let center = try cluster.makeAskCenter(
            children: story.children.sorted { $0.key < $1.key }.map { ChildIdentity(id: $0.key, family: $0.value) },
            stateDirectory: cluster.folder + "/children-state",
            options: options
        )
        var guardians: GuardianCenter?
        if !story.guardians.isEmpty {
            var guardianOptions = GuardianCenter.Options()
            guardianOptions.heartbeatInterval = cluster.options.heartbeat
            guardianOptions.workerName = "story-guardians"
            guardianOptions.curve = cluster.clientCurve(.guardian)
            guardians = try GuardianCenter(
                broker: cluster.endpoint,
                guardians: story.guardians.sorted { $0.key < $1.key }.map {
                    GuardianIdentity(id: $0.key, family: $0.value)
                },
                logger: cluster.clientLogger("story-guardians"),
                context: cluster.context,
                options: guardianOptions
            )
        }
        let session = StorySession(story: story, processes: processes, center: center, guardians: guardians)
        let registered = await center.waitUntilRegistered(timeout: .seconds(15))
        let guardiansRegistered = await guardians?.waitUntilRegistered(timeout: .seconds(15)) ?? true
        guard registered, guardiansRegistered else {
            await session.stop()
            throw StoryRunError("the story's children or guardians did not register with the broker within 15 s")
        }
        session.readResponses()
        return session
    }

    private func readResponses() {
        let center = self.center
        let board = responses
        let guardianBoard = guardianEvents
        if let guardians {
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

    func stop() async {
        await center.stop()
        await guardians?.stop()
        for reader in readers.withLock({ $0 }) { reader.cancel() }
    }

    /// Plays the steps in order, until the task is cancelled. - Returns: the first failure (the step playing when
    /// the task was cancelled), or `nil` when every step got what it expected.
    func play(_ steps: [Step]) async -> StepFailure? {
        for step in steps {
            let failure = await play(step)
            if Task.isCancelled { return StepFailure(step: step.label, expected: "its end", got: "an interruption") }
            if let failure { return failure }
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
            do { try await center.child(ask.child).ask(question) } catch { got = error.caseName + detail(error) }
            let wanted = expect.description
            if got != wanted && !got.hasPrefix(wanted + " (") { return fail(wanted, got) }
        case .send(let name, let expect), .cancel(let name, let expect):
            let question = question(name)
            let child = childOf(name)
            var got = "accepted"
            do {
                if case .send = step.action {
                    try await center.child(child).send(question.id)
                } else {
                    try await center.child(child).cancel(question.id)
                }
            } catch {
                got = error.code?.rawValue ?? (error == .timedOut ? "timed-out" : "\(error)")
            }
            if got != expect.description { return fail(expect.description, got) }
        case .answer(let guardian, let name, let choice, let expect):
            guard let guardians else { return fail(expect.description, "no guardian connection") }
            var got = "accepted"
            do {
                try await guardians.answer(questionID: question(name).id, choiceID: choice, as: guardian)
            } catch {
                switch error {
                case .refused(let code, _): got = code.rawValue
                case .timedOut: got = "timed-out"
                default: got = "\(error)"
                }
            }
            if got != expect.description { return fail(expect.description, got) }
        case .expectQuestion(let guardian, let name, let within):
            let id = question(name).id
            let seen = await guardianEvents.wait(timeout: within) { events in
                events.contains { if case .question(guardian, id) = $0 { true } else { false } }
            }
            if seen != true { return fail("question \(name) at \(guardian) within \(durationText(within))", "none") }
        case .expectNoQuestion(let guardian, let name, let during):
            let id = question(name).id
            let seen = await guardianEvents.wait(timeout: during) { events in
                events.contains { if case .question(guardian, id) = $0 { true } else { false } }
            }
            if seen == true {
                return fail("no question \(name) at \(guardian) for \(durationText(during))", "it arrived")
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
            let arrived = await responses.wait(timeout: during) { $0.filter { $0.0 == id }.count > before }
            if arrived {
                let choice = responses.events.last { $0.0 == id }?.1 ?? ""
                return fail(
                    "no \(before == 0 ? "" : "further ")response to \(name) for \(durationText(during))",
                    "one (\(choice))"
                )
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
                let known = try await center.child(child).limits.knownHandles(in: Set(handles))
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
            if let problem = await processes.fault(action, on: process) {
                return fail("\(action.rawValue) of \(process.rawValue)", problem)
            }
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

/// A story that could not be set up.
public struct StoryRunError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
