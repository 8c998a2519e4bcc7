import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An interesting situation a run can reach, counted by the process where it happens (the broker or a child's ask
/// center), in the spirit of "sometimes" assertions: a run that never reached a situation did not test it, however
/// green its verdict. `askrelay simulate` and `askrelay check` count them per run (docs/simulation.md, "Reached
/// situations"), and a scenario can require some (`"expect": {"reached": [...]}`).
public enum ReachedSituation: String, CaseIterable, Codable, Sendable {
    /// The broker accepted a guardian's answer less than ``near`` before the question's deadline.
    case answerNearExpiry = "answer-near-expiry"
    /// A second guardian's answer reached the broker less than ``near`` after the first was accepted (and was
    /// refused: the first answer wins).
    case guardiansRacing = "guardians-racing"
    /// The broker accepted an answer while the asking child had no session: its response waits in the journal.
    case answerWhileChildAway = "answer-while-child-away"
    /// A response that an earlier run of the broker stored was delivered by this run: it crossed a restart.
    case responseAfterRestart = "response-after-restart"
    /// A child's send and cancel of one question crossed: the broker got a cancel for a question already sent, or a
    /// send for one already cancelled (the second is refused).
    case sendRacingCancel = "send-racing-cancel"
    /// A child's ask center dropped a message delivered to it a second time (a response it had already recorded,
    /// or a delivery its connection had already seen): a redelivery deduplicated by the app.
    case redeliveryDeduplicated = "redelivery-deduplicated"

    /// "Near" for ``answerNearExpiry`` and ``guardiansRacing``.
    public static let near: Duration = .milliseconds(10)
}

/// One line of a reached log: `{"situation":"answer-near-expiry","count":1,"at_ms":1764763200123,"question":"…"}`.
public struct ReachedLine: Codable, Sendable, Equatable {
    /// The situation's name (a ``ReachedSituation`` raw value; a name this build does not know is kept as read).
    public var situation: String
    public var count: Int
    /// When it was counted, in milliseconds since 1970.
    public var atMs: Int64
    /// The question it happened to, when there is one.
    public var question: String?

    enum CodingKeys: String, CodingKey {
        case situation, count, question
        case atMs = "at_ms"
    }

    public init(situation: String, count: Int, atMs: Int64, question: String?) {
        self.situation = situation
        self.count = count
        self.atMs = atMs
        self.question = question
    }
}

/// Appends a JSON line per reached situation to a file (`--reached-log FILE` of the broker and the child worker).
/// Each line is one `write(2)` to a file opened with `O_APPEND`, so lines of several processes (a restarted broker,
/// a child and its successor) never interleave, and a line written is kept when its process is killed; nothing is
/// synced, and a lost line costs one count, never a flow.
public final class ReachedLog: Sendable {
    private let file: LineFile
    public var path: String { file.path }

    /// Opens (creating it, mode 0600) the file at `path` for appending; its folder must exist.
    /// - Throws: ``LineFileError`` naming the path and the system's reason.
    public init(path: String) throws { file = try LineFile(path: path, what: "the reached log", flag: "--reached-log") }

    /// Appends one line: `count` occurrences of `situation` (of `question`, if given) at `at`.
    public func note(_ situation: ReachedSituation, question: UUID? = nil, count: Int = 1, at: Date = Date()) {
        guard count > 0 else { return }
        let ms = Int64((at.timeIntervalSince1970 * 1000).rounded(.down))
        var text = "{\"situation\":\"\(situation.rawValue)\",\"count\":\(count),\"at_ms\":\(ms)"
        if let question { text += ",\"question\":\"\(question.uuidString)\"" }
        text += "}\n"
        file.append(Array(text.utf8))
    }
}
