import Foundation

/// One request to a broker's admin endpoint (`--admin-endpoint`, a ZeroMQ REP socket, one JSON frame each way;
/// docs/scaling.md, "Rebalancing"). `askrelay rebalance` sends them; every one is idempotent, so a mover that was
/// killed runs again from the start and resumes where the brokers' journals say the moves are.
///
/// | `op` | fields | what the broker does |
/// |---|---|---|
/// | `status` | | replies its name, list epoch and the families it holds, holds for a move, or moved away |
/// | `list` | `epoch`, `list`, `previous` | takes the new broker list (journaled); families whose previous broker is another stay that broker's until they move |
/// | `families` | | replies the families it holds state for that the current list gives to another broker |
/// | `hold` | `family`, `epoch`, `destination` | refuses the family's SENDs (`moving`) from now on (journaled) |
/// | `export` | `family`, `epoch` | replies the held family's state; `retry` while the family has work at the limits service |
/// | `import` | `family`, `epoch`, `source`, `state` | stores the family's state and serves it (journaled, once per epoch) |
/// | `release` | `family`, `epoch` | deletes the exported family's state, answers `moved` for it from now on (journaled) |
/// | `unhold` | `family`, `epoch` | undoes a `hold` whose family was never imported anywhere (rollback) |
/// | `settle` | `source` | this broker (`source` = its own name) holds no family of another broker any more, or replies them; for another name: that broker has settled |
public struct AdminRequest: Codable, Sendable, Hashable {
    public var op: String
    public var epoch: Int64?
    public var family: String?
    /// `list`: the new list, `NAME=URL,...`.
    public var list: String?
    /// `list`: the list before it (its families stay with their broker of this list until they move).
    public var previous: String?
    /// `hold`: the family's new broker, `NAME=URL`.
    public var destination: String?
    /// `import`: the broker the family comes from, `NAME=URL`; `settle`: the broker that settled.
    public var source: String?
    /// `import`: what `export` gave.
    public var state: FamilyState?

    public init(
        op: String,
        epoch: Int64? = nil,
        family: String? = nil,
        list: String? = nil,
        previous: String? = nil,
        destination: String? = nil,
        source: String? = nil,
        state: FamilyState? = nil
    ) {
        self.op = op
        self.epoch = epoch
        self.family = family
        self.list = list
        self.previous = previous
        self.destination = destination
        self.source = source
        self.state = state
    }
}

/// A broker's reply to an ``AdminRequest``.
public struct AdminReply: Codable, Sendable, Hashable {
    public var ok: Bool
    /// Not done yet, for a reason that passes (work of the family at the limits service): ask again shortly.
    public var retry: Bool?
    /// Why not, in words for an operator (with `ok` false).
    public var error: String?
    /// The broker's name (`--shard-name`) and list epoch.
    public var name: String?
    public var epoch: Int64?
    /// `families`, `settle`: the families still to move; `status`: the families it holds state for.
    public var families: [String]?
    /// `status`: each family's move as this broker's journal has it: `held`, `moved` or `imported`, with the
    /// other broker (`NAME=URL`) and the epoch.
    public var moves: [FamilyMoveRecord]?
    /// `export`: the family's state.
    public var state: FamilyState?
    /// `import`: the family had been imported at this epoch already (nothing was stored again).
    public var already: Bool?

    public init(
        ok: Bool,
        retry: Bool? = nil,
        error: String? = nil,
        name: String? = nil,
        epoch: Int64? = nil,
        families: [String]? = nil,
        moves: [FamilyMoveRecord]? = nil,
        state: FamilyState? = nil,
        already: Bool? = nil
    ) {
        self.ok = ok
        self.retry = retry
        self.error = error
        self.name = name
        self.epoch = epoch
        self.families = families
        self.moves = moves
        self.state = state
        self.already = already
    }

    /// A refusal: `ok` false with the reason.
    public static func refused(_ error: String, retry: Bool = false) -> AdminReply {
        AdminReply(ok: false, retry: retry ? true : nil, error: error)
    }
}

/// A family's last move as a broker's journal has it (docs/scaling.md, "Rebalancing"), and as `status` replies it.
public struct FamilyMoveRecord: Codable, Sendable, Hashable {
    public enum State: String, Codable, Sendable {
        /// Moving away: its SENDs are refused (`moving`), its state is still here.
        case held
        /// Moved away: its state is deleted here; `moved` names ``broker``.
        case moved
        /// Moved here from ``broker``.
        case imported
    }

    public var family: String
    public var state: State
    public var epoch: Int64
    /// The other broker, `NAME=URL`: the destination of a `held` or `moved` family, the source of an `imported` one.
    public var broker: String

    public init(family: String, state: State, epoch: Int64, broker: String) {
        self.family = family
        self.state = state
        self.epoch = epoch
        self.broker = broker
    }
}

/// Everything a broker holds of one family, as `export` gives it and `import` takes it: the question ledger's rows
/// (open, and closed within the retention, so a late answer is still refused rightly), the roster, and every
/// undelivered message for the family's addresses in delivery order (also those delivered but not yet
/// acknowledged: a receiver may see one twice, and deduplicates by its id).
public struct FamilyState: Codable, Sendable, Hashable {
    public var family: String
    public var guardians: [String]
    public var questions: [Question]
    public var messages: [Message]
    /// Each child's limits state (the limits worker's row), by child id, as the old broker's limits service had
    /// it; `nil` when the family has no child there.
    public var limits: [String: LimitsState]?

    public init(
        family: String,
        guardians: [String],
        questions: [Question],
        messages: [Message],
        limits: [String: LimitsState]? = nil
    ) {
        self.family = family
        self.guardians = guardians
        self.questions = questions
        self.messages = messages
        self.limits = limits
    }

    /// One question row (the journal's `question` and `question_json`).
    public struct Question: Codable, Sendable, Hashable {
        public var id: String
        public var child: String
        public var state: String
        public var createdMs: Int64
        public var expiresMs: Int64
        /// The question JSON exactly as the child sent it.
        public var question: Data
        public var choiceIDs: [String]
        public var approvalChoiceIDs: [String]
        public var answeredBy: String?
        public var answerChoiceID: String?
        public var closedMs: Int64?
        /// `traceparent` of the question's trace context.
        public var trace: String?

        public init(
            id: String,
            child: String,
            state: String,
            createdMs: Int64,
            expiresMs: Int64,
            question: Data,
            choiceIDs: [String],
            approvalChoiceIDs: [String],
            answeredBy: String?,
            answerChoiceID: String?,
            closedMs: Int64?,
            trace: String?
        ) {
            self.id = id
            self.child = child
            self.state = state
            self.createdMs = createdMs
            self.expiresMs = expiresMs
            self.question = question
            self.choiceIDs = choiceIDs
            self.approvalChoiceIDs = approvalChoiceIDs
            self.answeredBy = answeredBy
            self.answerChoiceID = answerChoiceID
            self.closedMs = closedMs
            self.trace = trace
        }
    }

    /// One undelivered copy, addressed to one of the family's addresses.
    public struct Message: Codable, Sendable, Hashable {
        /// The message id (32 hex digits).
        public var id: String
        public var from: String
        public var to: String
        public var kind: String
        public var subject: String?
        public var body: Data
        public var createdMs: Int64
        public var expiresMs: Int64?
        public var trace: String?

        public init(
            id: String,
            from: String,
            to: String,
            kind: String,
            subject: String?,
            body: Data,
            createdMs: Int64,
            expiresMs: Int64?,
            trace: String?
        ) {
            self.id = id
            self.from = from
            self.to = to
            self.kind = kind
            self.subject = subject
            self.body = body
            self.createdMs = createdMs
            self.expiresMs = expiresMs
            self.trace = trace
        }
    }
}

/// The reason text of a `moved` refusal and how a client reads the new broker out of it:
/// `family 'F' moved to broker NAME=URL (epoch E)`.
public enum MovedReason {
    public static func text(family: String, to broker: BrokerEntry, epoch: Int64) -> String {
        "family '\(family)' moved to broker \(broker) (epoch \(epoch))"
    }

    /// The family and its new broker in a `moved` reason, `nil` for another text.
    public static func parse(_ reason: String) -> (family: String, broker: BrokerEntry)? {
        guard reason.hasPrefix("family '"), let close = reason.dropFirst(8).firstIndex(of: "'") else { return nil }
        let family = String(reason[reason.index(reason.startIndex, offsetBy: 8)..<close])
        let rest = reason[close...].dropFirst()
        guard rest.hasPrefix(" moved to broker ") else { return nil }
        let entry = rest.dropFirst(" moved to broker ".count).prefix { $0 != " " }
        guard let equals = entry.firstIndex(of: "=") else { return nil }
        return (
            family, BrokerEntry(name: String(entry[..<equals]), endpoint: String(entry[entry.index(after: equals)...]))
        )
    }
}
