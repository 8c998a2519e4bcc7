import AskProtocol
import Foundation

// The broker's trace lines (`--trace-log`; docs/tracing.md, "Recording"). Every trace point is written
// `if let trace { ... }` or calls one of these after that check, so a broker without a trace log builds no string
// and pays one `nil` check per point. Lines are gathered during the turn and written at its end (``finishTurn()``),
// in one write. Each line is stamped when it is recorded (not with the turn's start), so a message read late in a
// batch is not `received` before its sender `sent` it.
extension Broker {
    /// A line about a message the broker holds: its kind, question, id, sender and `to` (the mailbox it is in, by
    /// default: the address as its sender wrote it).
    func trace(_ event: TraceEvent, _ envelope: Envelope, to: String? = nil, code: String? = nil, at: Date = Date()) {
        trace?.record(
            event,
            kind: envelope.kind,
            question: envelope.subject?.uuid,
            id: envelope.id.uuid,
            from: envelope.from,
            to: to ?? envelope.to,
            code: code,
            trace: envelope.trace,
            at: at
        )
    }

    /// A question closed at the broker, `reason` saying how (`answered`, `cancelled`, `expired`, `abandoned`,
    /// `refused`); `to` is its child.
    func traceClosed(_ questionID: MessageID, _ entry: LedgerEntry, reason: String) {
        trace?.record(
            .closed,
            question: questionID.uuid,
            from: "broker",
            to: "child/\(ledger.child(of: entry))",
            code: reason,
            trace: questionTrace(questionID)
        )
    }

    /// The turn committed: its journaled messages are `journaled`.
    func traceJournaled() {
        guard let trace, !turnTraced.isEmpty else { return }
        for envelope in turnTraced where !envelope.withdrawn {
            trace.record(
                .journaled,
                kind: envelope.kind,
                question: envelope.subject?.uuid,
                id: envelope.id.uuid,
                from: envelope.from,
                to: envelope.to,
                trace: envelope.trace
            )
        }
        turnTraced.removeAll(keepingCapacity: true)
    }
}
