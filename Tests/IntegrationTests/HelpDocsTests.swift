import Foundation
import Testing

/// The docs' flag tables cannot drift from the executables: every command's `--help` (run from the build folder) and
/// the tables in README.md and docs/*.md marked `<!-- flags: COMMAND -->` list the same flags, with the same
/// environment variables and defaults, both ways; every command with options has a table, and every table names a
/// command that exists.
///
/// Table format (one for all docs): `| flag | env | default | meaning |`. The flag cell starts with `` `--name ...` ``;
/// the env cell with `` `ASKRELAY_...` ``; the default cell is exactly `` `VALUE` `` when `--help` shows
/// `default: VALUE`, and anything else (`none`, `off`, a description) when it shows none. A marker may name several
/// commands, separated by commas (`<!-- flags: askrelay-limits, askrelay-parent, askrelay-child -->`); a command's rows may come from
/// several tables.
@Suite("help and docs: every flag table matches --help, both ways", .timeLimit(.minutes(2)))
struct HelpDocsTests {
    static let executables = ["askrelay-broker", "askrelay-limits", "askrelay-parent", "askrelay-child", "askrelay"]

    @Test("every command's --help exits 0 and every option has an ASKRELAY_* variable")
    func everyOptionHasAVariable() throws {
        for command in try Self.commands() {
            for option in command.options {
                let variable = try #require(option.environment, "\(command.path) --\(option.name) has no env")
                #expect(variable.hasPrefix("ASKRELAY_"), "\(command.path) --\(option.name): \(variable)")
            }
        }
    }

    @Test("every flag in --help is in the command's docs table, with the same env and default")
    func helpToDocs() throws {
        let tables = try DocsFlagTables.load()
        for command in try Self.commands() where !command.options.isEmpty {
            let rows = try #require(tables.rows[command.path], "no docs table <!-- flags: \(command.path) -->")
            for option in command.options {
                guard let row = rows.first(where: { $0.name == option.name }) else {
                    Issue.record("\(command.path) --\(option.name) is in --help but in no docs table")
                    continue
                }
                #expect(row.environment == option.environment, "\(command.path) --\(option.name) env (\(row.place))")
                #expect(row.defaultValue == option.defaultValue, "\(command.path) --\(option.name) default (\(row.place))")
            }
        }
    }

    @Test("every flag in a docs table is in that command's --help; every table names a command")
    func docsToHelp() throws {
        let tables = try DocsFlagTables.load()
        let commands = Dictionary(uniqueKeysWithValues: try Self.commands().map { ($0.path, $0) })
        #expect(!tables.rows.isEmpty, "no marked flag tables found")
        for (path, rows) in tables.rows {
            guard let command = commands[path] else {
                Issue.record("a docs table is marked for '\(path)', which is not a command (\(rows.first?.place ?? ""))")
                continue
            }
            for row in rows where !command.options.contains(where: { $0.name == row.name }) {
                Issue.record("\(path) --\(row.name) is in the docs (\(row.place)) but not in --help")
            }
            let names = rows.map(\.name)
            for name in Set(names) where names.filter({ $0 == name }).count > 1 {
                Issue.record("\(path) --\(name) is in its docs tables more than once")
            }
        }
    }

    /// Every command and subcommand, found by walking the `Subcommands:` sections of `--help`.
    static func commands() throws -> [HelpCommand] {
        var found: [HelpCommand] = []
        var queue = executables.map { ($0, [String]()) }
        while !queue.isEmpty {
            let (executable, subcommands) = queue.removeFirst()
            let run = Help.text(executable, subcommands)
            let path = ([executable] + subcommands).joined(separator: " ")
            guard run.status == 0 else { throw ProcessFailure("\(path) --help exited \(run.status): \(run.stderr)") }
            let command = HelpCommand(path: path, help: run.stdout)
            found.append(command)
            queue += command.subcommands.map { (executable, subcommands + [$0]) }
        }
        return found
    }
}

/// One command's `--help`, parsed: its subcommands and options (without `--help` and `--version`).
struct HelpCommand {
    struct Option {
        var name: String
        var environment: String?
        var defaultValue: String?
    }

    var path: String
    var subcommands: [String] = []
    var options: [Option] = []

    init(path: String, help: String) {
        self.path = path
        var section = ""
        var pending: String?
        for line in help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.isEmpty {
                section = ""
                continue
            }
            if !line.hasPrefix(" ") {
                section = line
                continue
            }
            if section == "Subcommands:", let word = line.split(separator: " ").first {
                subcommands.append(String(word))
            } else if section == "Options:" {
                if line.hasPrefix("  --") {
                    pending = String(line.dropFirst(4).split(separator: " ").first ?? "")
                } else if let name = pending {
                    pending = nil
                    if name != "help" && name != "version" { options.append(Self.option(name, line)) }
                }
            }
        }
    }

    /// The notes AskCLI appends to an option's help line: ` (default: X; env: NAME; repeatable)`.
    static func option(_ name: String, _ line: String) -> Option {
        var option = Option(name: name)
        let starts = [" (default: ", " (env: ", " (repeatable"]
        // The help text may hold parentheses of its own: the notes are the last group that starts like one.
        let found = starts.compactMap { line.range(of: $0, options: .backwards) }
        guard line.hasSuffix(")"), let start = found.max(by: { $0.lowerBound < $1.lowerBound }) else { return option }
        let notes = line[line.index(after: start.lowerBound)...].dropFirst().dropLast()
        for note in notes.components(separatedBy: "; ") {
            if note.hasPrefix("default: ") { option.defaultValue = String(note.dropFirst("default: ".count)) }
            if note.hasPrefix("env: ") { option.environment = String(note.dropFirst("env: ".count)) }
        }
        return option
    }
}

/// The flag tables of README.md and docs/*.md that follow a `<!-- flags: COMMAND ... -->` line.
struct DocsFlagTables {
    struct Row {
        var name: String
        var environment: String?
        var defaultValue: String?
        var place: String
    }

    var rows: [String: [Row]] = [:]

    static func load() throws -> DocsFlagTables {
        let docs = Repository.root.appendingPathComponent("docs")
        let files = try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }.sorted()
        var tables = DocsFlagTables()
        for file in ["README.md"] + files.map({ "docs/" + $0 }) {
            let text = try String(contentsOf: Repository.root.appendingPathComponent(file), encoding: .utf8)
            try tables.read(text, file: file)
        }
        return tables
    }

    mutating func read(_ text: String, file: String) throws {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var index = 0
        while index < lines.count {
            let line = lines[index].trimmingCharacters(in: .whitespaces)
            index += 1
            guard line.hasPrefix("<!-- flags:"), line.hasSuffix("-->") else { continue }
            let commands = line.dropFirst("<!-- flags:".count).dropLast(3).split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            while index < lines.count, lines[index].trimmingCharacters(in: .whitespaces).isEmpty { index += 1 }
            guard index + 1 < lines.count, Self.cells(lines[index]) == ["flag", "env", "default", "meaning"] else {
                throw ProcessFailure("\(file):\(index + 1): a flags marker must be followed by | flag | env | default | meaning |")
            }
            index += 2
            while index < lines.count, lines[index].hasPrefix("|") {
                let cells = Self.cells(lines[index])
                let place = "\(file):\(index + 1)"
                guard cells.count == 4, let flag = Self.code(cells[0]), flag.hasPrefix("--") else {
                    throw ProcessFailure("\(place): a flag row needs 4 cells and a `--flag` first: \(lines[index])")
                }
                let name = String(flag.dropFirst(2).split(separator: " ").first ?? "")
                let row = Row(
                    name: name, environment: Self.code(cells[1]), defaultValue: Self.onlyCode(cells[2]), place: place)
                for command in commands { rows[command, default: []].append(row) }
                index += 1
            }
        }
    }

    /// The cells of a Markdown table row; `\|` inside a cell is a literal bar.
    static func cells(_ line: String) -> [String] {
        let escaped = line.replacingOccurrences(of: "\\|", with: "\u{0}")
        var cells = escaped.split(separator: "|", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "\u{0}", with: "|").trimmingCharacters(in: .whitespaces)
        }
        if cells.first == "" { cells.removeFirst() }
        if cells.last == "" { cells.removeLast() }
        return cells
    }

    /// The first `code` span of a cell.
    static func code(_ cell: String) -> String? {
        let parts = cell.split(separator: "`", omittingEmptySubsequences: false)
        return parts.count >= 3 ? String(parts[1]) : nil
    }

    /// The value of a cell that is exactly one `code` span (a default); `nil` for any other text.
    static func onlyCode(_ cell: String) -> String? {
        guard cell.hasPrefix("`"), cell.hasSuffix("`"), cell.count >= 2 else { return nil }
        let inner = cell.dropFirst().dropLast()
        return inner.contains("`") ? nil : String(inner)
    }
}
