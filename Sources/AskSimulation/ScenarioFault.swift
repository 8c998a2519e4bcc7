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
                "must be kill, stop, term, power-cut or run, got '\(actionText)'"
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
    }
}
