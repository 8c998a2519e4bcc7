import AskBasics
import AskProtocol
import Foundation
import ZeroMQ

// Input and validation: each message read from the ROUTER socket is parsed and checked, then dispatched
// (HELLO, SEND, ACK); what is refused gets one NACK or BYE and changes nothing.
extension Broker {
    func handleInput() {
        guard input.count >= 1 else { return }
        let peer = input.withFrame(0) { PeerID($0) }
        let session = sessions[peer]
        let parsed: ParsedFrames
        do {
            parsed = try WireParser.parse(input, base: 1, limits: configuration.limits)
        } catch {
            // A SEND whose header was readable gets its id back, so its sender can tie the refusal to it.
            refuseInput(error, session: session, id: WireParser.idOfRefused(input, base: 1))
            return
        }
        if let session { session.lastHeard = turnNow }
        switch parsed.command {
        case .heartbeat:
            if session == nil {
                refuseInput(WireError(.notRegistered, "this connection has no session; send HELLO"), session: nil)
            }
        case .hello:
            handleHello(peer: peer, parsed: parsed, existing: session)
        case .send:
            guard let session else {
                refuseInput(WireError(.notRegistered, "SEND before HELLO: register first"), session: nil, id: parsed.id)
                return
            }
            handleSend(session: session, parsed: parsed)
        case .ack:
            guard let session else {
                refuseInput(WireError(.notRegistered, "ACK before HELLO: register first"), session: nil)
                return
            }
            handleAck(session: session, parsed: parsed)
        case .nack:
            // A worker refused a delivery it cannot process; it will never ack it, so stop retrying.
            guard let session, let id = parsed.id else { return }
            stats.refusedByWorkers += 1
            if logger.logLevel <= .warning, let suppressed = refusalLog.admit(session.identity, now: turnNow) {
                logger.warning(
                    "worker refused a delivery",
                    metadata: [
                        "worker": "\(session.worker)", "id": "\(id)", "code": "\(input.string(parsed.codeFrame))",
                        "reason": "\(input.string(parsed.reasonFrame))", "suppressed": "\(suppressed)",
                    ]
                )
            }
            if moves.isActive, session.role == .limits {
                noteLimitsReadRefused(
                    id,
                    code: input.string(parsed.codeFrame),
                    reason: input.string(parsed.reasonFrame)
                )
            }
            acknowledge(id, by: session, refusal: trace == nil ? nil : input.string(parsed.codeFrame))
        case .bye:
            if let session { endSession(session, reason: "said bye") }
        case .welcome, .deliver:
            refuseInput(
                WireError(.forbidden, "\(parsed.command) is sent by the broker, not to it"),
                session: session,
                id: parsed.id
            )
        }
    }

    /// Counts, logs and answers bad input; changes nothing else.
    func refuseInput(_ error: WireError, session: Session?, id: MessageID? = nil) {
        stats.countRefusal(error.code)
        if let trace, let id {
            trace.record(.refused, id: id.uuid, from: "broker", to: session?.worker, code: error.code.rawValue)
        }
        if logger.logLevel <= .info, let suppressed = refusalLog.admit(Array(input[0]), now: turnNow) {
            logger.info(
                "refused input",
                metadata: [
                    "code": "\(error.code.rawValue)", "peer": "\(session?.worker ?? "unregistered")",
                    "reason": "\(error.reason)",
                    "suppressed": "\(suppressed)",
                ]
            )
        }
        output.removeAll()
        input.withFrame(0) { output.append($0) }
        WireEncoder.nack(id: id, error, into: &output)
        _ = try? socket.send(output, .dontWait)
    }

    /// Refuses a SEND (or the message `id` names) to its session; `kind`, `question`, `from` and `to`, when known,
    /// go into its `refused` trace line.
    func nack(
        session: Session,
        id: MessageID?,
        _ error: WireError,
        kind: String? = nil,
        question: MessageID? = nil,
        from: String? = nil,
        to: String? = nil,
        trace traceContext: TraceContext? = nil
    ) {
        stats.countRefusal(error.code)
        if let trace {
            trace.record(
                .refused,
                kind: kind,
                question: question?.uuid,
                id: id?.uuid,
                from: from ?? session.worker,
                to: to,
                code: error.code.rawValue,
                trace: traceContext
            )
        }
        output.removeAll()
        output.append(session.identity)
        WireEncoder.nack(id: id, error, into: &output)
        sendToPeer(session)
    }

    func handleHello(peer: PeerID, parsed: ParsedFrames, existing: Session?) {
        let hello: Hello
        do {
            hello = try input.withFrame(parsed.bodyFrame) {
                try SessionJSON.decode(Hello.self, from: $0.bindMemory(to: UInt8.self))
            }
        } catch let error as WireError {
            refuseInput(error, session: existing)
            return
        } catch {
            refuseInput(WireError(.invalidJSON, "\(error)"), session: existing)
            return
        }
        if let problem = helloProblem(hello, peer: peer) {
            refuseInput(problem, session: existing)
            return
        }
        var principalKey: String?
        if let authenticator {
            // Who the peer is comes from its authenticated key, never from what the HELLO claims.
            let key = socket.lastFrameProperty("User-Id")
            switch authenticator.authorize(hello, key: key) {
            case .failure(let refusal):
                if logger.logLevel <= .notice, let suppressed = refusalLog.admit(Array(input[0]), now: turnNow) {
                    logger.notice(
                        "hello refused by principal",
                        metadata: [
                            "worker": "\(hello.worker)", "reason": "\(refusal.reason)", "suppressed": "\(suppressed)",
                        ]
                    )
                }
                refuseInput(refusal, session: existing)
                return
            case .success:
                principalKey = key
            }
        }
        if let existing { endSession(existing, reason: "registered again", requeue: true) }
        let identity = Array(input[0])
        let window = min(hello.window ?? configuration.window, configuration.window)
        let session = Session(
            peer: peer,
            identity: identity,
            serial: nextSerial,
            hello: hello,
            window: max(1, window),
            now: .now
        )
        nextSerial += 1
        session.principalKey = principalKey
        sessions[peer] = session
        sessionsByRole[session.role, default: 0] += 1
        for claim in hello.endpoints {
            session.addresses[claim.address] = claim.family
            let mailbox = mailbox(for: claim.address)
            mailbox.owner = session
            markDirty(mailbox)
            if hello.role == .guardian, let family = claim.family {
                addToRoster(family: family, guardian: String(claim.address.dropFirst("guardian/".count)))
            }
        }
        if hello.role == .limits { rerouteParkedLimitsWork() }
        if hello.role == .child { recordChildren(hello.endpoints) }
        stats.sessionsOpened += 1
        logger.info(
            "session registered",
            metadata: [
                "worker": "\(hello.worker)", "role": "\(hello.role.rawValue)", "addresses": "\(hello.endpoints.count)",
            ]
        )
        let welcome = Welcome(
            session: "\(instanceID)-\(session.serial)",
            heartbeatMs: configuration.heartbeatInterval.milliseconds,
            liveness: configuration.liveness,
            window: session.window,
            broker: instanceID,
            carriedAcks: true,
            brokers: moves.list?.description,
            attempt: hello.attempt
        )
        output.removeAll()
        output.append(identity)
        WireEncoder.session(.welcome, body: SessionJSON.encode(welcome), into: &output)
        sendToPeer(session)
    }

    func helloProblem(_ hello: Hello, peer: PeerID) -> WireError? {
        guard hello.version == Int(Wire.version) else {
            return WireError(
                .unsupportedVersion,
                "HELLO version \(hello.version) is not supported; this broker speaks \(Wire.version)"
            )
        }
        guard !hello.endpoints.isEmpty else { return WireError(.badHello, "HELLO lists no endpoints") }
        guard hello.endpoints.count <= 200_000 else {
            return WireError(.badHello, "HELLO lists more than 200000 endpoints")
        }
        var seen: Set<String> = []
        var familiesOfThisShard: Set<String> = []
        for claim in hello.endpoints {
            guard seen.insert(claim.address).inserted else {
                return WireError(.badHello, "HELLO lists '\(claim.address)' twice")
            }
            guard Self.isValidAddress(claim.address) else {
                return WireError(.badHello, "'\(claim.address)' is not 'role/id' (id: A-Z a-z 0-9 . _ -, 1-64 bytes)")
            }
            guard claim.address.hasPrefix(hello.role.addressPrefix) else {
                return WireError(.forbidden, "role \(hello.role.rawValue) may not serve '\(claim.address)'")
            }
            if hello.role == .child || hello.role == .guardian {
                guard let family = claim.family, Address.isValidID(family) else {
                    return WireError(.forbidden, "'\(claim.address)' needs a family (A-Z a-z 0-9 . _ -, 1-64 bytes)")
                }
                if let problem = familyProblem(family: family, claim: claim.address, known: &familiesOfThisShard) {
                    return problem
                }
            }
            if let owner = mailboxes[claim.address]?.owner, owner.isAlive, owner.peer != peer {
                return WireError(.addressTaken, "'\(claim.address)' is served by a live session (\(owner.worker))")
            }
        }
        return nil
    }

    /// Address prefixes of the roles that serve addresses.
    static let routableRoles = SessionRole.allCases.map(\.addressPrefix)

    /// `role/id` with a valid id; whether the role may serve it is checked against the session's role.
    static func isValidAddress(_ address: String) -> Bool {
        guard let slash = address.firstIndex(of: "/") else { return false }
        return Address.isValidID(address[address.index(after: slash)...])
    }

    func handleSend(session: Session, parsed: ParsedFrames) {
        guard let id = parsed.id else { return }
        // Acknowledgements carried by the SEND count whatever becomes of the SEND itself.
        if parsed.carriesAcks { handleAck(session: session, parsed: parsed) }
        let from = input.from(parsed)
        if let trace {
            trace.record(
                .received,
                kind: input.kind(parsed),
                question: parsed.subject?.uuid,
                id: id.uuid,
                from: from,
                to: input.to(parsed),
                trace: parsed.trace
            )
        }
        guard session.addresses[from] != nil else {
            nack(
                session: session,
                id: id,
                WireError(.forbidden, "this session does not serve '\(from)'"),
                from: from,
                trace: parsed.trace
            )
            return
        }
        if moves.isActive, let problem = moveProblem(family: session.addresses[from] ?? nil, to: input.to(parsed)) {
            nack(session: session, id: id, problem, kind: input.kind(parsed), from: from, trace: parsed.trace)
            return
        }
        // One probe of the (large, so cache-missing) set of accepted ids: inserted now, taken out again if the SEND
        // is refused.
        guard accepted.insert(id) else {
            // A retry after a lost ACK: acknowledge again, store nothing.
            stats.duplicates += 1
            queueAck(id, for: session)
            return
        }
        let to = input.to(parsed)
        let kind = input.kind(parsed)
        // Linear scans of a few short strings: no hashing per message.
        guard !QuestionLedger.brokerOnlyKinds.contains(kind) else {
            accepted.remove(id)
            nack(
                session: session,
                id: id,
                WireError(.forbidden, "only the broker sends '\(kind)'"),
                kind: kind,
                question: parsed.subject,
                from: from,
                to: to,
                trace: parsed.trace
            )
            return
        }
        do {
            if to == "broker" || QuestionLedger.watchedKinds.contains(kind) {
                try ledgerSend(session: session, parsed: parsed, id: id, from: from, to: to, kind: kind)
            } else {
                // The DELIVER forwards the SEND's header bytes unchanged: copy header and body (adjacent unless
                // ACK ids lie between them) at once.
                let header = parsed.headerRange
                let body = input.range(of: parsed.bodyFrame)
                var packed: [UInt8]
                if parsed.carriesAcks {
                    packed = []
                    packed.reserveCapacity(header.count + body.count)
                    packed.append(contentsOf: input.storage[header])
                    packed.append(contentsOf: input.storage[body])
                } else {
                    packed = Array(input.storage[header.lowerBound..<body.upperBound])
                }
                try route(
                    id: id,
                    from: from,
                    to: to,
                    kind: kind,
                    subject: parsed.subject,
                    packed: packed,
                    headerCount: header.count
                )
            }
        } catch {
            accepted.remove(id)
            nack(
                session: session,
                id: id,
                error,
                kind: kind,
                question: parsed.subject,
                from: from,
                to: to,
                trace: parsed.trace
            )
            return
        }
        accept(id, from: session)
        stats.countRouted(kind)
        crashPoints.hit(.accept)
    }

    /// Marks a SEND accepted (already in `accepted`): remembered for deduplication, acknowledged after the commit.
    func accept(_ id: MessageID, from session: Session) {
        accepted.record(id, at: turnNow)
        // Journaled for deduplication across restarts in one row per turn, written by `finishTurn`.
        if journal.durability != .off { turnAccepted.append((id, session)) }
        queueAck(id, for: session)
    }

    func queueAck(_ id: MessageID, for session: Session) {
        if session.pendingAcks.isEmpty { session.acksSince = turnNow }
        if !session.isInAckList {
            session.isInAckList = true
            sessionsWithAcks.append(session)
        }
        session.pendingAcks.append(id)
    }

    func handleAck(session: Session, parsed: ParsedFrames) {
        input.forEachAckID(parsed) { acknowledge($0, by: session) }
    }
}
