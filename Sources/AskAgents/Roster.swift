import AskClient
import AskProtocol
import Foundation

/// One guardian a parent worker hosts, as given on the command line or in a roster file.
public struct GuardianEntry: Codable, Sendable, Hashable {
    /// The `<id>` of `guardian/<id>`.
    public var id: String
    public var family: String
    /// A policy text (`approve`, `probability:0.7`, `rules:FILE`, ...) overriding the worker's `--policy`.
    public var policy: String?
    /// A think-time text (`fixed:200ms`, ...) overriding the worker's `--think`.
    public var think: String?

    public init(id: String, family: String, policy: String? = nil, think: String? = nil) {
        self.id = id
        self.family = family
        self.policy = policy
        self.think = think
    }
}

/// The guardians of one parent worker: from `--guardian ID@FAMILY` flags, a roster file, or generated.
public enum Roster {
    /// Parses `ID@FAMILY`.
    /// - Throws: ``AgentConfigurationError`` if the text is not of that form or a part is not a valid id.
    public static func parseGuardian(_ text: String) throws(AgentConfigurationError) -> GuardianEntry {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2 else {
            throw AgentConfigurationError("guardian '\(text)' must be ID@FAMILY, for example g1@f1")
        }
        let entry = GuardianEntry(id: String(parts[0]), family: String(parts[1]))
        try check([entry], source: "--guardian")
        return entry
    }

    /// Parses a roster file: a JSON list of `{"id": ..., "family": ..., "policy"?: ..., "think"?: ...}`.
    /// - Throws: ``AgentConfigurationError`` naming the file and what is wrong.
    public static func parseFile(_ data: Data, source: String = "roster") throws(AgentConfigurationError)
        -> [GuardianEntry]
    {
        let entries: [GuardianEntry]
        do {
            entries = try JSONDecoder().decode([GuardianEntry].self, from: data)
        } catch {
            throw AgentConfigurationError(
                "\(source): not a roster (a JSON list of {\"id\", \"family\", \"policy\"?, \"think\"?}): \(describeDecoding(error))"
            )
        }
        try check(entries, source: source)
        return entries
    }

    /// Reads and parses a roster file.
    public static func load(path: String) throws(AgentConfigurationError) -> [GuardianEntry] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw AgentConfigurationError("cannot read roster file \(path)")
        }
        return try parseFile(data, source: path)
    }

    /// Generated guardians: family `f<f>` for f in 1...families, guardians `<prefix><f>-<g>` for g in 1...perFamily.
    public static func generate(families: Int, guardiansPerFamily: Int, idPrefix: String)
        throws(AgentConfigurationError) -> [GuardianEntry]
    {
        guard families >= 1, guardiansPerFamily >= 1 else {
            throw AgentConfigurationError("--families and --guardians-per-family must be at least 1")
        }
        var entries: [GuardianEntry] = []
        entries.reserveCapacity(families * guardiansPerFamily)
        for f in 1...families {
            for g in 1...guardiansPerFamily {
                entries.append(GuardianEntry(id: "\(idPrefix)\(f)-\(g)", family: "f\(f)"))
            }
        }
        try check(entries, source: "generated roster")
        return entries
    }

    /// Every id and family valid, no id twice, at least one guardian.
    public static func check(_ entries: [GuardianEntry], source: String) throws(AgentConfigurationError) {
        guard !entries.isEmpty else { throw AgentConfigurationError("\(source): no guardians") }
        var seen: Set<String> = []
        for (index, entry) in entries.enumerated() {
            let at = "\(source): guardian \(index + 1)"
            guard Address.isValidID(entry.id) else {
                throw AgentConfigurationError("\(at): id '\(entry.id)' must be 1-64 characters of A-Z a-z 0-9 . _ -")
            }
            guard Address.isValidID(entry.family) else {
                throw AgentConfigurationError(
                    "\(at): family '\(entry.family)' must be 1-64 characters of A-Z a-z 0-9 . _ -"
                )
            }
            guard seen.insert(entry.id).inserted else {
                throw AgentConfigurationError("\(at): id '\(entry.id)' is listed twice")
            }
            if let policy = entry.policy, policy.isEmpty { throw AgentConfigurationError("\(at): empty policy") }
            if let think = entry.think, think.isEmpty { throw AgentConfigurationError("\(at): empty think time") }
        }
    }
}
