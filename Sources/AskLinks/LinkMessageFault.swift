/// The command of an AskRelay message (docs/protocol.md §5.2: the byte after the `ASK` signature in the lead frame), as a
/// ``LinkMessageFault`` matches it. The values are the protocol's command bytes (AskProtocol's `WireCommand`; a
/// test checks they agree, since AskLinks depends on nothing).
public enum LinkMessageCommand: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case hello = 0x01
    case welcome = 0x02
    case heartbeat = 0x03
    case send = 0x04
    case deliver = 0x05
    case ack = 0x06
    case nack = 0x07
    case bye = 0x08

    /// `SEND`, `DELIVER`, ...: the protocol's name.
    public var description: String {
        switch self {
        case .hello: "HELLO"
        case .welcome: "WELCOME"
        case .heartbeat: "HEARTBEAT"
        case .send: "SEND"
        case .deliver: "DELIVER"
        case .ack: "ACK"
        case .nack: "NACK"
        case .bye: "BYE"
        }
    }
}

/// A fault on the messages of a link, not on its bytes: drop, delay or duplicate the AskRelay messages of one
/// command and/or application kind in one direction, each matching one with a probability, at most `count` times.
///
/// ```swift
/// // The guardian's first answer is lost on the way to the broker; the center sends it again after its retry
/// // interval, with the same id.
/// link.apply(.message(LinkMessageFault(.drop, .toBroker, command: .send, kind: "answer", count: 1)))
/// ```
///
/// The link reads messages only where ZeroMQ's mechanism is NULL: with CURVE (ZeroMQ RFC 26) everything after the
/// greeting is encrypted. A message fault on such a connection acts on nothing; the link says so (a log line
/// `message fault refused: CURVE`, ``LinkMessageCounters/refused``), and ``LinkFault/refusal(curve:)`` tells a
/// supervisor before anything starts.
public struct LinkMessageFault: Sendable, Hashable, CustomStringConvertible {
    /// What happens to a message the fault takes.
    public enum Action: Sendable, Hashable {
        /// The whole message (every frame of it) is removed from the stream; the ZMTP framing stays valid.
        case drop
        /// The message is taken out of the stream and put back at the next message boundary once `Duration`
        /// passed: later messages overtake it (bytes before and after it keep their order).
        case delay(Duration)
        /// The whole message is sent twice, byte for byte, one copy right after the other.
        case duplicate
    }

    public var action: Action
    /// `.toBroker` (SEND, the process's ACKs and heartbeats), `.fromBroker` (DELIVER, WELCOME, the broker's ACKs),
    /// or `.both`.
    public var direction: LinkDirection
    /// Only messages of this command; `nil`: any.
    public var command: LinkMessageCommand?
    /// Only SEND and DELIVER messages of this application kind (`answer`, `response`, `ask.result`, ...); `nil`:
    /// any message, of any command.
    public var kind: String?
    /// The chance that a matching message is taken, in 0...1.
    public var probability: Double
    /// Take at most this many messages (the first ones that match and win their draw); `nil`: no limit.
    public var count: Int?
    /// The seed of the draws, so a run with the same messages takes the same ones.
    public var seed: UInt64

    /// - Precondition: `probability` in 0...1, `count` not negative.
    public init(
        _ action: Action,
        _ direction: LinkDirection,
        command: LinkMessageCommand? = nil,
        kind: String? = nil,
        probability: Double = 1,
        count: Int? = nil,
        seed: UInt64 = 0
    ) {
        precondition((0...1).contains(probability), "a message fault's probability is in 0...1, not \(probability)")
        precondition((count ?? 0) >= 0, "a message fault's count is not negative")
        self.action = action
        self.direction = direction
        self.command = command
        self.kind = kind
        self.probability = probability
        self.count = count
        self.seed = seed
    }

    /// Whether a message of `command` (nil: not an AskRelay message) and `kind` (SEND and DELIVER only) matches.
    public func matches(command: LinkMessageCommand?, kind: String?) -> Bool {
        if let wanted = self.command, wanted != command { return false }
        if let wanted = self.kind, wanted != kind { return false }
        return true
    }

    /// `drop SEND answer toBroker first 1`, `delay 200ms DELIVER response fromBroker p 0.5 seed 7`.
    public var description: String {
        var text: String
        switch action {
        case .drop: text = "drop"
        case .duplicate: text = "duplicate"
        case .delay(let delay): text = "delay \(linkDurationText(delay))"
        }
        let what = [command?.description, kind].compactMap { $0 }
        text += " " + (what.isEmpty ? "every message" : what.joined(separator: " ")) + " \(direction)"
        if probability < 1 { text += " p \(probability)" }
        if let count { text += " first \(count)" }
        if probability < 1 { text += " seed \(seed)" }
        return text
    }
}

/// What one message fault did, in ``LinkCounters/messageFaults`` (per fault) and ``LinkCounters/messages`` (all).
public struct LinkMessageCounters: Sendable, Equatable, CustomStringConvertible {
    /// Messages that matched the fault's command and kind while it was in effect.
    public var matched = 0
    /// Matching messages it removed.
    public var dropped = 0
    /// Matching messages it held back.
    public var delayed = 0
    /// Matching messages it sent twice.
    public var duplicated = 0
    /// Connections it could not read (their ZMTP mechanism is CURVE, not NULL): it did nothing there.
    public var refused = 0

    public init() {}

    /// The messages it took: dropped, delayed or duplicated.
    public var taken: Int { dropped + delayed + duplicated }

    public var description: String {
        "matched \(matched), dropped \(dropped), delayed \(delayed), duplicated \(duplicated), refused \(refused)"
    }
}

extension LinkFault {
    /// Whether the fault reads messages (a ``LinkFault/message(_:)``), so needs peers without CURVE.
    public var readsMessages: Bool {
        if case .message = self { true } else { false }
    }

    /// Why the fault cannot be used when the link's peers run CURVE (`curve`), as one line for a supervisor to
    /// print before it starts anything; `nil` when it can.
    public func refusal(curve: Bool) -> String? {
        guard curve, readsMessages else { return nil }
        return "message fault refused: CURVE (\(self)): the link cannot read encrypted messages; "
            + "run the link's peers without CURVE, or use a byte fault (partition, delay, bandwidth, reset, stall)"
    }
}

/// A seeded generator for the draws of a message fault (SplitMix64).
struct LinkRandom {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    /// A number in [0, 1).
    mutating func next() -> Double {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return Double(z >> 11) / Double(UInt64(1) << 53)
    }
}
