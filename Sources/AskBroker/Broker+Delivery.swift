import AskProtocol
import Foundation
import ZeroMQ

// Delivery and mailboxes: routing a message to its mailbox (journaled, or spilled to the journal only), pumping
// dirty mailboxes to their owners' peers, reading spilled messages back, and ACKs of deliveries.
extension Broker {
    /// Queues a message for `to` (journaled when durable), encoding its header.
    /// - Throws: ``WireError`` `busy` when a queue limit is reached, `bad-address` for the broker's own address.
    func route(
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        trace: TraceContext? = nil,
        body: [UInt8],
        expiresAt: Date? = nil,
        limitsKey: String? = nil
    ) throws(WireError) {
        let mailbox = try routeTarget(from: from, to: to, kind: kind, limitsKey: limitsKey)
        let envelope = Envelope(
            seq: nextSeq,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            trace: trace,
            body: body,
            createdAt: turnDate.timeIntervalSince1970,
            persistent: journal.durability != .off
        )
        try enqueue(envelope, body: body, in: mailbox, expiresAt: expiresAt)
    }

    /// Queues a message whose header (as the sender wrote it) and body are already packed in one array.
    func route(
        id: MessageID,
        from: String,
        to: String,
        kind: String,
        subject: MessageID?,
        packed: [UInt8],
        headerCount: Int
    ) throws(WireError) {
        let mailbox = try routeTarget(from: from, to: to, kind: kind, limitsKey: nil)
        let envelope = Envelope(
            seq: nextSeq,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            packed: packed,
            headerCount: headerCount,
            createdAt: turnDate.timeIntervalSince1970,
            persistent: journal.durability != .off
        )
        try enqueue(envelope, body: nil, in: mailbox, expiresAt: nil)
    }

    /// The mailbox a message for `to` goes to, after the route and queue-limit checks.
    func routeTarget(from: String, to: String, kind: String, limitsKey: String?) throws(WireError) -> Mailbox {
        guard to != "broker" else { throw WireError(.badAddress, "kind '\(kind)' is not one the broker handles") }
        // Byte comparisons: String.hasPrefix compares Unicode characters, which is slower and not needed here.
        guard to == "limits" || Self.routableRoles.contains(where: { to.utf8.starts(with: $0.utf8) }) else {
            throw WireError(
                .noRoute,
                "no role serves '\(to)'; addresses are child/, guardian/, limits/, observer/, echo/ or client/ ids, or the limits service"
            )
        }
        let target = to == "limits" ? limitsTarget(for: limitsKey ?? from) : to
        let mailbox = mailbox(for: target)
        // With a journal, a message addressed to its mailbox directly spills instead (journal only, see
        // `enqueue`); service messages and messages without a journal are refused.
        guard mailbox.memoryCount < configuration.maxQueuedPerAddress || canSpill(to: to, in: mailbox) else {
            stats.busy += 1
            throw WireError(.busy, "'\(target)' has \(configuration.maxQueuedPerAddress) messages queued; retry later")
        }
        guard totalQueued + totalSpilled < configuration.maxQueuedTotal else {
            stats.busy += 1
            throw WireError(.busy, "the broker holds \(configuration.maxQueuedTotal) queued messages; retry later")
        }
        return mailbox
    }

    /// Whether a message for `to` may live in the journal only when it goes to `mailbox`: with a journal, for an
    /// address written directly (a message for the `limits` service stays in memory: it is re-routed when limits
    /// workers come and go).
    @inline(__always)
    func canSpill(to: String, in mailbox: Mailbox) -> Bool {
        // `to == "limits"` only meets its mailbox's address when no limits worker is alive (the parked `limits`
        // mailbox): kept in memory, so the re-routing that follows a limits worker's HELLO finds it.
        journal.durability != .off && to == mailbox.address && to != "limits"
    }

    /// Journals (when durable) and queues an envelope. `body` saves a copy when the caller still has it.
    ///
    /// Spill: the envelope stays in the journal only, and not in memory, when its mailbox already has spilled
    /// messages (order), when nobody serves the address now, or when the in-memory queue holds
    /// `maxQueuedPerAddress`. ``pump(_:)`` reads spilled messages back, in order, as the owner takes them.
    func enqueue(_ envelope: Envelope, body: [UInt8]?, in mailbox: Mailbox, expiresAt: Date?) throws(WireError) {
        envelope.expiresAt = expiresAt?.timeIntervalSince1970
        nextSeq += 1
        if envelope.persistent {
            let spills =
                canSpill(to: envelope.to, in: mailbox)
                && (mailbox.spilled > 0 || mailbox.owner?.isAlive != true
                    || mailbox.memoryCount >= configuration.maxQueuedPerAddress)
            let stored = envelope.stored(body: body)
            // A spilled copy is read back per recipient from the message table; one that goes to memory joins the
            // turn's message log row (Journal/MessageLog.swift).
            do {
                if spills { try journal.storeMessage(stored) } else { journal.logMessage(stored) }
            } catch {
                throw WireError(.storageFailed, "the journal refused the message: \(error)")
            }
            if trace != nil {
                trace(.routed, envelope, to: mailbox.address)
                turnTraced.append(envelope)
            }
            if spills {
                mailbox.noteSpilled(seq: envelope.seq)
                totalSpilled += 1
                stats.spilled += 1
                turnSpills.append(mailbox)
                if mailbox.owner?.isAlive == true { markDirty(mailbox) }
                return
            }
        } else if trace != nil {
            trace(.routed, envelope, to: mailbox.address)
        }
        mailbox.enqueue(envelope)
        if envelope.persistent { turnEnvelopes.append(envelope) }
        totalQueued += 1
        markDirty(mailbox)
    }

    /// An ACK (or, with `refusal`, the code of a NACK) of a delivery by its recipient: the message is done.
    func acknowledge(_ id: MessageID, by session: Session, refusal: String? = nil) {
        guard let mailbox = inflightIndex[id], mailbox.owner === session,
            let envelope = mailbox.inflight.removeValue(forKey: id)
        else {
            stats.staleAcks += 1
            return
        }
        if trace != nil { trace(refusal == nil ? .acked : .refused, envelope, to: mailbox.address, code: refusal) }
        inflightIndex.removeValue(forKey: id)
        totalQueued -= 1
        stats.delivered += 1
        if envelope.persistent { pendingDeletes.append(envelope.seq) }
        markDirty(mailbox)
    }

    func mailbox(for address: String) -> Mailbox {
        if let mailbox = mailboxes[address] { return mailbox }
        let mailbox = Mailbox(address: address)
        mailboxes[address] = mailbox
        return mailbox
    }

    func markDirty(_ mailbox: Mailbox) {
        if !mailbox.isDirty {
            mailbox.isDirty = true
            dirty.append(mailbox)
        }
    }

    func pumpDirty() {
        guard !dirty.isEmpty else { return }
        swap(&dirty, &pumping)
        for mailbox in pumping { mailbox.isDirty = false }
        for mailbox in pumping { pump(mailbox) }
        pumping.removeAll(keepingCapacity: true)
    }

    func pump(_ mailbox: Mailbox) {
        guard let owner = mailbox.owner, owner.isAlive else { return }
        while mailbox.inflight.count < owner.window, let envelope = mailbox.dequeue() ?? refill(mailbox) {
            if envelope.withdrawn {
                totalQueued -= 1
                continue
            }
            if let expiresAt = envelope.expiresAt, expiresAt <= configuration.clock.now.timeIntervalSince1970 {
                // Past its deadline (a question for a guardian who was away): nobody may act on it any more.
                totalQueued -= 1
                stats.expiredUndelivered += 1
                if trace != nil { trace(.expired, envelope, to: mailbox.address) }
                if envelope.persistent { pendingDeletes.append(envelope.seq) }
                continue
            }
            guard deliver(envelope, to: owner, in: mailbox) else {
                mailbox.pushFront(envelope)
                if owner.isAlive { markDirty(mailbox) }
                return
            }
            mailbox.inflight[envelope.id] = envelope
            inflightIndex[envelope.id] = mailbox
        }
    }

    /// Reads the next spilled messages of `mailbox` back from the journal into memory (as many as the per-address
    /// limit leaves room for, at most ``refillBatch``) and returns the first.
    func refill(_ mailbox: Mailbox) -> Envelope? {
        guard mailbox.spilled > 0 else { return nil }
        let room = max(1, min(Self.refillBatch, configuration.maxQueuedPerAddress - mailbox.memoryCount))
        let rows: [StoredMessage]
        do {
            rows = try journal.loadMessages(to: mailbox.address, fromSeq: mailbox.spillCursor, limit: room)
        } catch {
            logger.error(
                "cannot read spilled messages back",
                metadata: ["address": "\(mailbox.address)", "error": "\(error)"]
            )
            return nil
        }
        for stored in rows { mailbox.enqueue(Envelope(stored: stored)) }
        var left = max(0, mailbox.spilled - rows.count)
        if rows.count < room, left > 0 {
            // The journal has no more for this address than it gave: the count was off (it cannot be, but never
            // loop on it).
            logger.warning(
                "spill count did not match the journal",
                metadata: ["address": "\(mailbox.address)", "counted": "\(mailbox.spilled)", "found": "\(rows.count)"]
            )
            left = 0
        }
        totalSpilled -= mailbox.spilled - left
        mailbox.spilled = left
        if let last = rows.last { mailbox.spillCursor = last.seq + 1 }
        totalQueued += rows.count
        stats.unspilled += rows.count
        return mailbox.dequeue()
    }

    /// Spilled messages read back per journal query.
    static let refillBatch = 1024

    /// Sends one DELIVER of an envelope of `mailbox`. - Returns: `false` if the peer cannot take it now (or is gone).
    func deliver(_ envelope: Envelope, to owner: Session, in mailbox: Mailbox) -> Bool {
        output.removeAll()
        output.append(owner.identity)
        // Pending ACK ids ride along when the peer reads them, and only when everything they acknowledge is
        // committed (no write of the turn is waiting).
        let carried =
            owner.carriedAcks && !journal.hasPendingWrites
            ? min(owner.pendingAcks.count, configuration.limits.maxAckIDs) : 0
        envelope.appendDeliver(acks: owner.pendingAcks[..<carried], to: &output)
        // The time the DELIVER left, not the time after the send returned: the recipient may have read it by then.
        let sending = trace != nil ? Date() : nil
        guard sendToPeer(owner) else { return false }
        if carried > 0 { owner.pendingAcks.removeFirst(carried) }
        if let metrics, envelope.deliveredAt == nil { metrics.routed(createdAt: envelope.createdAt) }
        if envelope.seq <= reached.storedBeforeStart, envelope.seq > 0, envelope.deliveredAt == nil {
            noteRestartCrossing(envelope)
        }
        envelope.deliveredAt = turnNow
        if let sending { trace(.delivered, envelope, to: mailbox.address, at: sending) }
        if crashPoints.isArmed { crashPoints.delivered(kind: envelope.kind, subject: envelope.subject) }
        return true
    }

    /// Sends `output` to a session's peer without blocking. A peer that has gone is ended.
    @discardableResult
    func sendToPeer(_ session: Session) -> Bool {
        do {
            let sent = try socket.send(output, .dontWait)
            if sent { session.lastSent = turnNow }
            return sent
        } catch let error as ZMQError where error.isHostUnreachable {
            endSession(session, reason: "peer disconnected")
            return false
        } catch {
            logger.error("send failed", metadata: ["worker": "\(session.worker)", "error": "\(error)"])
            return false
        }
    }
}

extension Envelope {
    /// The journal's copy of this envelope; `body`, when the caller has it, saves copying it out of ``packed``.
    func stored(body: [UInt8]? = nil) -> StoredMessage {
        StoredMessage(
            seq: seq,
            id: id,
            from: from,
            to: to,
            kind: kind,
            subject: subject,
            body: body ?? self.body,
            createdAt: Date(timeIntervalSince1970: createdAt),
            expiresAt: expiresAt.map { Date(timeIntervalSince1970: $0) },
            trace: trace
        )
    }
}
