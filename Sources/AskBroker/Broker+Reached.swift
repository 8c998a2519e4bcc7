import AskBasics
import AskProtocol
import Foundation
import ZeroMQ

/// The broker's part of the reached situations (``ReachedSituation``; docs/simulation.md, "Reached situations"):
/// each is noted where the broker decides it, on a path that is taken anyway (an answer accepted or refused, a send
/// or cancel refused, a delivery of a message an earlier run stored), so a broker without `--reached-log` pays a
/// comparison or two per answer and nothing per message.
struct ReachedCounter {
    /// `--reached-log`; `nil`: nothing is noted (and nothing remembered for it).
    let log: ReachedLog?
    /// The highest journal `seq` an earlier run of this broker stored (0: none): a delivery of a message with a
    /// `seq` up to it crosses a restart.
    var storedBeforeStart: Int64 = 0
    /// The last answers accepted, with when (whole milliseconds): a later answer to the same question within
    /// ``ReachedSituation/near`` is ``ReachedSituation/guardiansRacing``. A ring: only the newest matter.
    private var recentAnswers: [(id: MessageID, at: Date)] = []
    private var nextSlot = 0
    static let recentAnswersKept = 256

    init(log: ReachedLog?) { self.log = log }

    /// ``ReachedSituation/near`` in whole milliseconds: the times compared are whole milliseconds (the answer's, as
    /// the deadline was checked against it, and the deadline's), compared as integers so that no floating-point
    /// hair puts an answer exactly 10 ms early on the wrong side.
    static let nearMilliseconds = Int64(ReachedSituation.near.milliseconds)

    static func milliseconds(_ date: Date) -> Int64 {
        date.wireMilliseconds ?? Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    func note(_ situation: ReachedSituation, _ question: MessageID?) {
        log?.note(situation, question: question?.uuid)
    }

    /// An answer was accepted at `now` (the time the deadline was checked against).
    mutating func noteAccepted(_ id: MessageID, now: Date, expiresAt: Date, childAway: Bool) {
        guard log != nil else { return }
        if Self.milliseconds(expiresAt) - Self.milliseconds(now) < Self.nearMilliseconds { note(.answerNearExpiry, id) }
        if childAway { note(.answerWhileChildAway, id) }
        if recentAnswers.count < Self.recentAnswersKept {
            recentAnswers.append((id, now))
        } else {
            recentAnswers[nextSlot] = (id, now)
        }
        nextSlot = (nextSlot + 1) % Self.recentAnswersKept
    }

    /// An answer came for a question already answered (and is refused).
    func noteLateAnswer(_ id: MessageID, now: Date) {
        guard log != nil, let first = recentAnswers.last(where: { $0.id == id }) else { return }
        if Self.milliseconds(now) - Self.milliseconds(first.at) < Self.nearMilliseconds { note(.guardiansRacing, id) }
    }
}

extension Broker {
    /// A message an earlier run stored is delivered for the first time by this run.
    func noteRestartCrossing(_ envelope: Envelope) {
        guard reached.log != nil, envelope.kind == MessageKind.response.rawValue else { return }
        reached.note(.responseAfterRestart, envelope.subject)
    }
}
