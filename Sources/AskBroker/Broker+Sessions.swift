import AskBasics
import AskProtocol
import Foundation

// Sessions and liveness: ending a session (its work requeued or spilled), the limits workers' affinity, and
// forgiving peers' silence the broker could not observe.
extension Broker {
    /// Ends a session: its addresses lose their owner and unacked deliveries go back to their queues.
    func endSession(_ session: Session, reason: String, requeue: Bool = true) {
        guard session.isAlive else { return }
        session.isAlive = false
        sessions.removeValue(forKey: session.peer)
        sessionsByRole[session.role, default: 0] -= 1
        stats.sessionsClosed += 1
        turn.sessionsEnded += 1
        logger.info("session ended", metadata: ["worker": "\(session.worker)", "reason": "\(reason)"])
        for address in session.addresses.keys {
            guard let mailbox = mailboxes[address], mailbox.owner === session else { continue }
            mailbox.owner = nil
            for id in mailbox.inflight.keys { inflightIndex.removeValue(forKey: id) }
            if session.role == .limits {
                // Work for the limits service goes to another live limits worker, or waits for one.
                let work = mailbox.drainAll()
                var kept: [Envelope] = []
                for envelope in work {
                    if envelope.to == "limits" {
                        let target = self.mailbox(for: limitsTarget(for: Self.limitsKey(of: envelope)))
                        target.enqueue(envelope)
                        markDirty(target)
                    } else {
                        kept.append(envelope)
                    }
                }
                for envelope in kept { mailbox.enqueue(envelope) }
            } else {
                mailbox.requeueInflight()
                if journal.durability != .off {
                    // Nobody serves the address now: its messages wait in the journal, not in memory.
                    let spilledBefore = mailbox.spilled
                    let (dropped, journaled) = mailbox.spillWaiting()
                    // They are read back from the message table: copies in the message log move there.
                    for envelope in journaled { try? journal.moveToTable(envelope.stored()) }
                    totalQueued -= dropped
                    totalSpilled += mailbox.spilled - spilledBefore
                }
            }
        }
    }

    /// The limits worker for a sender: sticky while that worker lives, otherwise the live one chosen by rendezvous
    /// hashing; `limits` (parked until one registers) when none is alive.
    func limitsTarget(for from: String) -> String {
        let child = from
        if let address = limitsAffinity[child], let owner = mailboxes[address]?.owner, owner.isAlive { return address }
        var best: (score: UInt64, address: String)?
        for session in sessions.values where session.role == .limits && session.isAlive {
            for address in session.addresses.keys {
                let score = Rendezvous.mix64(Rendezvous.fnv1a64(child) ^ Rendezvous.fnv1a64(address))
                if best == nil || score > best!.score { best = (score, address) }
            }
        }
        guard let best else { return "limits" }
        limitsAffinity[child] = best.address
        return best.address
    }

    /// The key a message for the `limits` service is routed by: the child it concerns, so that all of a child's
    /// work (its asks and queries, the broker's approvals and state writes, an observer's admin changes) reaches
    /// the same limits worker, also when it is routed again after a limits worker left or the broker restarted.
    /// A child's own message names it as its sender; the others name it in the body's `child`.
    static func limitsKey(of envelope: Envelope) -> String {
        if envelope.from.utf8.starts(with: "child/".utf8) { return envelope.from }
        guard Self.childKeyedKinds.contains(envelope.kind) else { return envelope.from }
        let body = envelope.packed[envelope.headerCount...]
        guard let named = try? JSONDecoder().decode(ChildField.self, from: Data(body)) else { return envelope.from }
        return "child/\(named.child)"
    }

    static let childKeyedKinds: Set<String> = [
        MessageKind.approval.rawValue, MessageKind.limitsAdmin.rawValue, MessageKind.limitsRead.rawValue,
        MessageKind.limitsWrite.rawValue,
    ]

    private struct ChildField: Decodable { let child: String }

    func rerouteParkedLimitsWork() {
        guard let parked = mailboxes["limits"], parked.waitingCount > 0 else { return }
        for envelope in parked.drainAll() {
            let target = mailbox(for: limitsTarget(for: Self.limitsKey(of: envelope)))
            if trace != nil { trace(.routed, envelope, to: target.address) }
            target.enqueue(envelope)
            markDirty(target)
        }
    }

    /// The loop read nothing for `stall`: peers' silence and deliveries' ACK clocks resume where they stopped, so
    /// the turns after it neither end sessions whose heartbeats are still unread in the socket (or that only answer
    /// the broker's own heartbeats, which it did not send) nor redeliver everything in flight.
    func forgiveStall(_ stall: Duration) {
        logger.warning(
            "broker loop stalled; peers' liveness and ACK timers paused for it",
            metadata: [
                "ms": "\(stall.milliseconds)", "sessions": "\(sessions.count)", "inflight": "\(inflightIndex.count)",
            ]
        )
        for session in sessions.values { session.lastHeard += stall }
        for (id, mailbox) in inflightIndex {
            if let envelope = mailbox.inflight[id], let delivered = envelope.deliveredAt {
                envelope.deliveredAt = delivered + stall
            }
        }
    }
}
