import Foundation

extension Scenario {
    /// One fault, played `at` after the children start.
    public struct Fault: Codable, Sendable, Equatable {
        public enum Action: String, Codable, Sendable, CaseIterable {
            /// SIGKILL, then start it again after `restartAfter` (if given).
            case kill
            /// SIGSTOP, then SIGCONT after `continueAfter` (default 1s).
            case stop
            /// SIGTERM (graceful drain), then start it again after `restartAfter` (if given).
            case term
            /// A power cut of a broker: it runs under the fault VFS (debug builds), so the SIGKILL also drops every
            /// journal write since its last fsync; then `PRAGMA integrity_check` of the journal and, with
            /// `restartAfter`, a restart on what the disk kept.
            case powerCut = "power-cut"
            /// Runs `command` (no process involved), then `undo` after `undoAfter`: network partitions in
            /// multi-host tests (`ip -n NS link set DEV down` / `up`).
            case run
            /// The process's link to the broker holds the bytes in `direction` (both ways by default) until
            /// `healAfter` (or the end of the run), then lets them flow in order (docs/simulation.md, "Link faults").
            case partition
            /// Every chunk on the process's link in `direction` waits `delay` plus a random part of `jitter`.
            case delay
            /// The link stops reading both ways: the peers' writes stall on TCP flow control, nothing is lost.
            case stall
            /// Every connection of the process's link is cut with a TCP RST, as a crashed peer's would be.
            case reset
            /// The link carries at most `bytesPerSecond` in `direction`; the rest waits, in order.
            case bandwidth
            /// The link drops the messages of `messageCommand` and/or `kind` in `direction` (with `probability`, at
            /// most `count`): a message lost on the wire. Needs the processes to run without CURVE (`--insecure`).
            case drop
            /// The link sends each matching message twice, byte for byte.
            case duplicate
            /// The link holds each matching message `delay`; later messages overtake it.
            case delayMessage = "delay-message"
            /// Starts broker `process` (`broker-b<k>`, a name not in the initial list) and its limits worker, then
            /// moves to it, with `askrelay rebalance`'s steps, every family the list with it gives it
            /// (docs/simulation.md, "Changing the broker list").
            case addBroker = "add-broker"
            /// Moves every family of broker `process` to the brokers of the list without it, then stops it and its
            /// limits worker (SIGTERM: it holds nothing by then).
            case removeBroker = "remove-broker"

            /// A fault on the process's link to its broker rather than on the process.
            public var isLink: Bool {
                !([.kill, .stop, .term, .powerCut, .run, .addBroker, .removeBroker] as [Action]).contains(self)
            }
            /// A change of the broker list.
            public var changesBrokers: Bool { self == .addBroker || self == .removeBroker }
            /// A link fault on messages, which the link can read only without CURVE.
            public var isMessage: Bool { [.drop, .duplicate, .delayMessage].contains(self) }
            /// A link fault that lasts (until `healAfter` or the end of the play), not an instant one.
            public var lasts: Bool { isLink && self != .reset }
        }
        /// Link faults: `both` (default), `toBroker` or `fromBroker`, for `partition` and `delay`.
        public enum Direction: String, Codable, Sendable, CaseIterable {
            case both, toBroker, fromBroker
        }
        public var at: Duration
        /// `broker`, `limits`, `parent-<n>` or `child-<n>` (1-based); empty for `run`.
        public var process: String
        public var action: Action
        public var restartAfter: Duration?
        public var continueAfter: Duration?
        /// For `run`: the program and its arguments (no shell), run to completion; a failure fails the run.
        public var command: [String]?
        /// For `run`: run this `undoAfter` later, and on every exit path if the run ends first.
        public var undo: [String]?
        public var undoAfter: Duration?
        /// For `partition` and `delay`: which way the fault holds or slows the bytes (`nil`: both).
        public var direction: Direction?
        /// For `delay`: the added latency, and the most of a uniform random extra (per chunk).
        public var delay: Duration?
        public var jitter: Duration?
        /// For `partition`, `delay` and `stall`: the fault ends (heals) this long after it starts; `nil`: at the
        /// end of the run.
        public var healAfter: Duration?
        /// For link faults with several brokers: only the link to this shard (`b<k>`); `nil`: every link of the
        /// process.
        public var shard: String?
        /// For `bandwidth`: the most bytes per second the link carries in `direction`.
        public var bytesPerSecond: Int?
        /// For message faults: only messages of this command (`SEND`, `DELIVER`, `ACK`, ...) and/or of this
        /// application kind (`answer`, `response`, `ask.result`, ...); neither: every message.
        public var messageCommand: String?
        public var kind: String?
        /// For message faults: the chance that a matching message is taken (default 1), and at most how many.
        public var probability: Double?
        public var count: Int?

        /// The process groups a link fault may name instead of one process.
        public static let linkGroups = ["parents", "children", "workers"]

        /// Whether `process` (a process name) is what this fault's `process` names: itself, or a group it is in.
        public func targets(_ process: String) -> Bool {
            switch self.process {
            case "parents": process.hasPrefix("parent-")
            case "children": process.hasPrefix("child-")
            case "workers": !process.hasPrefix("broker")
            default: process == self.process
            }
        }

        public init(
            at: Duration,
            process: String,
            action: Action,
            restartAfter: Duration? = nil,
            continueAfter: Duration? = nil
        ) {
            self.at = at
            self.process = process
            self.action = action
            self.restartAfter = restartAfter
            self.continueAfter = continueAfter
        }

        /// A link fault on `process`'s link to the broker.
        public init(
            at: Duration,
            link process: String,
            action: Action,
            direction: Direction? = nil,
            delay: Duration? = nil,
            jitter: Duration? = nil,
            healAfter: Duration? = nil
        ) {
            self.at = at
            self.process = process
            self.action = action
            self.direction = direction
            self.delay = delay
            self.jitter = jitter
            self.healAfter = healAfter
        }

        /// A `run` fault: `command` at `at`, then `undo` (if any) `undoAfter` later (default 1s).
        public init(at: Duration, run command: [String], undo: [String]? = nil, undoAfter: Duration? = nil) {
            self.at = at
            self.process = ""
            self.action = .run
            self.command = command
            self.undo = undo
            self.undoAfter = undo == nil ? nil : (undoAfter ?? .seconds(1))
        }
    }
}

extension Scenario.Fault {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case at, process, action, restartAfter, continueAfter, command, undo, undoAfter
        case direction, delay, jitter, healAfter, shard, bytesPerSecond, messageCommand, kind, probability, count
    }

    public init(from decoder: any Decoder) throws {
        try refuseUnknownKeys(decoder, CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        guard let at = try c.decodeDuration(.at) else {
            throw ScenarioError(field: Scenario.path(c.codingPath + [CodingKeys.at]), "is required")
        }
        self.at = at
        let actionText = try c.decode(String.self, forKey: .action)
        guard let action = Action(rawValue: actionText) else {
            throw ScenarioError(
                field: Scenario.path(c.codingPath + [CodingKeys.action]),
                "must be one of \(Action.allCases.map(\.rawValue).joined(separator: ", ")), got '\(actionText)'"
            )
        }
        self.action = action
        // A 'run' fault involves no process; every other action names one.
        process =
            action == .run
            ? try c.decodeIfPresent(String.self, forKey: .process) ?? ""
            : try c.decode(String.self, forKey: .process)
        restartAfter = try c.decodeDuration(.restartAfter)
        continueAfter = try c.decodeDuration(.continueAfter)
        command = try c.decodeIfPresent([String].self, forKey: .command)
        undo = try c.decodeIfPresent([String].self, forKey: .undo)
        undoAfter = try c.decodeDuration(.undoAfter) ?? (undo == nil ? nil : .seconds(1))
        if let text = try c.decodeIfPresent(String.self, forKey: .direction) {
            guard let direction = Direction(rawValue: text) else {
                throw ScenarioError(
                    field: Scenario.path(c.codingPath + [CodingKeys.direction]),
                    "must be both, toBroker or fromBroker, got '\(text)'"
                )
            }
            self.direction = direction
        }
        delay = try c.decodeDuration(.delay)
        jitter = try c.decodeDuration(.jitter)
        healAfter = try c.decodeDuration(.healAfter)
        shard = try c.decodeIfPresent(String.self, forKey: .shard)
        bytesPerSecond = try c.decodeIfPresent(Int.self, forKey: .bytesPerSecond)
        messageCommand = try c.decodeIfPresent(String.self, forKey: .messageCommand)
        kind = try c.decodeIfPresent(String.self, forKey: .kind)
        probability = try c.decodeIfPresent(Double.self, forKey: .probability)
        count = try c.decodeIfPresent(Int.self, forKey: .count)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(at.text, forKey: .at)
        if action != .run { try c.encode(process, forKey: .process) }
        try c.encode(action.rawValue, forKey: .action)
        try c.encodeIfPresent(restartAfter?.text, forKey: .restartAfter)
        try c.encodeIfPresent(continueAfter?.text, forKey: .continueAfter)
        try c.encodeIfPresent(command, forKey: .command)
        try c.encodeIfPresent(undo, forKey: .undo)
        try c.encodeIfPresent(undoAfter?.text, forKey: .undoAfter)
        try c.encodeIfPresent(direction?.rawValue, forKey: .direction)
        try c.encodeIfPresent(delay?.text, forKey: .delay)
        try c.encodeIfPresent(jitter?.text, forKey: .jitter)
        try c.encodeIfPresent(healAfter?.text, forKey: .healAfter)
        try c.encodeIfPresent(shard, forKey: .shard)
        try c.encodeIfPresent(bytesPerSecond, forKey: .bytesPerSecond)
        try c.encodeIfPresent(messageCommand, forKey: .messageCommand)
        try c.encodeIfPresent(kind, forKey: .kind)
        try c.encodeIfPresent(probability, forKey: .probability)
        try c.encodeIfPresent(count, forKey: .count)
    }
}
