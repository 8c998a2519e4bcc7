import AskBasics
import AskProtocol
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

// Start and end of a broker's life: rebuilding memory (queues, ledger, accepted ids) from the journal, and the
// drain at shutdown.
extension Broker {
    /// Rebuilds memory from the journal. Queued messages are not read into memory: nobody is connected yet, so
    /// every address's messages start spilled (counted, read back when its owner registers), except those for the
    /// `limits` service, which are read now to be routed to whichever limits worker registers.
    func recover() throws {
        let recoveryStarted = ContinuousClock.now
        // The message log's live entries join the message table, which the rest of recovery reads.
        let folded = try journal.foldMessageLog()
        let horizon = Date().addingTimeInterval(-(configuration.ackTimeout * 10).seconds)
        // The message summary and the accepted ids on a second connection and thread, while this one reads the
        // ledger: they do not depend on each other.
        let side = journal.path.map { RecoveryRead(path: $0, acceptedSince: horizon) }
        let openQuestions = try recoverLedger()
        try recoverMoves()
        let ledgerRead = ContinuousClock.now
        let tables = try side?.wait() ?? Journal.RecoveryTables()
        let waited = ContinuousClock.now - ledgerRead
        var messages = 0
        for (recipient, count, firstSeq) in tables.summary {
            messages += count
            let mailbox = mailbox(for: recipient)
            if recipient == "limits" {
                for stored in try journal.loadMessages(to: recipient, fromSeq: 0, limit: Int(Int32.max)) {
                    mailbox.enqueue(Envelope(stored: stored))
                    totalQueued += 1
                }
            } else {
                mailbox.spilled = count
                mailbox.spillCursor = firstSeq
                totalSpilled += count
            }
        }
        nextSeq = max(nextSeq, tables.maxSeq + 1)
        reached.storedBeforeStart = tables.maxSeq
        accepted = tables.accepted
        if messages > 0 || openQuestions > 0 {
            logger.notice(
                "recovered from journal",
                metadata: [
                    "messages": "\(messages)", "open_questions": "\(openQuestions)",
                    "accepted_ids": "\(accepted.count)", "from_log": "\(folded)",
                    "ms": "\((ContinuousClock.now - recoveryStarted).milliseconds)",
                    "ledger_ms": "\((ledgerRead - recoveryStarted).milliseconds)",
                    "messages_and_ids_ms": "\(tables.duration.milliseconds)",
                    "waited_ms": "\(waited.milliseconds)",
                ]
            )
        }
    }

    /// Loads the family rosters, the open questions and the questions closed within the retention from the journal
    /// (restart), without decoding any JSON; older closed questions are deleted first.
    /// - Returns: the number of open questions.
    func recoverLedger() throws -> Int {
        let clock = ContinuousClock()
        let started = clock.now
        var guardians = 0
        for (family, members) in try journal.loadGuardians() {
            for guardian in members where ledger.addGuardian(family: family, guardian: guardian) { guardians += 1 }
        }
        let rostersLoaded = clock.now
        let deleted = try journal.deleteQuestions(
            closedBefore: configuration.clock.now.addingTimeInterval(-configuration.closedRetention.seconds)
        )
        ledger.reserveCapacity(try journal.questionCount())
        let (open, closed) = try ledger.restore(from: journal)
        if open > 0 || guardians > 0 || closed > 0 {
            logger.notice(
                "ledger recovered",
                metadata: [
                    "open_questions": "\(open)", "closed_questions": "\(closed)", "closed_deleted": "\(deleted)",
                    "guardians": "\(guardians)",
                    "rosters_ms": "\((rostersLoaded - started).milliseconds)",
                    "questions_ms": "\((clock.now - rostersLoaded).milliseconds)",
                ]
            )
        }
        return open
    }

    /// How long closing the socket may wait for the BYEs of a stop to leave (milliseconds).
    static let byeLinger: Int32 = 250

    func shutdown() {
        logger.notice("broker stopping", metadata: ["sessions": "\(sessions.count)", "queued": "\(totalQueued)"])
        for session in Array(sessions.values) {
            output.removeAll()
            output.append(session.identity)
            WireEncoder.bye(reason: "broker shutting down", into: &output)
            _ = try? socket.send(output, .dontWait)
        }
        // The BYEs are queued, not yet sent: closing with linger 0 could drop them when the I/O thread has not run
        // yet (a busy machine). Wait for them a moment at close, for peers that are still connected.
        try? socket.set(.linger, Self.byeLinger)
        if !pendingDeletes.isEmpty { try? journal.deleteMessages(seqs: pendingDeletes) }
        do { _ = try journal.commitIfNeeded() } catch {
            logger.error("final journal commit failed", metadata: ["error": "\(error)"])
        }
        metrics?.server.stop()
        trace?.flush()
        otlpExport?.stop()
        logger.notice("broker stopped")
    }
}

/// The side read of a restart (``Journal/readRecoveryTables(path:acceptedSince:)``) on a thread of its own.
final class RecoveryRead: Sendable {
    private let result = Mutex<Result<Journal.RecoveryTables, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(path: String, acceptedSince: Date) {
        startThread(name: "askrelay-recovery") { [self] in
            let read = Result { try Journal.readRecoveryTables(path: path, acceptedSince: acceptedSince) }
            result.withLock { $0 = read }
            done.signal()
        }
    }

    /// Waits for the read to end. - Throws: what the read threw.
    func wait() throws -> Journal.RecoveryTables {
        done.wait()
        return try result.withLock { $0 }!.get()
    }
}
