import AskClient
import AskProtocol
import Foundation
import SQLite

/// The limits worker's state file: a `defaults` entry for children not listed, and one entry per child.
///
/// ```json
/// {
///   "defaults": {"limitsEnabled": true, "contactSyncSetUp": true, "eligible": true},
///   "children": {
///     "c1": {"knownHandles": [{"kind": "phoneNumber", "value": "+14155550100"}]},
///     "c2": {"limitsEnabled": false},
///     "c3": {"contactSyncSetUp": false, "eligible": false}
///   }
/// }
/// ```
///
/// A field left out of a child's entry takes the `defaults` value; a field left out of `defaults` takes the
/// built-in default (limits on, contact sync set up, eligible, no known handles).
public struct LimitsStateFile: Sendable, Hashable {
    public var defaults: LimitsState
    public var children: [String: LimitsState]

    public init(defaults: LimitsState = LimitsState(), children: [String: LimitsState] = [:]) {
        self.defaults = defaults
        self.children = children
    }

    /// The state of `child`: its own entry, else the defaults.
    public func state(of child: String) -> LimitsState { children[child] ?? defaults }

    /// One entry as written in the file: every field optional.
    struct Entry: Codable {
        var limitsEnabled: Bool?
        var contactSyncSetUp: Bool?
        var eligible: Bool?
        var knownHandles: [CommunicationHandle]?

        func resolved(over base: LimitsState) -> LimitsState {
            LimitsState(
                limitsEnabled: limitsEnabled ?? base.limitsEnabled,
                contactSyncSetUp: contactSyncSetUp ?? base.contactSyncSetUp,
                eligible: eligible ?? base.eligible,
                knownHandles: knownHandles.map(Set.init) ?? base.knownHandles
            )
        }
    }

    struct File: Codable {
        var defaults: Entry?
        var children: [String: Entry]?
    }

    /// Parses the JSON of a state file.
    /// - Throws: ``AgentConfigurationError`` naming the source and the problem.
    public static func parse(_ data: Data, source: String = "state file") throws(AgentConfigurationError)
        -> LimitsStateFile
    {
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: data)
        } catch {
            throw AgentConfigurationError(
                "\(source): not a limits state file ({\"defaults\": {...}, \"children\": {\"<id>\": {...}}}): \(describeDecoding(error))"
            )
        }
        let defaults = file.defaults?.resolved(over: LimitsState()) ?? LimitsState()
        var children: [String: LimitsState] = [:]
        for (id, entry) in file.children ?? [:] {
            guard Address.isValidID(id) else {
                throw AgentConfigurationError(
                    "\(source): child id '\(id)' must be 1-64 characters of A-Z a-z 0-9 . _ -"
                )
            }
            for handle in entry.knownHandles ?? [] where handle.value.trimmingCharacters(in: .whitespaces).isEmpty {
                throw AgentConfigurationError("\(source): child '\(id)' has a known handle with an empty value")
            }
            children[id] = entry.resolved(over: defaults)
        }
        return LimitsStateFile(defaults: defaults, children: children)
    }

    /// Reads and parses a state file.
    public static func load(path: String) throws(AgentConfigurationError) -> LimitsStateFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AgentConfigurationError("cannot read limits state file \(path)")
        }
        return try parse(data, source: path)
    }
}

/// The limits worker's SQLite store: one row per child, plus the defaults. Belongs to one thread at a time.
extension LimitsWorker {
    /// The limits store's file in the worker's `--data-dir`.
    public static func storePath(dataDirectory: String) -> String { dataDirectory + "/limits.sqlite" }

    /// A child's limits state as the store in `dataDirectory` (the worker's `--data-dir`) holds it: its own, else
    /// the stored defaults, else ``LimitsState``'s defaults when nothing is seeded yet. Reads on a read-only
    /// connection of its own, while a limits worker may be running on the store: it is in WAL mode, so the reader
    /// sees the last committed state and takes no lock the worker waits for. For tools and tests that look at a
    /// limits worker from outside (the cluster harness); the schema stays the store's own.
    /// - Throws: `SQLiteError` when there is no store or it cannot be read; a decoding error for a bad row.
    public static func readStoredState(of child: String, dataDirectory: String) throws -> LimitsState {
        let database = try Database(readingOnly: storePath(dataDirectory: dataDirectory))
        // The worker holds a lock now and then (a checkpoint): wait it out rather than fail the read.
        try database.pragma("busy_timeout", 5000)
        let own = try database.query("SELECT state FROM limits_children WHERE child = ?", [.text(child)]) {
            $0.blob(at: 0)
        }
        let blob =
            try own.first
            ?? database.query("SELECT value FROM limits_meta WHERE key = 'defaults'", []) { $0.blob(at: 0) }.first
        guard let blob else { return LimitsState() }
        return try WireJSON.decode(LimitsState.self, from: blob)
    }
}

final class LimitsStore {
    let database: Database
    /// One limits worker per store: held for the store's life (`limits.lock` in its folder).
    let ownership: OwnerLock
    private(set) var defaults: LimitsState
    private(set) var children: [String: LimitsState]

    /// Opens (creating) `directory/limits.sqlite`. A new store, or `reset`, is seeded from `seed`; otherwise `seed`
    /// is ignored and the stored state wins. - Returns: the store and whether it was seeded now.
    /// - Throws: ``OwnerLockError`` when the folder is unusable or another live process owns the store.
    static func open(directory: String, seed: LimitsStateFile?, reset: Bool, powerLossSafe: Bool = false) throws -> (
        store: LimitsStore, seeded: Bool
    ) {
        let ownership = try OwnerLock.claim(
            folder: directory,
            name: "limits.lock",
            what: "the limits store (--data-dir)"
        )
        let database = try Database(path: LimitsWorker.storePath(dataDirectory: directory))
        // First, so the set-up waits out a reader's lock (a tool or test reading the store) instead of failing.
        try database.pragma("busy_timeout", 5000)
        try database.pragma("journal_mode", "wal")
        try database.pragma("synchronous", powerLossSafe ? "full" : "normal")
        try database.execute(
            """
            CREATE TABLE IF NOT EXISTS limits_meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS limits_children (child TEXT PRIMARY KEY, state BLOB NOT NULL);
            """
        )
        let isSeeded = try !database.query("SELECT 1 FROM limits_meta WHERE key = 'defaults'", [], { _ in 1 }).isEmpty
        var seededNow = false
        if reset || !isSeeded {
            let file = seed ?? LimitsStateFile()
            try database.transaction {
                try database.run("DELETE FROM limits_children")
                try database.run(
                    "INSERT OR REPLACE INTO limits_meta (key, value) VALUES ('defaults', ?)",
                    [.blob(try WireJSON.encode(file.defaults))]
                )
                for (child, state) in file.children {
                    try database.run(
                        "INSERT INTO limits_children (child, state) VALUES (?, ?)",
                        [.text(child), .blob(try WireJSON.encode(state))]
                    )
                }
            }
            seededNow = true
        }
        let defaultsBlob = try database.query(
            "SELECT value FROM limits_meta WHERE key = 'defaults'",
            [],
            { $0.blob(at: 0) }
        )
        let defaults = try defaultsBlob.first.map { try WireJSON.decode(LimitsState.self, from: $0) } ?? LimitsState()
        var children: [String: LimitsState] = [:]
        for (child, blob) in try database.query(
            "SELECT child, state FROM limits_children",
            [],
            { ($0.text(at: 0), $0.blob(at: 1)) }
        ) {
            children[child] = try WireJSON.decode(LimitsState.self, from: blob)
        }
        let store = LimitsStore(database: database, ownership: ownership, defaults: defaults, children: children)
        return (store, seededNow)
    }

    private init(database: Database, ownership: OwnerLock, defaults: LimitsState, children: [String: LimitsState]) {
        self.database = database
        self.ownership = ownership
        self.defaults = defaults
        self.children = children
    }

    func state(of child: String) -> LimitsState { children[child] ?? defaults }

    /// Changes a child's state and writes it before returning. A change that leaves the state as it was (an
    /// approval of handles the child already knows) writes nothing.
    func update(_ child: String, _ change: (inout LimitsState) -> Void) throws {
        let before = state(of: child)
        var state = before
        change(&state)
        if state == before { return }
        try database.run(
            "INSERT OR REPLACE INTO limits_children (child, state) VALUES (?, ?)",
            [.text(child), .blob(try WireJSON.encode(state))]
        )
        children[child] = state
    }
}

/// Hands a store opened on one thread to the connection thread, once.
// @unchecked: the opening thread gives the store up before the connection thread takes it; never shared.
final class LimitsStoreHandOff: @unchecked Sendable {
    private var store: LimitsStore?
    init(_ store: LimitsStore) { self.store = store }
    func take() -> LimitsStore? {
        defer { store = nil }
        return store
    }
}
