/// One condition the broker refuses with a NACK: which code, for which message, whether the NACK carries the
/// refused message's id, and the exact condition.
///
/// ``ErrorTable/conditions`` is the single source of docs/protocol.md §7: a test renders it and compares it with the
/// specification's table row by row, both ways, and the conformance suite (Tests/AskBrokerTests/ConformanceTests)
/// provokes every row against a real broker.
public struct ErrorCondition: Sendable, Hashable, Identifiable {
    /// What the refusal's NACK carries as its refused id.
    public enum NackID: String, Sendable, Hashable {
        /// The refused SEND's (or DELIVER's) message id: its header was readable.
        case message
        /// Empty: the message has no id (HELLO, ACK, ...) or its header could not be read.
        case empty
    }

    /// A stable name for the row, `<code>.<what>` (conformance cases are keyed by it).
    public let id: String
    public let code: ErrorCode
    /// The refused message, as the specification's table names it: `any`, `HELLO`, `SEND`, "SEND `ask`", ...
    public let message: String
    public let nackID: NackID
    /// The exact condition, in the specification's words.
    public let condition: String

    public init(_ id: String, _ code: ErrorCode, _ message: String, _ nackID: NackID, _ condition: String) {
        self.id = id
        self.code = code
        self.message = message
        self.nackID = nackID
        self.condition = condition
    }

    /// The row as it appears in docs/protocol.md §7.
    public var markdownRow: String {
        "| `\(code.rawValue)` | \(message) | \(nackID == .message ? "its id" : "empty") | \(condition) |"
    }
}

/// Every condition the broker refuses, in the order of ``ErrorCode`` and, within a code, in the order the broker
/// checks them.
public enum ErrorTable {
    /// The header row of the specification's table (the test finds the table by it).
    public static let markdownHeader = "| code | refused message | NACK id | condition |"

    static let ledgerKinds = "`ask`, `ask.result`, `limits.admin`, `limits.state`, `send`, `cancel`, `answer`"

    public static let conditions: [ErrorCondition] = [
        .init(
            "bad-signature",
            .badSignature,
            "any",
            .empty,
            "the lead frame (frame 0) does not begin with `ASK` (`41 53 4b`) and a version byte"
        ),
        .init(
            "unsupported-version.signature",
            .unsupportedVersion,
            "any",
            .empty,
            "the lead frame begins with `ASK` and a version byte other than `02` (a version 1 peer's signature frame is `41 53 4b 01`)"
        ),
        .init("unsupported-version.hello", .unsupportedVersion, "HELLO", .empty, "the body's `version` is not 2"),
        .init(
            "unknown-command",
            .unknownCommand,
            "any",
            .empty,
            "the lead frame ends after the signature, or its command byte is not one of `01`-`08`"
        ),
        .init(
            "missing-frames",
            .missingFrames,
            "any",
            .empty,
            "fewer frames than the command has (section 5.2)"
        ),
        .init("extra-frames", .extraFrames, "any", .empty, "more frames than the command has (section 5.2)"),
        .init(
            "oversize-frame.hello",
            .oversizeFrame,
            "HELLO, WELCOME",
            .empty,
            "the body is over the body limit (1 MiB)"
        ),
        .init(
            "oversize-frame.body",
            .oversizeFrame,
            "SEND, DELIVER",
            .message,
            "the body is over the body limit (1 MiB)"
        ),
        .init(
            "oversize-frame.carried-acks",
            .oversizeFrame,
            "SEND, DELIVER",
            .message,
            "the carried ACK ids (after the kind, in the lead frame) are more than 4096"
        ),
        .init("oversize-frame.ack", .oversizeFrame, "ACK", .empty, "the lead frame holds more than 4096 ids"),
        .init("oversize-frame.reason", .oversizeFrame, "NACK, BYE", .empty, "the reason is over 1024 bytes"),
        .init(
            "bad-id.ack",
            .badID,
            "ACK",
            .empty,
            "the ids after the command byte are none or not a multiple of 16 bytes"
        ),
        .init(
            "bad-id.carried-acks",
            .badID,
            "SEND, DELIVER",
            .message,
            "the bytes after the kind (the carried ACK ids) are not a multiple of 16"
        ),
        .init(
            "bad-id.nack",
            .badID,
            "NACK",
            .empty,
            "the refused id after the command byte is neither absent nor 16 bytes"
        ),
        .init(
            "bad-address.header",
            .badAddress,
            "SEND, DELIVER",
            .message,
            "`from` or `to` is not 1-128 bytes of the address grammar (section 3)"
        ),
        .init("bad-address.ask", .badAddress, "SEND `ask`", .message, "`to` is not `limits`"),
        .init("bad-address.ask-result", .badAddress, "SEND `ask.result`", .message, "`to` is not the question's child"),
        .init(
            "bad-address.limits-admin",
            .badAddress,
            "SEND `limits.admin`",
            .message,
            "`to` is neither `limits` nor a `limits/<id>`"
        ),
        .init(
            "bad-kind.header",
            .badKind,
            "SEND, DELIVER",
            .message,
            "the kind is not 1-32 bytes of `a-z 0-9 . -`"
        ),
        .init("bad-kind.nack", .badKind, "NACK", .empty, "the code frame is not 1-32 bytes"),
        .init("invalid-utf8.hello", .invalidUTF8, "HELLO", .empty, "the body is not UTF-8"),
        .init(
            "invalid-utf8.body",
            .invalidUTF8,
            "SEND \(ledgerKinds)",
            .message,
            "the body is not UTF-8"
        ),
        .init("invalid-utf8.reason", .invalidUTF8, "NACK, BYE", .empty, "the reason is not UTF-8"),
        .init(
            "invalid-json.hello",
            .invalidJSON,
            "HELLO",
            .empty,
            "the body is not JSON of the `Hello` shape (section 5.3; an unknown `role` included); the reason names "
                + "the field"
        ),
        .init(
            "invalid-json.body",
            .invalidJSON,
            "SEND \(ledgerKinds)",
            .message,
            "the body is not JSON of its kind's shape (protocol-messages.md §3); the reason names the field"
        ),
        .init(
            "invalid-json.clock-advance",
            .invalidJSON,
            "SEND `clock.advance` (tests only)",
            .message,
            "the body is not `{\"milliseconds\": N}` with N ≥ 0"
        ),
        .init(
            "unknown-kind",
            .unknownKind,
            "SEND to `broker`",
            .message,
            "the kind is not `send`, `cancel`, `answer` or `limits.state` (or, tests only, `clock.advance`)"
        ),
        .init("bad-subject.ask", .badSubject, "SEND `ask`", .message, "the subject is missing or is not `question.id`"),
        .init(
            "bad-subject.question-id",
            .badSubject,
            "SEND `ask.result`, `send`, `cancel`, `answer`",
            .message,
            "the subject is missing or is not the body's `questionID`"
        ),
        .init(
            "bad-header",
            .badHeader,
            "SEND, DELIVER",
            .empty,
            "the header is under 20 bytes; flags with a bit other than 0 and 1 set; the subject, the trace context or a "
                + "field's length runs past the end of the lead frame; a trace context whose trace id or parent id is "
                + "all zero"
        ),
        .init(
            "bad-header.lead",
            .badHeader,
            "HEARTBEAT, HELLO, WELCOME, BYE",
            .empty,
            "the lead frame has bytes after the command byte"
        ),
        .init("not-registered.other", .notRegistered, "HEARTBEAT, ACK", .empty, "the peer has no session"),
        .init("not-registered.send", .notRegistered, "SEND", .message, "the peer has no session"),
        .init("bad-hello.count", .badHello, "HELLO", .empty, "`endpoints` is empty or has more than 200 000 claims"),
        .init(
            "bad-hello.claim",
            .badHello,
            "HELLO",
            .empty,
            "a claim is listed twice, or its address is not `role/id`"
        ),
        .init(
            "address-taken",
            .addressTaken,
            "HELLO",
            .empty,
            "a claimed address is served by a live session of another peer"
        ),
        .init(
            "wrong-shard",
            .wrongShard,
            "HELLO",
            .empty,
            "with `--shard-name` and `--brokers`: a `child/` or `guardian/` claim's family is another broker's shard "
                + "(docs/scaling.md); the reason names that broker"
        ),
        .init(
            "moved.hello",
            .moved,
            "HELLO",
            .empty,
            "a `child/` or `guardian/` claim's family was moved to another broker, or is served by the broker it "
                + "moves from until it moves (docs/scaling.md, \"Rebalancing\"); the reason names that broker"
        ),
        .init("forbidden.welcome", .forbidden, "WELCOME", .empty, "sent to the broker (only the broker sends it)"),
        .init("forbidden.deliver", .forbidden, "DELIVER", .message, "sent to the broker (only the broker sends it)"),
        .init("forbidden.hello-role", .forbidden, "HELLO", .empty, "a claimed address is not of the HELLO's `role`"),
        .init(
            "forbidden.hello-family",
            .forbidden,
            "HELLO",
            .empty,
            "a `child/` or `guardian/` claim has no `family`, or one outside the id grammar"
        ),
        .init(
            "forbidden.hello-principal",
            .forbidden,
            "HELLO",
            .empty,
            "with CURVE: the connection's key is not a listed principal, or the HELLO's role, an address or a family "
                + "is not its principal's"
        ),
        .init("forbidden.from", .forbidden, "SEND", .message, "`from` is not an address the session claimed"),
        .init(
            "forbidden.broker-only",
            .forbidden,
            "SEND",
            .message,
            "the kind is one only the broker sends: `question`, `response`, `closed`, `approval`, `limits.read`, "
                + "`limits.write`"
        ),
        .init(
            "forbidden.ask",
            .forbidden,
            "SEND `ask`",
            .message,
            "the session is not a child session"
        ),
        .init(
            "forbidden.ask-result",
            .forbidden,
            "SEND `ask.result`",
            .message,
            "the session is not a limits session, or the ask was routed to another live limits worker"
        ),
        .init(
            "forbidden.limits-admin",
            .forbidden,
            "SEND `limits.admin`",
            .message,
            "the session is not an observer session"
        ),
        .init(
            "forbidden.limits-state",
            .forbidden,
            "SEND `limits.state`",
            .message,
            "the session is not a limits session"
        ),
        .init(
            "forbidden.clock-advance",
            .forbidden,
            "SEND `clock.advance`",
            .message,
            "the session is not an observer session, or the broker was not started with `--driven-clock` (tests only)"
        ),
        .init(
            "forbidden.other-child",
            .forbidden,
            "SEND `send`, `cancel`",
            .message,
            "the question belongs to another child"
        ),
        .init("forbidden.answer", .forbidden, "SEND `answer`", .message, "the session is not a guardian session"),
        .init(
            "no-route",
            .noRoute,
            "SEND",
            .message,
            "`to` is not `broker`, `limits` or `<role>/<id>` of a role of section 2 (`nobody/x`, `child`)"
        ),
        .init(
            "busy.address",
            .busy,
            "SEND",
            .message,
            "the target address holds `--max-queue` (10 000) messages in memory and cannot spill them to the journal "
                + "(no journal, or the `limits` service): retry later, same id"
        ),
        .init(
            "busy.total",
            .busy,
            "SEND",
            .message,
            "the broker holds `--max-queued-total` (2 000 000) undelivered messages: retry later, same id"
        ),
        .init(
            "storage-failed",
            .storageFailed,
            "SEND",
            .message,
            "the journal failed: it refused a write, the commit of the loop turn (every SEND accepted in that turn "
                + "gets it) or a read of the question the request needs; nothing of it was kept: retry, same id"
        ),
        .init(
            "moving.hello",
            .moving,
            "HELLO",
            .empty,
            "a `child/` or `guardian/` claim's family is being moved to another broker (docs/scaling.md, "
                + "\"Rebalancing\"): register again shortly; once it moved, `moved` names its broker"
        ),
        .init(
            "moving.send",
            .moving,
            "SEND",
            .message,
            "the sender's family is being moved to another broker, or the recipient's family is and its state "
                + "was handed over, or a `limits.admin` names a child whose limits state is being read for its "
                + "family's move: resend it shortly, same id (a worker does this by itself: its app never sees it)"
        ),
        .init(
            "invalid-question",
            .invalidQuestion,
            "SEND `ask`",
            .message,
            "the question fails validation (protocol-messages.md §4); the reason is the `InvalidQuestionReason` JSON "
                + "(section 7.2)"
        ),
        .init(
            "duplicate-question",
            .duplicateQuestion,
            "SEND `ask`",
            .message,
            "the ledger already has a question with this id (its child's `ask` again, after the question moved here "
                + "with its family, is acknowledged again instead: 9.1)"
        ),
        .init(
            "unknown-question",
            .unknownQuestion,
            "SEND `ask.result`, `send`, `cancel`, `answer`",
            .message,
            "the ledger has no question with the body's `questionID` (never asked, or closed more than "
                + "`--closed-retention` ago)"
        ),
        .init("not-presented.send", .notPresented, "SEND `send`", .message, "the question is admitting or refused"),
        .init(
            "not-presented.refused",
            .notPresented,
            "SEND `cancel`, `answer`",
            .message,
            "the question is refused"
        ),
        .init("not-sent", .notSent, "SEND `answer`", .message, "the question is admitting or presented"),
        .init(
            "already-sent",
            .alreadySent,
            "SEND `send`, `cancel`",
            .message,
            "the question is sent (a retry of the accepted `send`, same id, or its `send` again after the question moved "
                + "here with its family, is acknowledged again instead: 9.1)"
        ),
        .init(
            "already-closed",
            .alreadyClosed,
            "SEND `send`, `cancel`, `answer`",
            .message,
            "the question is answered (an `answer` of the guardian whose answer won, with the same choice, is "
                + "acknowledged again instead, whatever its id: section 9.1)"
        ),
        .init(
            "expired",
            .expired,
            "SEND `send`, `cancel`, `answer`",
            .message,
            "the question's deadline passed: it is expired or abandoned, or it is presented (`send`) or sent "
                + "(`answer`, which expires it) and the broker has not closed it yet"
        ),
        .init(
            "cancelled",
            .cancelled,
            "SEND `send`, `cancel`, `answer`",
            .message,
            "the question is cancelled"
        ),
        .init(
            "not-guardian",
            .notGuardian,
            "SEND `answer`",
            .message,
            "the sending `guardian/` address is not registered in the question's family"
        ),
        .init(
            "invalid-choice",
            .invalidChoice,
            "SEND `answer`",
            .message,
            "the question is sent and `choiceID` is not one of its choices"
        ),
    ]

    /// The rows of one code.
    public static func conditions(of code: ErrorCode) -> [ErrorCondition] { conditions.filter { $0.code == code } }

    /// The row named `id`.
    public static func condition(_ id: String) -> ErrorCondition? { conditions.first { $0.id == id } }
}
