import AskClient
import AskModel
import Foundation
import Synchronization
import Testing

/// What a test's clients hear, recorded from the watch's creation on, with the story steps' deadline-aware
/// expectations (docs/stories.md: `expectQuestion`, `expectNoQuestion`, `expectResponse`, `expectNoResponse`,
/// `expectClosed`):
///
/// ```swift
/// let flow = FlowWatch(children: app, guardians: guardians)
/// try await app.child("c1-1").ask(question)
/// try await app.child("c1-1").send(question.id)
/// let delivered = try await flow.expectQuestion(question.id, at: "g1-1", within: .seconds(10))
/// try await delivered.answer(PermissionChoice.approve.id)
/// try await flow.expectResponse(to: question.id, choice: .approve, within: .seconds(10))
/// try await flow.expectClosed(question.id, at: "g1-2", reason: .answered, answeredBy: "g1-1", within: .seconds(10))
/// try await flow.expectNoResponse(to: question.id, during: .seconds(1))
/// ```
///
/// Contracts:
/// - **Recording.** The watch opens the guardian center's `events()` and the ask center's response streams of
///   both topics when it is made; make it before the flow starts, and before the test opens its own streams (a
///   center keeps what arrived while no stream was open for the first one opened).
/// - **Deadlines.** An `expect...(within:)` returns as soon as what it expects is there (already, or when it comes),
///   and fails at its deadline: a deadline is a bound on waiting, never a pause. No expectation polls.
/// - **Evidence.** `expectNoQuestion` and `expectNoResponse` wait `during`, then prove that nothing is still on
///   its way (AskRelayProcesses' `EventBoard.expectNone`, which the story runner's steps share): a marker question (a fresh handle) travels the same path — asked by the same child (or a child of
///   the guardian's family), sent, delivered to the same guardian, answered, its response back to the same child.
///   The broker keeps one ordered queue per recipient, so once the marker arrived, whatever was queued before it
///   arrived first. The marker needs the child's limits on (it is asked like any question); its id is in
///   ``markers``, and the test's own streams see it too. For a significant-app-update question the response
///   evidence is the communication stream's (the marker's topic), which the center fills in the same order.
/// - **Failures** are recorded as issues at the caller's line (`try #require` style: the call throws after
///   recording), saying what was expected and what came.
public final class FlowWatch: Sendable {
    /// A response a hosted child got.
    public struct Response: Sendable, Hashable {
        /// The hosted child.
        public let child: String
        /// The question it answers.
        public let questionID: UUID
        /// The winning guardian's choice.
        public let choice: PermissionChoice
    }

    /// One thing the watch heard: a guardian event or a child's response, in the order they came.
    private enum Heard: Sendable {
        case event(GuardianCenter.Event)
        case response(Response)
    }

    /// The children's center.
    public let children: AskCenter
    /// The guardians' center.
    public let guardians: GuardianCenter
    /// What was heard, awaited by the expectations.
    private let board = EventBoard<Heard>()
    private let markerIDs = Mutex<Set<UUID>>([])
    private let readers = Mutex<[Task<Void, Never>]>([])

    /// Starts recording what `guardians` hears and what `children` gets. The watch stops recording when a center
    /// stops (its streams finish) or when the watch is released.
    public init(children: AskCenter, guardians: GuardianCenter) {
        self.children = children
        self.guardians = guardians
        let events = guardians.events()
        let communication = children.responses(for: CommunicationTopic.self)
        let updates = children.responses(for: SignificantAppUpdateTopic.self)
        let tasks = [
            Task { [weak self] in
                for await event in events { self?.board.append(.event(event)) }
            },
            Task { [weak self] in
                for await delivered in communication {
                    let response = Response(
                        child: delivered.child,
                        questionID: delivered.response.question.id,
                        choice: delivered.response.choice
                    )
                    self?.board.append(.response(response))
                }
            },
            Task { [weak self] in
                for await delivered in updates {
                    let response = Response(
                        child: delivered.child,
                        questionID: delivered.response.question.id,
                        choice: delivered.response.choice
                    )
                    self?.board.append(.response(response))
                }
            },
        ]
        readers.withLock { $0 = tasks }
    }

    deinit {
        for task in readers.withLock({ $0 }) { task.cancel() }
    }

    /// Every event the guardians heard, in order.
    public var events: [GuardianCenter.Event] { Self.events(in: board.events) }
    /// Every response the children got, in order.
    public var responses: [Response] { Self.responses(in: board.events) }
    /// The ids of the marker questions the `expectNo...` calls asked.
    public var markers: Set<UUID> { markerIDs.withLock { $0 } }

    // MARK: Expectations

    /// Expects question `id` to reach guardian `guardian` (already, or within `within`).
    /// - Returns: the delivered question, to answer.
    @discardableResult
    public func expectQuestion(
        _ id: UUID,
        at guardian: String,
        within: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> GuardianCenter.Question {
        let began = Date()
        _ = await board.wait(timeout: within) { Self.question(id, at: guardian, in: Self.events(in: $0)) != nil }
        guard let question = Self.question(id, at: guardian, in: events) else {
            try fail(
                "question \(id) at \(guardian) within \(within)",
                got: describe(questionsAt: guardian),
                about: id,
                since: began,
                sourceLocation
            )
        }
        return question
    }

    /// Expects the child's response to question `id` (already, or within `within`), with `choice` when given, and
    /// only one.
    @discardableResult
    public func expectResponse(
        to id: UUID,
        choice: PermissionChoice? = nil,
        within: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> Response {
        let began = Date()
        _ = await board.wait(timeout: within) { Self.responses(in: $0).contains { $0.questionID == id } }
        let got = responses.filter { $0.questionID == id }
        guard let first = got.first else {
            try fail("a response to \(id) within \(within)", got: "none", about: id, since: began, sourceLocation)
        }
        if let choice, first.choice.id != choice.id {
            try fail(
                "a response to \(id) with choice \(choice.id)",
                got: "choice \(first.choice.id)",
                about: id,
                since: began,
                sourceLocation
            )
        }
        if got.count > 1 {
            try fail(
                "one response to \(id)",
                got: "\(got.count): \(got.map(\.choice.id).joined(separator: ", "))",
                about: id,
                since: began,
                sourceLocation
            )
        }
        return first
    }

    /// Expects guardian `guardian` to be told question `id` closed with `reason` (and, when given, `answeredBy`),
    /// already or within `within`.
    @discardableResult
    public func expectClosed(
        _ id: UUID,
        at guardian: String,
        reason: QuestionClosed.Reason,
        answeredBy: String? = nil,
        within: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> GuardianCenter.Closed {
        let began = Date()
        _ = await board.wait(timeout: within) { Self.closed(id, at: guardian, in: Self.events(in: $0)) != nil }
        let wanted = "closed \(reason.rawValue)" + (answeredBy.map { " by \($0)" } ?? "") + " at \(guardian)"
        guard let closed = Self.closed(id, at: guardian, in: events) else {
            try fail(
                "\(wanted) within \(within)",
                got: "no closed notice for \(id)",
                about: id,
                since: began,
                sourceLocation
            )
        }
        if closed.reason != reason || (answeredBy != nil && closed.answeredBy != answeredBy) {
            let got = "closed \(closed.reason.rawValue)" + (closed.answeredBy.map { " by \($0)" } ?? "")
            try fail(wanted, got: got, about: id, since: began, sourceLocation)
        }
        return closed
    }

    /// Expects question `id` not to reach guardian `guardian` during `during`, then proves it is not on its way:
    /// a marker question of a child of the guardian's family reaches the guardian with `id` still absent.
    public func expectNoQuestion(
        _ id: UUID,
        at guardian: String,
        during: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let began = Date()
        let absence = try await board.expectNone(during: during) {
            Self.question(id, at: guardian, in: Self.events(in: $0)) != nil
        } evidence: {
            try await proveNothingMore(
                asker: nil,
                guardian: guardian,
                after: during,
                "\(id) did not reach \(guardian)",
                sourceLocation
            )
        }
        if absence != .absent {
            try fail(
                "no question \(id) at \(guardian) for \(during)",
                got: "question \(id) at \(guardian)"
                    + (absence == .arrivedBeforeEvidence ? " (before the marker)" : ""),
                about: id,
                since: began,
                sourceLocation
            )
        }
    }

    /// Expects no (further) response to question `id` during `during`, then proves none is on its way: a marker
    /// question of the same child (`child`, else the child the question was delivered from, else the center's only
    /// child) comes back answered with no other response to `id`. After ``expectResponse(to:choice:within:sourceLocation:)``
    /// it proves the response came once.
    public func expectNoResponse(
        to id: UUID,
        child: String? = nil,
        during: Duration,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let began = Date()
        let before = responses.filter { $0.questionID == id }.count
        let absence = try await board.expectNone(during: during) {
            Self.responses(in: $0).filter { $0.questionID == id }.count > before
        } evidence: {
            let asker =
                child ?? Self.asker(of: id, in: events)
                ?? children.children.keys.first.flatMap {
                    children.children.count == 1 ? $0 : nil
                }
            try await proveNothingMore(
                asker: asker,
                guardian: nil,
                after: during,
                "no response to \(id) is on its way",
                sourceLocation
            )
        }
        let got = responses.filter { $0.questionID == id }
        if absence != .absent {
            let more = got.dropFirst(before).map(\.choice.id).joined(separator: ", ")
            try fail(
                "no \(before == 0 ? "" : "further ")response to \(id) for \(during)",
                got: "\(got.count - before) more (\(more))"
                    + (absence == .arrivedBeforeEvidence ? " before the marker" : ""),
                about: id,
                since: began,
                sourceLocation
            )
        }
    }

    // MARK: Evidence

    /// The evidence of an `expectNo...` call after its quiet `during`: a marker question between `asker` and
    /// `guardian` (the one not given is the hosted member of the other's family with the lowest id), each leg bounded
    /// by `during` plus 30 s. Fails, expecting `evidence`, when there is no such pair to ask it.
    private func proveNothingMore(
        asker: String?,
        guardian: String?,
        after during: Duration,
        _ evidence: String,
        _ sourceLocation: SourceLocation
    ) async throws {
        let family =
            asker.flatMap { children.children[$0]?.family } ?? guardian.flatMap { guardians.guardians[$0]?.family }
        let child =
            asker
            ?? family.flatMap { family in
                children.children.values.filter { $0.family == family }.map(\.id).min()
            }
        let answerer =
            guardian
            ?? family.flatMap { family in
                guardians.guardians.values.filter { $0.family == family }.map(\.id).min()
            }
        guard let child, let answerer else {
            let missing =
                if let given = asker ?? guardian {
                    "no hosted child and guardian of \(given)'s family to pass a marker between"
                } else { "no child to ask a marker from (pass child:)" }
            try fail("evidence that \(evidence)", got: missing, about: nil, since: Date(), sourceLocation)
        }
        try await marker(child: child, guardian: answerer, within: during + .seconds(30), sourceLocation)
    }

    /// Asks, sends and answers a marker question: `child` asks it, `guardian` gets it and approves, `child` gets
    /// the response. Each leg is an expectation of its own, bounded by `within`.
    private func marker(
        child: String,
        guardian: String,
        within: Duration,
        _ sourceLocation: SourceLocation
    ) async throws {
        let handle = CommunicationHandle(value: "+1555\(UInt32.random(in: 1_000_000...9_999_999))", kind: .phoneNumber)
        let marker = PermissionQuestion(handle: handle)
        markerIDs.withLock { _ = $0.insert(marker.id) }
        let began = Date()
        do {
            try await children.child(child).ask(marker)
            try await children.child(child).send(marker.id)
        } catch {
            try fail(
                "a marker question asked and sent by \(child)",
                got: "\(error)",
                about: marker.id,
                since: began,
                sourceLocation
            )
        }
        let delivered = try await expectQuestion(
            marker.id,
            at: guardian,
            within: within,
            sourceLocation: sourceLocation
        )
        do {
            try await delivered.answer(PermissionChoice.approve.id)
        } catch {
            try fail(
                "the marker question answered by \(guardian)",
                got: "\(error)",
                about: marker.id,
                since: began,
                sourceLocation
            )
        }
        try await expectResponse(to: marker.id, within: within, sourceLocation: sourceLocation)
    }

    /// Records the failure as an issue at the caller's line and throws; first tells the `.askRelayCluster()` trait
    /// (``FailedFlows``) which question it is about and when the expectation began, for the diagram it attaches.
    private func fail(
        _ expected: String,
        got: String,
        about question: UUID?,
        since began: Date,
        _ sourceLocation: SourceLocation
    ) throws -> Never {
        FailedFlows.current?.add(
            FailedFlows.Failure(
                question: question,
                began: began,
                ended: Date(),
                text: "expected \(expected); got \(got)"
            )
        )
        let flowAsExpected = false
        try #require(flowAsExpected, "expected \(expected); got \(got)", sourceLocation: sourceLocation)
        preconditionFailure("#require(false) returned")
    }

    private func describe(questionsAt guardian: String) -> String {
        let ids = events.compactMap { event -> UUID? in
            if case .question(let question) = event, question.guardian.id == guardian { return question.id }
            return nil
        }
        return ids.isEmpty ? "no question at \(guardian)" : "questions \(ids.map(\.uuidString).joined(separator: ", "))"
    }

    private static func question(_ id: UUID, at guardian: String, in events: [GuardianCenter.Event])
        -> GuardianCenter.Question?
    {
        for case .question(let question) in events where question.id == id && question.guardian.id == guardian {
            return question
        }
        return nil
    }

    private static func closed(_ id: UUID, at guardian: String, in events: [GuardianCenter.Event])
        -> GuardianCenter.Closed?
    {
        for case .closed(let closed) in events where closed.questionID == id && closed.guardian.id == guardian {
            return closed
        }
        return nil
    }

    private static func asker(of id: UUID, in events: [GuardianCenter.Event]) -> String? {
        for case .question(let question) in events where question.id == id { return question.child }
        return nil
    }

    private static func events(in heard: [Heard]) -> [GuardianCenter.Event] {
        heard.compactMap { if case .event(let event) = $0 { event } else { nil } }
    }

    private static func responses(in heard: [Heard]) -> [Response] {
        heard.compactMap { if case .response(let response) = $0 { response } else { nil } }
    }
}
