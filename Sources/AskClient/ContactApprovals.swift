import AskBasics
import AskProtocol
import Foundation

/// Where a child stands with one handle.
public enum ContactStatus: Sendable, Hashable, CustomStringConvertible {
    /// Nothing decided: the child may ask.
    case notDetermined
    /// A question about it is sent (or presented) and unanswered until `until`; then it is `notDetermined` again.
    case pending(until: Date)
    /// The child may communicate: a guardian approved, the system knows the handle, or limits are not enabled.
    case granted
    /// A guardian denied (or gave an answer that is not an approval).
    case denied
    /// Contact sync is not set up, so nothing can be established.
    case restricted
    /// Asking is not available for this child or device.
    case unavailable

    /// Whether the child may communicate now.
    public var isAuthorized: Bool { self == .granted }

    /// Whether asking again would not change anything by itself (granted, denied, restricted, unavailable).
    public var isTerminal: Bool {
        switch self {
        case .granted, .denied, .restricted, .unavailable: true
        case .notDetermined, .pending: false
        }
    }

    public var description: String {
        switch self {
        case .notDetermined: "notDetermined"
        case .pending(let until): "pending(until: \(until))"
        case .granted: "granted"
        case .denied: "denied"
        case .restricted: "restricted"
        case .unavailable: "unavailable"
        }
    }
}

/// One child's approved / denied / waiting state per handle, with an explicit pending window.
///
/// A cancelled question never gets a response, so waiting must end by itself: every pending entry expires at the
/// question's expiry or `asked + pendingWindow`, whichever is first. Handles are compared normalized. Rules:
/// - an approval grants every handle of the question and clears an earlier denial;
/// - a denial, or an answer that is not among the question's choices, denies the handles (unless already granted
///   by something that outranks it: a known handle or limits not enabled);
/// - `communicationLimitsNotEnabled` grants (there are no limits); `contactSyncNotSetup` restricts;
///   `notAvailable` makes asking unavailable; other ask errors change nothing.
///
/// A plain value with no I/O: it knows only what it is told (feed it every outcome of the child's flows), is not
/// persisted (keep it, or rebuild it from the responses the center surfaces again after a restart) and, like any
/// value, is safe to send between tasks but not to mutate from two at once.
public struct ContactApprovals: Sendable, Hashable {
    /// How long a question may wait for an answer (the product's 48 hours, usually scaled down).
    public var pendingWindow: Duration

    private enum Decision: Hashable, Sendable {
        case approved, denied, known
    }

    private var decisions: [CommunicationHandle: Decision] = [:]
    /// Open questions: id → normalized handles and when waiting ends.
    private var pending: [UUID: Waiting] = [:]

    private struct Waiting: Hashable, Sendable {
        var handles: [CommunicationHandle]
        var until: Date
    }
    private var limitsNotEnabled = false
    private var restricted = false
    private var unavailable = false

    /// Empty: every handle is `notDetermined`.
    public init(pendingWindow: Duration = .seconds(48 * 3600)) {
        self.pendingWindow = pendingWindow
    }

    /// The status of `handle` at `now`.
    public func status(for handle: CommunicationHandle, now: Date = Date()) -> ContactStatus {
        let key = handle.normalized
        switch decisions[key] {
        case .approved?, .known?: return .granted
        case .denied?: return .denied
        case nil: break
        }
        if limitsNotEnabled { return .granted }
        if unavailable { return .unavailable }
        if restricted { return .restricted }
        let until = pending.values.filter { $0.handles.contains(key) && $0.until > now }.map(\.until).max()
        return until.map { .pending(until: $0) } ?? .notDetermined
    }

    /// The handles with a recorded decision or an open question, normalized (to check again after a reconnect).
    public var trackedHandles: Set<CommunicationHandle> {
        Set(decisions.keys).union(pending.values.flatMap(\.handles))
    }

    /// The handles not yet granted among the tracked ones.
    public var handlesNotGranted: Set<CommunicationHandle> {
        trackedHandles.filter { decisions[$0] != .approved && decisions[$0] != .known }
    }

    /// The handles are known to the system: granted.
    public mutating func markKnown(_ handles: some Sequence<CommunicationHandle>) {
        for handle in handles { decisions[handle.normalized] = .known }
    }

    /// A question about `handles` was presented at `now`: they are pending until its expiry or the window's end.
    /// - Returns: when the waiting ends.
    @discardableResult
    public mutating func asked(
        _ questionID: UUID,
        handles: [CommunicationHandle],
        now: Date = Date(),
        expirationDate: Date? = nil
    ) -> Date {
        let windowEnd = now.addingTimeInterval(pendingWindow.seconds)
        let until = min(expirationDate ?? windowEnd, windowEnd)
        pending[questionID] = Waiting(handles: handles.map(\.normalized), until: until)
        return until
    }

    /// The sheet was cancelled: the question will never be answered, so its handles stop waiting.
    public mutating func cancelled(_ questionID: UUID) {
        pending.removeValue(forKey: questionID)
    }

    /// The question expired without an answer.
    public mutating func expired(_ questionID: UUID) {
        pending.removeValue(forKey: questionID)
    }

    /// A guardian answered.
    public mutating func record<Topic: QuestionTopic>(_ response: PermissionResponse<Topic>) {
        let known = response.question.choices.first { $0.id == response.choice.id }
        let handles = AnyQuestionTopic(response.question.topic).handles
        record(response.question.id, handles: handles, answer: known?.answer)
    }

    /// A guardian answered `answer` (`nil`: an answer nobody recognises, which counts as a denial).
    public mutating func record(_ questionID: UUID, handles: [CommunicationHandle], answer: PermissionChoice.Answer?) {
        let keys = pending.removeValue(forKey: questionID)?.handles ?? handles.map(\.normalized)
        for key in keys {
            switch answer {
            case .approval?: decisions[key] = .approved
            case .denial?, nil: if decisions[key] != .known && decisions[key] != .approved { decisions[key] = .denied }
            }
        }
    }

    /// `ask` threw `error` for a question about `handles`.
    public mutating func refused(_ error: AskError, questionID: UUID? = nil) {
        if let questionID { pending.removeValue(forKey: questionID) }
        switch error {
        case .communicationLimitsNotEnabled: limitsNotEnabled = true
        case .contactSyncNotSetup: restricted = true
        case .notAvailable: unavailable = true
        case .invalidQuestion, .systemError, .unknown: break
        }
    }

    /// The question was presented (ask succeeded): the child's limits are evidently on and set up again.
    public mutating func presented() {
        limitsNotEnabled = false
        restricted = false
        unavailable = false
    }

}

extension ChildSession {
    /// Asks the limits service again which of `approvals`' not-yet-granted handles are known and grants those.
    /// Call it after every reconnect (``AskCenter/reconnections()``).
    /// - Throws: ``LimitsQueryError``.
    public func recheckKnownHandles(_ approvals: inout ContactApprovals) async throws(LimitsQueryError) {
        let handles = approvals.handlesNotGranted
        guard !handles.isEmpty else { return }
        let known = try await center.knownHandles(in: handles, child: id)
        approvals.markKnown(known)
    }
}
