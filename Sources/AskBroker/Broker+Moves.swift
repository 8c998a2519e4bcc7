import AskProtocol
import Foundation
import ZeroMQ

/// What a broker knows of the broker list and of families moving between brokers (docs/scaling.md,
/// "Rebalancing"): the journal's `family_move` and `broker_list` tables, in memory.
struct MovesState {
    /// Each family's last move.
    var families: [String: FamilyMoveRecord] = [:]
    /// The list of the last `list` request (`nil`: `--brokers`, as started), and its epoch.
    var list: BrokerList?
    var epoch: Int64 = 0
    /// The list before `list`, until every broker of it has settled.
    var previous: BrokerList?
    /// Brokers of `previous` that hold no family of another broker any more.
    var settled: Set<String> = []
    /// Held families whose state went out with an `export` (memory only: after a restart the mover exports again).
    var exported: Set<String> = []
    /// The addresses of exported families: a message for one is refused (`moving`) until the family is released,
    /// since the exported state would not have it.
    var exportedAddresses: [String: String] = [:]
    /// Children of held families whose limits state this broker asked its limits service for (`limits.read`),
    /// and the states that came back (`limits.state`). Memory only: after a restart the export asks again. A
    /// `limits.admin` for one of these children is refused (`moving`): it would change the state after it was read.
    var limitsAsked: Set<String> = []
    var limitsStates: [String: LimitsState] = [:]
    /// The child each `limits.read` in flight asks about, by the read's id; and each child whose read a limits worker
    /// refused (a NACK: one older than the kind says `unknown-kind`), with the refusal. The export stops waiting for
    /// a refused child and says why instead.
    var limitsReads: [MessageID: String] = [:]
    var limitsRefused: [String: String] = [:]
    /// Questions imported within the accepted-id horizon, with when: a SEND about one that the old broker had
    /// accepted, sent again here because its ACK was lost, is acknowledged again instead of refused (this broker
    /// does not have the old one's accepted ids). Memory only.
    var importedQuestions: [MessageID: ContinuousClock.Instant] = [:]
    /// The earliest import time among them: the housekeeping pass looks at them only once it is past the horizon.
    var oldestImport: ContinuousClock.Instant?

    /// Whether any rule of a move applies: checked before anything else, so a broker that never moved a family
    /// pays one test per SEND.
    var isActive: Bool { !families.isEmpty }
}

/// How this broker treats a family (docs/scaling.md, "Rebalancing").
enum FamilyRoute {
    case serve
    /// Moving to the broker: its SENDs are refused (`moving`) until the move ends.
    case held(BrokerEntry)
    /// Served by that broker (the family moved there, or it is that broker's and never was this one's).
    case moved(BrokerEntry, epoch: Int64)
    /// Another shard's family under a static list (`--brokers`, no move ever announced).
    case wrongShard(BrokerEntry)
}

extension Broker {
    // MARK: Routing rules

    /// The broker this one serves with: the last announced list, else `--brokers`.
    var servingList: BrokerList? { moves.list ?? configuration.brokers }

    func familyRoute(_ family: String) -> FamilyRoute {
        if let move = moves.families[family] {
            let other = Self.entry(move.broker)
            switch move.state {
            case .held: return .held(other)
            case .moved: return .moved(other, epoch: move.epoch)
            case .imported: return .serve
            }
        }
        guard let me = configuration.shardName, let list = servingList else { return .serve }
        if let previous = moves.previous {
            // Until the broker that served the family under the previous list has settled, it is the family's
            // authority: it serves the family until the family moves, then names the new broker.
            let before = previous.shard(family: family)
            if !moves.settled.contains(before.name) {
                return before.name == me ? .serve : .moved(before, epoch: moves.epoch)
            }
        }
        let owner = list.shard(family: family)
        if owner.name == me { return .serve }
        return moves.list == nil ? .wrongShard(owner) : .moved(owner, epoch: moves.epoch)
    }

    /// A `NAME=URL` of the journal or a request (it was checked when it was taken).
    static func entry(_ text: String) -> BrokerEntry {
        guard let equals = text.firstIndex(of: "=") else { return BrokerEntry(name: text, endpoint: "") }
        return BrokerEntry(name: String(text[..<equals]), endpoint: String(text[text.index(after: equals)...]))
    }

    /// The refusal of a HELLO claim of `family`, or `nil` when this broker serves it.
    func familyProblem(family: String, claim: String, known: inout Set<String>) -> WireError? {
        guard !known.contains(family) else { return nil }
        switch familyRoute(family) {
        case .serve:
            known.insert(family)
            return nil
        case .held(let destination):
            return WireError(
                .moving,
                "family '\(family)' of '\(claim)' is moving to broker \(destination): register again shortly"
            )
        case .moved(let broker, let epoch):
            return WireError(.moved, MovedReason.text(family: family, to: broker, epoch: epoch))
        case .wrongShard(let shard):
            return WireError(
                .wrongShard,
                "family '\(family)' of '\(claim)' is served by broker \(shard.name) (\(shard.endpoint)), not by "
                    + "\(configuration.shardName ?? "this one"): give the worker the same --brokers list as the brokers"
            )
        }
    }

    /// The refusal of a SEND from `family` (the sender's, `nil` for a service) to `to` while families move.
    func moveProblem(family: String?, to: String) -> WireError? {
        // A family's sessions end when it moves away (``adminRelease(_:)``): only a held family's SENDs come here.
        if let family, let move = moves.families[family], move.state == .held {
            return WireError(.moving, "family '\(family)' is moving to broker \(move.broker): retry shortly")
        }
        if let owner = moves.exportedAddresses[to] {
            return WireError(.moving, "'\(to)' (family '\(owner)') is moving to another broker: retry shortly")
        }
        return nil
    }

    /// Whether a SEND about `questionID` that its state refuses may be one the old broker accepted and whose ACK was
    /// lost, sent again here after the question's family moved: the question was imported within the accepted-id
    /// horizon. Such a SEND is acknowledged again and changes nothing (docs/scaling.md, "Moving one family").
    func isMovedRetry(_ questionID: MessageID) -> Bool { moves.importedQuestions[questionID] != nil }

    /// Forgets imported questions older than `horizon` (the accepted-id horizon), with the accepted ids.
    func pruneImportedQuestions(olderThan horizon: Duration, now: ContinuousClock.Instant) {
        guard let oldest = moves.oldestImport, now - oldest > horizon else { return }
        moves.importedQuestions = moves.importedQuestions.filter { now - $0.value <= horizon }
        moves.oldestImport = moves.importedQuestions.values.min()
    }

    /// A family held for a move keeps its questions as they are: an expiry waits until the family has moved (its
    /// new broker expires it at once) or the hold is undone.
    func isHeld(_ entry: LedgerEntry) -> Bool {
        moves.families[ledger.family(of: entry)]?.state == .held
    }

    // MARK: Recovery

    func recoverMoves() throws {
        for move in try journal.loadFamilyMoves() { moves.families[move.family] = move }
        if let record = try journal.loadBrokerList() {
            moves.epoch = record.epoch
            moves.list = try? BrokerList(parsing: record.list)
            moves.previous = record.previous.flatMap { try? BrokerList(parsing: $0) }
            moves.settled = Set(record.settled)
        }
        // The questions of imported families count as imported now: a retry of a SEND the old broker accepted may
        // still come after this restart.
        let imported = Set(moves.families.values.filter { $0.state == .imported }.map(\.family))
        if !imported.isEmpty {
            let now = ContinuousClock.now
            for (id, entry) in ledger.entries where imported.contains(ledger.family(of: entry)) {
                moves.importedQuestions[id] = now
            }
            moves.oldestImport = moves.importedQuestions.isEmpty ? nil : now
        }
        if !moves.families.isEmpty || moves.list != nil {
            logger.notice(
                "family moves recovered",
                metadata: [
                    "moves": "\(moves.families.count)", "epoch": "\(moves.epoch)",
                    "held": "\(moves.families.values.filter { $0.state == .held }.count)",
                ]
            )
        }
    }

    // MARK: The admin endpoint

    /// Serves one request of the admin endpoint, after the turn's commit: its journal writes get a commit of their
    /// own before the reply. A request whose commit fails stops the broker (exit 74, as any failed journal write of
    /// a move): restarted on its journal, it is where the last commit left it, and the mover asks again.
    func serveAdmin(_ adminSocket: ZMQSocket) throws {
        guard let (frame, more) = try adminSocket.receive(.dontWait) else { return }
        // Extra frames of a request that is not ours are read and dropped: a REP socket replies once per request.
        var extra = more
        while extra { extra = try adminSocket.receive(.dontWait)?.more ?? false }
        var reply: AdminReply
        do {
            let request = try JSONDecoder().decode(AdminRequest.self, from: Data(frame))
            turnDate = Date()
            reply = try admin(request)
        } catch let error as DecodingError {
            reply = .refused("not an admin request ({\"op\": ...}): \(describeDecoding(error))")
        } catch {
            reply = .refused("\(error)")
        }
        if journal.hasPendingWrites {
            let failures = stats.storageFailures
            finishTurn()
            if stats.storageFailures != failures || journalIOFailure != nil {
                reply = .refused("the journal commit failed; the broker stops: restart it on its journal")
                journalIOFailure = journalIOFailure ?? JournalError(.ioFailure, "a family move's commit failed")
            }
        } else {
            pumpDirty()
        }
        let data = (try? JSONEncoder().encode(reply)) ?? Data("{\"ok\":false}".utf8)
        _ = try adminSocket.send(Array(data), .dontWait)
    }

    func admin(_ request: AdminRequest) throws -> AdminReply {
        let me = configuration.shardName ?? ""
        switch request.op {
        case "status":
            return AdminReply(
                ok: true,
                name: me,
                epoch: moves.epoch,
                families: familiesWithState().sorted(),
                moves: moves.families.values.sorted { $0.family < $1.family }
            )
        case "list": return try adminList(request)
        case "families":
            return AdminReply(ok: true, name: me, epoch: moves.epoch, families: familiesToMove().sorted())
        case "hold": return try adminHold(request)
        case "export": return try adminExport(request)
        case "import": return try adminImport(request)
        case "release": return try adminRelease(request)
        case "unhold": return try adminUnhold(request)
        case "settle": return try adminSettle(request)
        default:
            return .refused(
                "unknown op '\(request.op)': status, list, families, hold, export, import, release, unhold or settle"
            )
        }
    }

    /// The families this broker holds something of: questions (open or within the retention) or a roster.
    func familiesWithState() -> Set<String> {
        var families = Set(ledger.rosters.keys)
        var numbers: Set<UInt32> = []
        for entry in ledger.entries.values { numbers.insert(entry.family) }
        for number in numbers { families.insert(ledger.names[number]) }
        for (family, move) in moves.families where move.state == .moved { families.remove(family) }
        return families
    }

    /// The families this broker holds something of that its list gives to another broker.
    func familiesToMove() -> Set<String> {
        guard let me = configuration.shardName, let list = servingList else { return [] }
        return familiesWithState().filter { list.shard(family: $0).name != me }
    }

    func adminList(_ request: AdminRequest) throws -> AdminReply {
        guard let epoch = request.epoch, let text = request.list else {
            return .refused("list needs epoch and list (NAME=URL,...)")
        }
        guard let me = configuration.shardName else {
            return .refused("this broker has no --shard-name: it serves every family and takes no list")
        }
        let list: BrokerList
        let previous: BrokerList?
        do {
            list = try BrokerList(parsing: text)
            previous = try request.previous.map { try BrokerList(parsing: $0) }
        } catch { return .refused("list: \(error)") }
        guard list.entry(named: me) != nil || previous?.entry(named: me) != nil else {
            return .refused("broker \(me) is in neither the list nor the previous list")
        }
        if epoch == moves.epoch, moves.list == list { return AdminReply(ok: true, name: me, epoch: epoch) }
        guard epoch > moves.epoch else {
            return .refused("epoch \(epoch) is not newer than this broker's list (epoch \(moves.epoch))")
        }
        try journal.saveBrokerList(
            BrokerListRecord(epoch: epoch, list: list.description, previous: previous?.description, settled: [])
        )
        moves.epoch = epoch
        moves.list = list
        moves.previous = previous
        moves.settled = []
        logger.notice(
            "broker list changed",
            metadata: ["epoch": "\(epoch)", "list": "\(list)", "previous": "\(previous?.description ?? "none")"]
        )
        return AdminReply(ok: true, name: me, epoch: epoch)
    }

    func familyAndEpoch(_ request: AdminRequest) -> (String, Int64)? {
        guard let family = request.family, Address.isValidID(family), let epoch = request.epoch else { return nil }
        return (family, epoch)
    }

    func adminHold(_ request: AdminRequest) throws -> AdminReply {
        guard let (family, epoch) = familyAndEpoch(request), let destination = request.destination else {
            return .refused("hold needs family, epoch and destination (NAME=URL)")
        }
        guard journal.durability != .off else { return .refused("moving a family needs a journal (--durability)") }
        if let move = moves.families[family] {
            if move.state == .moved, move.epoch >= epoch { return AdminReply(ok: true, already: true) }
            if move.state == .held {
                guard move.epoch == epoch, move.broker == destination else {
                    return .refused("family '\(family)' is held for a move to \(move.broker) at epoch \(move.epoch)")
                }
                return AdminReply(ok: true)
            }
        }
        let record = FamilyMoveRecord(family: family, state: .held, epoch: epoch, broker: destination)
        try journal.saveFamilyMove(record)
        moves.families[family] = record
        logger.notice("family held for a move", metadata: ["family": "\(family)", "to": "\(destination)"])
        return AdminReply(ok: true)
    }

    /// A family's questions as the ledger holds them (every question row of the journal is in it, open or within
    /// the retention): their ids, their rows' seqs and their children, from one pass over the ledger in memory.
    func familyQuestions(_ family: String) -> (ids: [MessageID], seqs: [Int64], children: Set<String>) {
        var found: (ids: [MessageID], seqs: [Int64], children: Set<String>) = ([], [], [])
        guard let number = ledger.names.existingNumber(family) else { return found }
        for (id, entry) in ledger.entries where entry.family == number {
            found.ids.append(id)
            found.seqs.append(entry.seq)
            found.children.insert(ledger.child(of: entry))
        }
        return found
    }

    /// The addresses of a family: its children's (from its questions), its guardians', and any live session's
    /// claim of it.
    func familyAddresses(_ family: String, children: Set<String>) -> Set<String> {
        var addresses = Set(children.map { "child/\($0)" })
        for guardian in ledger.rosters[family] ?? [] { addresses.insert("guardian/\(guardian)") }
        for session in sessions.values {
            for (address, claimed) in session.addresses where claimed == family { addresses.insert(address) }
        }
        return addresses
    }

    func adminExport(_ request: AdminRequest) throws -> AdminReply {
        guard let (family, epoch) = familyAndEpoch(request) else { return .refused("export needs family and epoch") }
        guard let move = moves.families[family], move.state == .held, move.epoch == epoch else {
            return .refused("family '\(family)' is not held for a move at epoch \(epoch): hold it first")
        }
        let known = familyQuestions(family)
        let questions = try journal.questions(seqs: known.seqs)
        let addresses = familyAddresses(family, children: known.children)
        // Work of the family at the limits service ends in a message to the family (an `ask.result`, a query's
        // answer): the family waits for it here, or it would come after the state went out.
        let questionIDs = Set(questions.map(\.id))
        var atLimits = 0
        for (address, mailbox) in mailboxes where address == "limits" || address.hasPrefix("limits/") {
            for envelope in mailbox.snapshot() where !envelope.withdrawn {
                if addresses.contains(envelope.from) || envelope.subject.map(questionIDs.contains) == true {
                    atLimits += 1
                }
            }
        }
        guard atLimits == 0 else {
            return .refused("family '\(family)' has \(atLimits) messages at the limits service", retry: true)
        }
        // The children's limits state (the limits worker's rows): read from the limits service once nothing of
        // the family is at it, and carried with the family.
        let children = try familyChildren(family, addresses: addresses)
        let unread = children.filter { moves.limitsStates[$0] == nil }
        let refused = unread.filter { moves.limitsRefused[$0] != nil }
        if let child = refused.first, let refusal = moves.limitsRefused[child] {
            // Asked again when the mover runs again (after the limits worker was upgraded).
            forgetLimitsStates(of: refused)
            return .refused(
                "family '\(family)': the limits service refused to send the limits state of "
                    + (refused.count == 1 ? "child \(child)" : "\(refused.count) children (\(child), ...)")
                    + " (\(refusal)); its limits worker predates limits.read: upgrade it and run the move again "
                    + "(the family stays held until then)"
            )
        }
        if !unread.isEmpty {
            for child in unread where !moves.limitsAsked.contains(child) {
                let body = try WireJSON.encodeBody(LimitsStateRead(child: child), code: .storageFailed)
                let id = MessageID.random()
                moves.limitsReads[id] = child
                try route(
                    id: id,
                    from: "broker",
                    to: "limits",
                    kind: MessageKind.limitsRead.rawValue,
                    subject: nil,
                    body: body,
                    limitsKey: "child/\(child)"
                )
                moves.limitsAsked.insert(child)
            }
            return .refused(
                "family '\(family)': waiting for the limits service to send the limits state of "
                    + (unread.count == 1 ? "1 child" : "\(unread.count) children")
                    + " (\(unread.prefix(5).joined(separator: ", "))); a limits worker must be connected to this broker",
                retry: true
            )
        }
        var messages: [FamilyState.Message] = []
        for address in addresses.sorted() {
            guard let mailbox = mailboxes[address] else { continue }
            var copies = mailbox.snapshot().filter { !$0.withdrawn }.map { $0.stored() }
            if mailbox.spilled > 0 {
                copies += try journal.loadMessages(to: address, fromSeq: mailbox.spillCursor, limit: mailbox.spilled)
            }
            for stored in copies.sorted(by: { $0.seq < $1.seq }) {
                messages.append(
                    FamilyState.Message(
                        id: stored.id.description,
                        from: stored.from,
                        to: stored.to,
                        kind: stored.kind,
                        subject: stored.subject?.description,
                        body: Data(stored.body),
                        createdMs: Journal.milliseconds(stored.createdAt),
                        expiresMs: stored.expiresAt.map(Journal.milliseconds),
                        trace: stored.trace?.traceparent
                    )
                )
            }
        }
        let state = FamilyState(
            family: family,
            guardians: (ledger.rosters[family] ?? []).sorted(),
            questions: questions.map { record in
                FamilyState.Question(
                    id: record.id.description,
                    child: record.child,
                    state: record.state.rawValue,
                    createdMs: Journal.milliseconds(record.createdAt),
                    expiresMs: Journal.milliseconds(record.expiresAt),
                    question: Data(record.question),
                    choiceIDs: record.choiceIDs,
                    approvalChoiceIDs: record.approvalChoiceIDs,
                    answeredBy: record.answeredBy,
                    answerChoiceID: record.answerChoiceID,
                    closedMs: record.closedAt.map(Journal.milliseconds),
                    trace: record.trace?.traceparent
                )
            },
            messages: messages,
            limits: children.isEmpty ? nil : children.reduce(into: [:]) { $0[$1] = moves.limitsStates[$1] }
        )
        moves.exported.insert(family)
        for address in addresses { moves.exportedAddresses[address] = family }
        logger.notice(
            "family exported",
            metadata: [
                "family": "\(family)", "questions": "\(questions.count)", "messages": "\(messages.count)",
                "guardians": "\(state.guardians.count)", "limits_states": "\(children.count)",
            ]
        )
        return AdminReply(ok: true, state: state)
    }

    /// Records the children a child worker's HELLO claims in their families (journal table `child`, in this turn's
    /// transaction; a failed commit loses them until the next HELLO, and the live claims cover them meanwhile).
    func recordChildren(_ claims: [EndpointClaim]) {
        var byFamily: [String: [String]] = [:]
        for claim in claims where claim.address.hasPrefix("child/") {
            guard let family = claim.family else { continue }
            byFamily[family, default: []].append(String(claim.address.dropFirst("child/".count)))
        }
        for (family, children) in byFamily { try? journal.addChildren(family: family, children) }
    }

    /// The children of a family whose limits state moves with it: those of its questions and live claims, every
    /// child a HELLO ever claimed in it here or an import brought (journal table `child`), and, with CURVE, every
    /// child the principals file gives the family.
    func familyChildren(_ family: String, addresses: Set<String>) throws -> [String] {
        var children = Set(addresses.filter { $0.hasPrefix("child/") }.map { String($0.dropFirst("child/".count)) })
        children.formUnion(try journal.children(of: family))
        for principal in authenticator?.principals.values ?? [:].values where principal.role == .child {
            if principal.endpoints.isEmpty {
                if principal.family == family { children.insert(principal.id) }
            }
            for claim in principal.endpoints where claim.family == family && claim.address.hasPrefix("child/") {
                children.insert(String(claim.address.dropFirst("child/".count)))
            }
        }
        return children.sorted()
    }

    /// `limits.state` from a limits worker: the state of a child this broker asked for while moving its family.
    func takeLimitsState(session: Session, body: [UInt8]) throws(WireError) {
        guard session.role == .limits else {
            throw WireError(.forbidden, "only a limits worker sends limits.state")
        }
        let report = try decodeBody(LimitsStateReport.self, body)
        guard moves.limitsAsked.contains(report.child) else { return }
        moves.limitsStates[report.child] = report.state
        moves.limitsReads = moves.limitsReads.filter { $0.value != report.child }
    }

    /// A limits worker's NACK of a delivery: when it refused a `limits.read`, the export stops waiting for that
    /// child's state (the worker will never send it).
    func noteLimitsReadRefused(_ id: MessageID, code: String, reason: String) {
        guard let child = moves.limitsReads.removeValue(forKey: id) else { return }
        moves.limitsRefused[child] = "\(code): \(reason)"
    }

    /// Forgets the limits states read for a family's children, once it moved or its hold was undone.
    func forgetLimitsStates(of children: some Sequence<String>) {
        let children = Set(children)
        for child in children {
            moves.limitsAsked.remove(child)
            moves.limitsStates[child] = nil
            moves.limitsRefused[child] = nil
        }
        if !moves.limitsReads.isEmpty { moves.limitsReads = moves.limitsReads.filter { !children.contains($0.value) } }
    }

    func adminImport(_ request: AdminRequest) throws -> AdminReply {
        guard let (family, epoch) = familyAndEpoch(request), let source = request.source, let state = request.state,
            state.family == family
        else { return .refused("import needs family, epoch, source (NAME=URL) and the family's state") }
        guard journal.durability != .off else { return .refused("moving a family needs a journal (--durability)") }
        if let move = moves.families[family] {
            if move.state == .imported, move.epoch >= epoch { return AdminReply(ok: true, already: true) }
            if move.epoch > epoch {
                return .refused("family '\(family)' has a newer move (epoch \(move.epoch)) than \(epoch)")
            }
            if move.state == .held {
                return .refused(
                    "family '\(family)' is held here for a move to \(move.broker): it is still this broker's"
                )
            }
        }
        // Decode everything before writing anything: a bad state changes nothing.
        var records: [QuestionRecord] = []
        for question in state.questions {
            guard let id = MessageID(hex: question.id), let questionState = QuestionState(rawValue: question.state),
                Address.isValidID(question.child)
            else { return .refused("import: question '\(question.id)' of family '\(family)' is not a valid row") }
            guard ledger.entries[id] == nil else {
                return .refused("import: question \(id.uuid) of family '\(family)' is in this broker's ledger already")
            }
            records.append(
                QuestionRecord(
                    id: id,
                    child: question.child,
                    family: family,
                    state: questionState,
                    createdAt: Journal.date(question.createdMs),
                    expiresAt: Journal.date(question.expiresMs),
                    question: Array(question.question),
                    choiceIDs: question.choiceIDs,
                    approvalChoiceIDs: question.approvalChoiceIDs,
                    answeredBy: question.answeredBy,
                    answerChoiceID: question.answerChoiceID,
                    closedAt: question.closedMs.map(Journal.date),
                    trace: question.trace.flatMap(TraceContext.init(traceparent:))
                )
            )
        }
        var stored: [StoredMessage] = []
        for message in state.messages {
            guard let id = MessageID(hex: message.id), Self.isValidAddress(message.to) else {
                return .refused("import: message '\(message.id)' of family '\(family)' is not a valid copy")
            }
            stored.append(
                StoredMessage(
                    seq: 0,
                    id: id,
                    from: message.from,
                    to: message.to,
                    kind: message.kind,
                    subject: message.subject.flatMap(MessageID.init(hex:)),
                    body: Array(message.body),
                    createdAt: Journal.date(message.createdMs),
                    expiresAt: message.expiresMs.map(Journal.date),
                    trace: message.trace.flatMap(TraceContext.init(traceparent:))
                )
            )
        }
        for guardian in state.guardians where Address.isValidID(guardian) {
            if ledger.addGuardian(family: family, guardian: guardian) {
                try journal.addGuardian(family: family, guardian: guardian)
            }
        }
        let importedAt = ContinuousClock.now
        if !records.isEmpty { moves.oldestImport = moves.oldestImport ?? importedAt }
        for record in records {
            moves.importedQuestions[record.id] = importedAt
            let seq = try journal.saveQuestion(record)
            ledger.adopt(
                LedgerQuestion(
                    id: record.id,
                    child: record.child,
                    family: family,
                    state: record.state,
                    createdAt: record.createdAt,
                    expiresAt: record.expiresAt,
                    closedAt: record.closedAt ?? (record.state.isClosed ? record.createdAt : nil),
                    seq: seq
                )
            )
        }
        for var copy in stored {
            copy.seq = nextSeq
            try enqueue(Envelope(stored: copy), body: copy.body, in: mailbox(for: copy.to), expiresAt: copy.expiresAt)
        }
        // The children's limits state goes to this broker's limits service before anything of the family can:
        // the family's asks reach the same limits worker after it.
        for (child, limits) in (state.limits ?? [:]).sorted(by: { $0.key < $1.key }) where Address.isValidID(child) {
            let body = try WireJSON.encodeBody(LimitsStateWrite(child: child, state: limits), code: .storageFailed)
            try route(
                id: .random(),
                from: "broker",
                to: "limits",
                kind: MessageKind.limitsWrite.rawValue,
                subject: nil,
                body: body,
                limitsKey: "child/\(child)"
            )
        }
        // The children it brought stay known here, for the family's next move.
        let children = Set((state.limits ?? [:]).keys.filter(Address.isValidID)).union(records.map(\.child))
        try journal.addChildren(family: family, children.sorted())
        let record = FamilyMoveRecord(family: family, state: .imported, epoch: epoch, broker: source)
        try journal.saveFamilyMove(record)
        moves.families[family] = record
        logger.notice(
            "family imported",
            metadata: [
                "family": "\(family)", "from": "\(source)", "questions": "\(records.count)",
                "messages": "\(stored.count)", "guardians": "\(state.guardians.count)",
                "limits_states": "\(state.limits?.count ?? 0)",
            ]
        )
        return AdminReply(ok: true)
    }

    func adminRelease(_ request: AdminRequest) throws -> AdminReply {
        guard let (family, epoch) = familyAndEpoch(request) else { return .refused("release needs family and epoch") }
        guard let move = moves.families[family], move.epoch == epoch else {
            return .refused("family '\(family)' is not held for a move at epoch \(epoch)")
        }
        if move.state == .moved { return AdminReply(ok: true, already: true) }
        guard move.state == .held, moves.exported.contains(family) else {
            return .refused("family '\(family)' was not exported since this broker started: export it first")
        }
        let known = familyQuestions(family)
        let addresses = familyAddresses(family, children: known.children)
        var seqs: [Int64] = []
        for address in addresses {
            guard let mailbox = mailboxes[address] else { continue }
            for envelope in mailbox.drainAll() {
                inflightIndex.removeValue(forKey: envelope.id)
                totalQueued -= 1
                if envelope.persistent && !envelope.withdrawn { seqs.append(envelope.seq) }
            }
            totalSpilled -= mailbox.spilled
            mailbox.spilled = 0
        }
        let children = try familyChildren(family, addresses: addresses)
        try journal.deleteMessages(seqs: seqs)
        try journal.deleteFamily(family, questionSeqs: known.seqs, recipients: addresses)
        let deleted = Set(seqs)
        pendingDeletes.removeAll { deleted.contains($0) }
        for id in known.ids {
            ledger.remove(id)
            questionTraces[id] = nil
        }
        ledger.rosters[family] = nil
        let record = FamilyMoveRecord(family: family, state: .moved, epoch: epoch, broker: move.broker)
        try journal.saveFamilyMove(record)
        moves.families[family] = record
        moves.exported.remove(family)
        for address in addresses { moves.exportedAddresses[address] = nil }
        forgetLimitsStates(of: children)
        // Sessions that served the family register again, and are told where it is now.
        let reason = MovedReason.text(family: family, to: Self.entry(move.broker), epoch: epoch)
        for session in Array(sessions.values) where session.addresses.values.contains(where: { $0 == family }) {
            // The ACKs it is owed go before the BYE (everything they acknowledge is committed): a SEND this broker
            // accepted is not sent again to the new broker, which does not know its id.
            sendAcks(of: session)
            output.removeAll()
            output.append(session.identity)
            WireEncoder.bye(reason: reason, into: &output)
            _ = try? socket.send(output, .dontWait)
            endSession(session, reason: "its family moved")
        }
        logger.notice(
            "family moved away",
            metadata: ["family": "\(family)", "to": "\(move.broker)", "copies_deleted": "\(seqs.count)"]
        )
        return AdminReply(ok: true)
    }

    func adminUnhold(_ request: AdminRequest) throws -> AdminReply {
        guard let (family, epoch) = familyAndEpoch(request) else { return .refused("unhold needs family and epoch") }
        guard let move = moves.families[family], move.state == .held, move.epoch == epoch else {
            return AdminReply(ok: true, already: true)
        }
        try journal.deleteFamilyMove(family: family)
        moves.families[family] = nil
        moves.exported.remove(family)
        let addresses = familyAddresses(family, children: familyQuestions(family).children)
        forgetLimitsStates(of: try familyChildren(family, addresses: addresses))
        moves.exportedAddresses = moves.exportedAddresses.filter { $0.value != family }
        logger.notice("family hold undone", metadata: ["family": "\(family)"])
        return AdminReply(ok: true)
    }

    func adminSettle(_ request: AdminRequest) throws -> AdminReply {
        guard let source = request.source else { return .refused("settle needs source (a broker name)") }
        guard let list = moves.list else { return .refused("this broker was given no list to settle") }
        let me = configuration.shardName ?? ""
        if source == me {
            let left = familiesToMove().union(moves.families.values.filter { $0.state == .held }.map(\.family))
            guard left.isEmpty else {
                return AdminReply(ok: false, retry: true, error: "families to move first", families: left.sorted())
            }
        }
        guard !moves.settled.contains(source) else { return AdminReply(ok: true, name: me, epoch: moves.epoch) }
        moves.settled.insert(source)
        if let previous = moves.previous, previous.entries.allSatisfy({ moves.settled.contains($0.name) }) {
            moves.previous = nil
            moves.settled = []
        }
        try journal.saveBrokerList(
            BrokerListRecord(
                epoch: moves.epoch,
                list: list.description,
                previous: moves.previous?.description,
                settled: moves.settled.sorted()
            )
        )
        return AdminReply(ok: true, name: me, epoch: moves.epoch)
    }
}
