import AskProtocol
import Foundation
import SQLite
import ZeroMQ

// The end of a loop turn: commit the journal once, then deliver and acknowledge; or, when the commit fails,
// withdraw everything the turn did so memory matches the journal again.
extension Broker {
    /// Commits the turn's journal writes, then delivers and acknowledges.
    func finishTurn() {
        if !rosterRetry.isEmpty {
            let retry = rosterRetry
            rosterRetry.removeAll()
            for (family, guardian) in retry {
                let address = "guardian/\(guardian)"
                guard let owner = mailboxes[address]?.owner, owner.isAlive, owner.addresses[address] == family else {
                    continue
                }
                addToRoster(family: family, guardian: guardian)
            }
        }
        if journal.writeFailures == turnWriteFailures {
            if !turnAccepted.isEmpty { try? journal.rememberAccepted(turnAccepted.lazy.map(\.id), at: turnDate) }
            if deletesAreDue { try? journal.deleteMessages(seqs: pendingDeletes) }
        }
        if deletesAreDue || journal.writeFailures != turnWriteFailures {
            pendingDeletes.removeAll(keepingCapacity: true)
            pendingDeletesSince = nil
        } else if !pendingDeletes.isEmpty, pendingDeletesSince == nil {
            pendingDeletesSince = turnNow
        }
        let writeFailed = journal.writeFailures != turnWriteFailures
        if journal.hasPendingWrites || writeFailed {
            do {
                if writeFailed {
                    // A write of this turn failed and rolled back the turn's transaction; whatever was written after
                    // it is only part of the turn, so it goes too.
                    journal.discardPendingWrites()
                    throw journal.lastWriteFailure ?? WireError(.storageFailed, "a journal write failed")
                }
                if let took = try journal.commitIfNeeded() {
                    stats.recordCommit(took)
                    metrics?.commit.observe(took)
                    turn.commit += took
                }
                crashPoints.committed(acks: !turnAccepted.isEmpty)
            } catch let error as SQLiteError where error.isIOError {
                // After a failed fsync the kernel may have dropped the dirty pages, so a retried fsync that
                // succeeds proves nothing: acknowledge, deliver and refuse nothing of this turn, and stop. The
                // senders retry against the restarted broker, which reads what the disk really holds.
                journalIOFailure = JournalError(
                    .ioFailure,
                    "\(error); nothing of this turn (\(turnAccepted.count) messages) was acknowledged; the broker "
                        + "stops: restart it on its journal"
                )
                return
            } catch {
                withdrawTurn(error)
            }
        }
        // Journaled: what this turn committed (a withdrawn turn's envelopes are marked and skipped).
        if trace != nil { traceJournaled() }
        clearTurn()
        turnWriteFailures = journal.writeFailures
        // Deliveries first: they are on the critical path of a round trip, and they carry pending ACK ids to the
        // peers that read them. The senders' ACKs only free their retry timers. Both go out after the commit.
        pumpDirty()
        flushAcks()
        trace?.flush()
    }

    /// Whether this turn deletes the acknowledged copies: when it commits anyway (the delete rides on that commit),
    /// or when they have waited ``BrokerConfiguration/ackedDeleteDelay`` or number ``deleteBatch``. Until then an
    /// acknowledged copy stays in the journal, which after a crash only means one more redelivery, as a crash
    /// between the ACK and its turn's commit would.
    var deletesAreDue: Bool {
        guard !pendingDeletes.isEmpty else { return false }
        if journal.hasPendingWrites || pendingDeletes.count >= Self.deleteBatch { return true }
        guard let since = pendingDeletesSince else { return configuration.ackedDeleteDelay <= .zero }
        return turnNow - since >= configuration.ackedDeleteDelay
    }

    /// How many acknowledged copies may wait.
    static let deleteBatch = 1024

    /// Sends the pending ACKs no DELIVER carried: at once, or for a peer that reads carried ACK ids, once they
    /// have waited `ackDelay` (a DELIVER to it may come first and carry them).
    func flushAcks() {
        guard !sessionsWithAcks.isEmpty else { return }
        let holdUntil = turnNow - configuration.ackDelay
        var kept = 0
        for session in sessionsWithAcks {
            guard session.isAlive, !session.pendingAcks.isEmpty else {
                session.isInAckList = false
                continue
            }
            if session.carriedAcks, session.acksSince > holdUntil {
                sessionsWithAcks[kept] = session
                kept += 1
                continue
            }
            sendAcks(of: session)
            session.isInAckList = false
        }
        sessionsWithAcks.removeLast(sessionsWithAcks.count - kept)
    }

    /// Sends a session's pending ACK ids now, in ACKs of at most `maxAckIDs` ids (everything they acknowledge
    /// must be committed).
    func sendAcks(of session: Session) {
        var start = 0
        while start < session.pendingAcks.count {
            let end = min(start + configuration.limits.maxAckIDs, session.pendingAcks.count)
            output.removeAll()
            output.append(session.identity)
            WireEncoder.ack(session.pendingAcks[start..<end], into: &output)
            sendToPeer(session)
            start = end
        }
        session.pendingAcks.removeAll(keepingCapacity: true)
    }

    func clearTurn() {
        if !turnEnvelopes.isEmpty { turnEnvelopes.removeAll(keepingCapacity: true) }
        if !turnAccepted.isEmpty { turnAccepted.removeAll(keepingCapacity: true) }
        if !turnLedgerUndo.isEmpty { turnLedgerUndo.removeAll(keepingCapacity: true) }
        if !turnSpills.isEmpty { turnSpills.removeAll(keepingCapacity: true) }
        if !turnGuardians.isEmpty { turnGuardians.removeAll(keepingCapacity: true) }
    }

    /// Adds a guardian to its family's roster, in memory and in this turn's journal transaction. A guardian new to
    /// the roster also gets the family's questions that were sent while it had no guardian and are still open
    /// (docs/broker.md, "Family rosters"), in this turn, so they are journaled with the roster row.
    func addToRoster(family: String, guardian: String) {
        guard ledger.addGuardian(family: family, guardian: guardian) else { return }
        turnGuardians.append((family, guardian))
        try? journal.addGuardian(family: family, guardian: guardian)
        let waiting = ledger.questionsAwaitingGuardians(family: family)
        guard !waiting.isEmpty else { return }
        let now = configuration.clock.now.truncatedToWireMilliseconds
        for questionID in waiting {
            guard let entry = ledger.entries[questionID], now < entry.expiresAt else { continue }
            do {
                let body = try guardianQuestionBody(questionID, entry, sentAt: now)
                try routeQuestion(questionID, body: body, expiresAt: entry.expiresAt, to: guardian)
            } catch {
                logger.error(
                    "a question sent before any guardian registered could not be delivered",
                    metadata: ["question": "\(questionID.uuid)", "guardian": "\(guardian)", "error": "\(error)"]
                )
            }
        }
    }

    /// The journal could not commit (or a write of the turn failed, which rolled the whole turn back): nothing
    /// from this turn is acknowledged or delivered. Its SENDs get `storage-failed`, its envelopes are withdrawn and
    /// the ledger entries it changed are put back as they were, so memory matches the journal again.
    func withdrawTurn(_ error: any Error) {
        stats.storageFailures += 1
        logger.error(
            "journal commit failed; refusing this turn's messages",
            metadata: ["error": "\(error)", "messages": "\(turnAccepted.count)"]
        )
        let failure = WireError(.storageFailed, "the broker could not write its journal: \(error)")
        for envelope in turnEnvelopes { envelope.withdrawn = true }
        // Spilled rows went with the rolled-back transaction. A mailbox's spill cursor stays valid: either earlier
        // turns spilled too (the cursor is theirs) or nothing is spilled any more.
        for mailbox in turnSpills {
            mailbox.spilled -= 1
            totalSpilled -= 1
        }
        for (id, previous) in turnLedgerUndo {
            if let previous {
                // Its deadline may have been consumed by an expiry of this turn: it comes again shortly.
                ledger.putBack(id, previous, notBefore: configuration.clock.now.addingTimeInterval(0.25))
            } else {
                ledger.remove(id)
                questionTraces[id] = nil
            }
        }
        // The roster rows went with the rolled-back transaction; memory follows, and the next turn writes them again.
        for (family, guardian) in turnGuardians {
            ledger.removeGuardian(family: family, guardian: guardian)
            rosterRetry.append((family, guardian))
        }
        for (id, session) in turnAccepted {
            accepted.remove(id)
            session.pendingAcks.removeAll { $0 == id }
            nack(session: session, id: id, failure)
        }
    }
}
