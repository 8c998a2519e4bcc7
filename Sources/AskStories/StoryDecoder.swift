import AskModel
import AskProtocol
import Foundation

/// A story that cannot be played: the file, the field (a path such as `steps[3].expect`) and what is wrong.
public struct StoryError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var field: String
    public var message: String

    public init(file: String, field: String, _ message: String) {
        self.file = file
        self.field = field
        self.message = message
    }

    /// `story.json: steps[3].expect: unknown value "x"; expected one of presented, ...`, its control characters
    /// escaped (``StoryReport/printable(_:)``): the values come from the file.
    public var description: String {
        StoryReport.printable(field.isEmpty ? "\(file): \(message)" : "\(file): \(field): \(message)")
    }
}

/// A JSON value, read after ``StrictJSONSyntax`` has checked the text.
indirect enum JSONValue: Decodable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    var kind: String {
        switch self {
        case .null: "null"
        case .bool: "true/false"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// Reads one JSON value at a field path, turning every mistake into a ``StoryError`` naming that path.
struct Field {
    let file: String
    let path: String
    let value: JSONValue

    func error(_ message: String) -> StoryError { StoryError(file: file, field: path, message) }

    func child(_ key: String, _ value: JSONValue) -> Field {
        Field(file: file, path: path.isEmpty ? key : "\(path).\(key)", value: value)
    }

    func object(known: [String]) throws -> [String: Field] {
        guard case .object(let members) = value else { throw error("expected an object, found \(value.kind)") }
        var fields: [String: Field] = [:]
        for key in members.keys.sorted() {
            guard known.contains(key) else {
                throw child(key, .null).error("unknown field; known: \(known.joined(separator: ", "))")
            }
            fields[key] = child(key, members[key]!)
        }
        return fields
    }

    func array() throws -> [Field] {
        guard case .array(let items) = value else { throw error("expected an array, found \(value.kind)") }
        return items.enumerated().map { Field(file: file, path: "\(path)[\($0.offset)]", value: $0.element) }
    }

    func string() throws -> String {
        guard case .string(let text) = value else { throw error("expected a string, found \(value.kind)") }
        return text
    }

    func bool() throws -> Bool {
        guard case .bool(let flag) = value else { throw error("expected true or false, found \(value.kind)") }
        return flag
    }

    /// An id of the address grammar: 1-64 characters of `A-Z a-z 0-9 . _ -`.
    func id() throws -> String {
        let text = try string()
        guard Address.isValidID(text) else {
            throw error("\"\(text)\" is not an id: 1-64 characters of A-Z a-z 0-9 . _ -")
        }
        return text
    }

    func oneOf(_ values: [String]) throws -> String {
        let text = try string()
        guard values.contains(text) else {
            throw error("unknown value \"\(text)\"; expected one of \(values.joined(separator: ", "))")
        }
        return text
    }

    /// `250ms`, `2s`, `5m`, `48h`; with `allowNegative`, a leading `-` too.
    func duration(allowNegative: Bool = false) throws -> Duration {
        let text = try string()
        let negative = allowNegative && text.hasPrefix("-")
        guard let value = parseDuration(negative ? String(text.dropFirst()) : text) else {
            throw error(
                "expected a duration such as \"250ms\", \"2s\" or \"48h\"\(allowNegative ? " (or \"-1s\": in the past)" : ""), got \"\(text)\""
            )
        }
        return negative ? .zero - value : value
    }

    /// `{"phone": "+15550100"}`, `{"email": "a@b.example"}` or `{"custom": "x"}`.
    func handle() throws -> CommunicationHandle {
        let fields = try object(known: ["phone", "email", "custom"])
        guard fields.count == 1, let (key, field) = fields.first else {
            throw error("a handle is one of {\"phone\": ...}, {\"email\": ...}, {\"custom\": ...}")
        }
        let kind: CommunicationHandle.Kind =
            switch key {
            case "phone": .phoneNumber
            case "email": .emailAddress
            default: .custom
            }
        return CommunicationHandle(value: try field.string(), kind: kind)
    }

    func handles() throws -> [CommunicationHandle] { try array().map { try $0.handle() } }
}

extension Field {
    func required(_ fields: [String: Field], _ key: String) throws -> Field {
        guard let field = fields[key] else { throw child(key, .null).error("is required") }
        return field
    }
}

// MARK: - Loading

extension Story {
    /// The story files `paths` name, in order: a file as given, a folder as every `*.json` in it, sorted by name.
    /// - Throws: ``StoryError`` for a path that is missing or a folder without stories.
    public static func files(_ paths: [String]) throws -> [String] {
        var found: [String] = []
        for path in paths {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
                throw StoryError(file: path, field: "", "no such file or folder")
            }
            if isFolder.boolValue {
                let names = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".json") }
                guard !names.isEmpty else { throw StoryError(file: path, field: "", "the folder has no *.json story") }
                found += names.sorted().map { (path as NSString).appendingPathComponent($0) }
            } else {
                found.append(path)
            }
        }
        return found
    }

    /// Reads and checks one story file. - Throws: ``StoryError`` naming the file and the field.
    public static func load(path: String) throws -> Story {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StoryError(file: path, field: "", "cannot be read")
        }
        let name = ((path as NSString).lastPathComponent as NSString).deletingPathExtension
        return try parse(data, file: path, defaultName: name)
    }

    /// Decodes and checks story JSON. - Throws: ``StoryError``.
    public static func parse(_ data: Data, file: String, defaultName: String) throws -> Story {
        do { try StrictJSONSyntax.check(data) } catch let failure as StrictJSONSyntax.Failure {
            throw StoryError(file: file, field: "", "\(failure)")
        }
        let value: JSONValue
        do { value = try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            throw StoryError(file: file, field: "", "not readable as JSON: \(error)")
        }
        return try StoryReader(root: Field(file: file, path: "", value: value), defaultName: defaultName).story()
    }
}

/// Turns the checked JSON into a ``Story``, checking every reference (children, guardians, questions, choices).
struct StoryReader {
    let root: Field
    let defaultName: String

    static let topKeys = [
        "name", "description", "families", "limits", "broker", "askTimeout", "answerTimeout", "steps",
    ]

    func story() throws -> Story {
        let fields = try root.object(known: Self.topKeys)
        let families = try self.families(try root.required(fields, "families"))
        var story = Story(
            name: try fields["name"]?.string() ?? defaultName,
            file: root.file,
            description: try fields["description"]?.string(),
            families: families,
            limits: [:],
            broker: BrokerSettings(),
            askTimeout: try fields["askTimeout"]?.duration() ?? .seconds(10),
            steps: []
        )
        if let limits = fields["limits"] { story.limits = try self.limits(limits, children: story.children) }
        if let broker = fields["broker"] {
            let settings = try broker.object(known: ["pendingWindow", "durability"])
            if let window = settings["pendingWindow"] {
                story.broker.pendingWindow = try window.duration()
                guard story.broker.pendingWindow > .zero else { throw window.error("must be longer than 0") }
            }
            if let durability = settings["durability"] {
                story.broker.durability = try durability.oneOf(["strict", "batch", "off"])
            }
        }
        guard story.askTimeout > .zero else { throw fields["askTimeout"]!.error("must be longer than 0") }
        if let field = fields["answerTimeout"] {
            story.answerTimeout = try field.duration()
            guard story.answerTimeout > .zero else { throw field.error("must be longer than 0") }
        }
        var steps = StepReader(children: story.children, guardians: story.guardians)
        let items = try root.required(fields, "steps").array()
        guard !items.isEmpty else { throw root.child("steps", .null).error("a story needs at least one step") }
        story.steps = try items.enumerated().map { try steps.step($0.element, index: $0.offset) }
        return story
    }

    func families(_ field: Field) throws -> [Family] {
        var seen: Set<String> = []
        let families = try field.array().map { item -> Family in
            let fields = try item.object(known: ["id", "children", "guardians"])
            let id = try item.required(fields, "id").id()
            let children = try fields["children"]?.array().map { try $0.id() } ?? []
            let guardians = try fields["guardians"]?.array().map { try $0.id() } ?? []
            for (name, member) in zip(children, try fields["children"]?.array() ?? []) {
                guard seen.insert("child/\(name)").inserted else {
                    throw member.error("child \"\(name)\" is listed twice")
                }
            }
            for (name, member) in zip(guardians, try fields["guardians"]?.array() ?? []) {
                guard seen.insert("guardian/\(name)").inserted else {
                    throw member.error("guardian \"\(name)\" is listed twice")
                }
            }
            return Family(id: id, children: children, guardians: guardians)
        }
        guard families.contains(where: { !$0.children.isEmpty }) else {
            throw field.error("no family has a child; a story needs at least one child")
        }
        return families
    }

    func limits(_ field: Field, children: [String: String]) throws -> [String: ChildLimits] {
        guard case .object(let members) = field.value else {
            throw field.error("expected an object of children's limits, found \(field.value.kind)")
        }
        var found: [String: ChildLimits] = [:]
        for child in members.keys.sorted() {
            let entry = field.child(child, members[child]!)
            guard children[child] != nil else {
                throw entry.error(
                    "\"\(child)\" is not a child of any family (\(children.keys.sorted().joined(separator: ", ")))"
                )
            }
            let fields = try entry.object(known: ["limitsEnabled", "contactSyncSetUp", "eligible", "knownHandles"])
            found[child] = ChildLimits(
                limitsEnabled: try fields["limitsEnabled"]?.bool(),
                contactSyncSetUp: try fields["contactSyncSetUp"]?.bool(),
                eligible: try fields["eligible"]?.bool(),
                knownHandles: try fields["knownHandles"]?.handles() ?? []
            )
        }
        return found
    }
}
