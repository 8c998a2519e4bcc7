import AskBasics
import AskProtocol
import Foundation
import ZeroMQ

// Timers and housekeeping, after each turn: question expiry, key reloads, heartbeats and liveness verdicts,
// redelivery of overdue deliveries, forgetting old accepted ids and closed questions, stats.
extension Broker {
    func timers() throws {
        let now = ContinuousClock.now
        if ledger.nextDeadline.map({ $0 <= configuration.clock.now }) ?? false {
            let started = ContinuousClock.now
            expireQuestions()
            turn.expiry += ContinuousClock.now - started
        }
        guard now - lastHousekeeping >= .milliseconds(50) else { return }
        lastHousekeeping = now
        if let authenticator {
            let revoked = authenticator.reloadIfChanged(now: now)
            if !revoked.isEmpty {
                for session in Array(sessions.values) where session.principalKey.map(revoked.contains) == true {
                    output.removeAll()
                    output.append(session.identity)
                    WireEncoder.bye(reason: "key revoked", into: &output)
                    sendToPeer(session)
                    endSession(session, reason: "key revoked")
                }
            }
        }
        let interval = configuration.heartbeatInterval
        // Silence is measured up to the start of this turn, whose input has been read: a turn that took long
        // (or a stall of this loop) does not count against peers whose heartbeats wait, unread, in the socket.
        // When the turn left input unread, the verdict waits up to twice as long for the backlog to be read.
        let deadline = interval * configuration.liveness * (turn.inputLeft ? 2 : 1)
        for session in Array(sessions.values) {
            if turnNow - session.lastHeard > deadline {
                endSession(session, reason: "missed \(configuration.liveness) heartbeats")
                continue
            }
            if now - session.lastSent >= interval {
                output.removeAll()
                output.append(session.identity)
                WireEncoder.heartbeat(into: &output)
                sendToPeer(session)
            }
        }
        if now - lastAckScan >= configuration.ackTimeout / 4 {
            lastAckScan = now
            redeliverOverdue(now: now)
        }
        pruneAccepted(now: now)
        forgetClosedQuestions()
        if let publisher = statsPublisher, publisher.isDue(now: now, interval: configuration.statsInterval) {
            publisher.publish(snapshot())
        }
        publishMetrics(now: now)
        finishTurn()
    }

    func redeliverOverdue(now: ContinuousClock.Instant) {
        for (id, mailbox) in inflightIndex {
            guard let envelope = mailbox.inflight[id], let owner = mailbox.owner, owner.isAlive,
                let delivered = envelope.deliveredAt, now - delivered >= configuration.ackTimeout
            else { continue }
            stats.redelivered += 1
            turn.redelivered += 1
            _ = deliver(envelope, to: owner, in: mailbox)
        }
    }

    /// Forgets accepted SEND ids older than ten ack timeouts: a sender retries well within that.
    ///
    /// Runs with every housekeeping pass (every 50 ms), and the journal forgets what memory forgot in the same
    /// pass: a few hundred ids at a time at a few thousand SENDs a second. Deleting them only when the in-memory
    /// list was compacted (half of it pruned) made one DELETE of ~440 000 rows that stalled the loop for 2.3 s,
    /// long enough to end sessions; every quarter ack timeout (~10 000 rows) still made 150-600 ms turns, mostly
    /// the commit: the ids are random keys, so each deleted row dirties its own page of the table.
    func pruneAccepted(now: ContinuousClock.Instant) {
        let horizon = configuration.ackTimeout * 10
        let forgotten = accepted.forget(olderThan: horizon, now: now)
        pruneImportedQuestions(olderThan: horizon, now: now)
        if forgotten > 0 && journal.durability != .off {
            let started = ContinuousClock.now
            turn.forgotten += forgotten
            try? journal.forgetAccepted(before: Date().addingTimeInterval(-horizon.seconds))
            turn.forget += ContinuousClock.now - started
        }
    }

    /// Forgets questions closed longer than `--closed-retention` ago, in memory and in the journal (one range
    /// DELETE on the `question_closed` index), with every housekeeping pass.
    func forgetClosedQuestions() {
        let horizon = configuration.clock.now.addingTimeInterval(-configuration.closedRetention.seconds)
        let count = ledger.forgetClosed(before: horizon)
        guard count > 0 else { return }
        turn.forgottenQuestions += count
        guard journal.durability != .off else { return }
        let started = ContinuousClock.now
        do { try journal.deleteQuestions(closedBefore: horizon) } catch {
            // Left for the next pass (or the next start), which deletes by the same rule.
            logger.warning("could not delete closed questions", metadata: ["error": "\(error)"])
        }
        turn.forget += ContinuousClock.now - started
    }
}
