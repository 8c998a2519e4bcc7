/// The one line an askrelay executable prints on stdout once it serves, `ready key=value ...`, and the one parser of
/// it: `ready endpoints=tcp://127.0.0.1:40123,ipc:///tmp/b.ipc metrics=127.0.0.1:9100` (the broker),
/// `ready id=limits-1 children=3` (the limits worker), `ready guardians=2`, `ready children=2`, `ready frontend=...
/// backend=...` (the proxy baseline of `askrelay load`).
///
/// The executables print ``text`` (fields in the order given, a field without a value left out); a supervisor reads
/// the line with ``init(parsing:)`` and the typed accessors. Two lines are equal when their text is.
public struct ReadyLine: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringInterpolation {
    /// The word that starts the line.
    public static let word = "ready"

    /// One `key=value` field.
    public struct Field: Sendable, Hashable {
        public let key: String
        public let value: String
    }

    /// The fields in the order of the line.
    public let fields: [Field]
    /// The line as printed.
    public let text: String

    /// The line with `fields` in this order; a field whose value is `nil` is left out (an optional
    /// `metrics=HOST:PORT`).
    public init(_ fields: KeyValuePairs<String, String?>) {
        let kept = fields.compactMap { key, value in value.map { Field(key: key, value: $0) } }
        self.fields = kept
        text = ([Self.word] + kept.map { "\($0.key)=\($0.value)" }).joined(separator: " ")
    }

    /// Reads `line`: `ready` alone or followed by a space and `key=value` fields (a word without `=` is skipped).
    /// `nil` for any other line.
    public init?(parsing line: String) {
        guard line == Self.word || line.hasPrefix(Self.word + " ") else { return nil }
        fields = line.dropFirst(Self.word.count).split(separator: " ").compactMap { word in
            let parts = word.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return parts.count == 2 ? Field(key: String(parts[0]), value: String(parts[1])) : nil
        }
        text = line
    }

    /// A line of a test or a doc example: parsed as ``init(parsing:)``; any other text is kept with no fields.
    public init(stringLiteral value: String) {
        self = ReadyLine(parsing: value) ?? ReadyLine(text: value)
    }

    /// A line written with interpolations, as ``init(stringLiteral:)``.
    public init(stringInterpolation: DefaultStringInterpolation) {
        self.init(stringLiteral: String(stringInterpolation: stringInterpolation))
    }

    private init(text: String) {
        fields = []
        self.text = text
    }

    /// The value of the first field named `key`.
    public subscript(_ key: String) -> String? { fields.first { $0.key == key }?.value }

    /// `endpoints=`: the broker's bound endpoints, in bind order (empty without the field).
    public var endpoints: [String] { self["endpoints"]?.split(separator: ",").map(String.init) ?? [] }

    /// The broker's first bound endpoint (a `tcp://...:*` bind comes back with the port the OS picked).
    public var endpoint: String? { endpoints.first }

    /// `metrics=`: the address the metrics endpoint bound (with `--metrics-endpoint`).
    public var metrics: String? { self["metrics"] }

    /// `id=`: the worker's id (the limits worker's).
    public var id: String? { self["id"] }

    public var description: String { text }

    public static func == (lhs: ReadyLine, rhs: ReadyLine) -> Bool { lhs.text == rhs.text }
    public func hash(into hasher: inout Hasher) { hasher.combine(text) }
}
