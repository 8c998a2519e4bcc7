import AskRelayProcesses
import AskTestSupport
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
    /// Test-only flags an environment variable must not be able to turn on: a broker keeps real time unless its
    /// command line says otherwise (docs/broker.md).
    static let commandLineOnly: Set<String> = ["askrelay-broker --driven-clock", "askrelay rebalance --pause-before"]

    @Test("every command's --help exits 0 and every option has an ASKRELAY_* variable")
    func everyOptionHasAVariable() throws {
        for command in try Self.commands() {
            for option in command.options where !Self.commandLineOnly.contains("\(command.path) --\(option.name)") {
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
                #expect(
                    row.defaultValue == option.defaultValue,
                    "\(command.path) --\(option.name) default (\(row.place))"
                )
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
                Issue.record(
                    "a docs table is marked for '\(path)', which is not a command (\(rows.first?.place ?? ""))"
                )
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
        let files = try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }
            .sorted()
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
                throw ProcessFailure(
                    "\(file):\(index + 1): a flags marker must be followed by | flag | env | default | meaning |"
                )
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
                    name: name,
                    environment: Self.code(cells[1]),
                    defaultValue: Self.onlyCode(cells[2]),
                    place: place
                )
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

/// Bad usage of the real executables: exit 64 at once with one message that names the flag or variable, before
/// anything starts (each runs in a fresh folder and is killed if it is still running after 10 s).
@Suite("bad usage of the executables exits 64 with a readable message", .timeLimit(.minutes(2)))
struct UsageExitTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var command: [String]
        var environment: [String: String] = [:]
        var message: String
        var testDescription: String {
            (environment.map { "\($0.key)=\($0.value)" }.sorted() + command).joined(separator: " ")
        }
    }

    static let cases: [Case] = [
        // A duration past 100d trapped in an Int64 conversion (SIGILL) before.
        Case(
            command: ["askrelay-broker", "--heartbeat", "1e12s"],
            message: "option '--heartbeat' needs a duration like 250ms, 2s, 5m or 48h, from 0 to 100d, got '1e12s'"
        ),
        Case(
            command: ["askrelay-child", "--families", "1", "--think", "101d"],
            message: "option '--think' needs a duration"
        ),
        Case(
            command: ["askrelay-parent", "--families", "1", "--heartbeat", "5ms"],
            message: "option '--heartbeat' must be from 10ms to 100d, got '5ms'"
        ),
        // One time-scale range: simulate accepted 1e10 and the broker refused it later (exit 1).
        Case(
            command: ["askrelay", "simulate", "--time-scale", "1e10"],
            message: "option '--time-scale' needs a number in 0.01...1000000000, got '1e10'"
        ),
        Case(
            command: ["askrelay-broker"],
            environment: ["ASKRELAY_TIME_SCALE": "1e10"],
            message: "environment variable ASKRELAY_TIME_SCALE (for --time-scale) needs a number in 0.01...1000000000"
        ),
        // Endpoints: one check for every executable and flag.
        Case(
            command: ["askrelay-child", "--families", "1", "--broker", "localhost:5555"],
            message:
                "option '--broker': 'localhost:5555' is not an endpoint (no scheme): give tcp://HOST:PORT or ipc://PATH, for example tcp://localhost:5555"
        ),
        Case(
            command: ["askrelay-parent", "--families", "1", "--broker", "localhost:5555"],
            message: "'localhost:5555' is not an endpoint (no scheme)"
        ),
        Case(
            command: ["askrelay-limits", "--broker", "localhost:5555"],
            message: "'localhost:5555' is not an endpoint (no scheme)"
        ),
        Case(
            command: ["askrelay-broker", "--endpoint", "foo://bar"],
            message: "option '--endpoint': 'foo://bar' is not an endpoint: scheme 'foo' is not tcp or ipc"
        ),
        Case(
            command: ["askrelay-broker", "--stats-endpoint", "tcp://127.0.0.1"],
            message: "option '--stats-endpoint': 'tcp://127.0.0.1' has no port"
        ),
        Case(
            command: ["askrelay", "simulate", "--broker", "foo://bar"],
            message: "option '--broker': 'foo://bar' is not an endpoint"
        ),
        Case(
            command: ["askrelay", "simulate", "--endpoint", "127.0.0.1:5555"],
            message: "option '--endpoint': '127.0.0.1:5555' is not an endpoint (no scheme)"
        ),
        Case(
            command: ["askrelay", "load", "--broker", "localhost:5555"],
            message: "option '--broker': 'localhost:5555' is not an endpoint (no scheme)"
        ),
        Case(
            command: ["askrelay", "top", "--stats-endpoint", "localhost:5556"],
            message: "option '--stats-endpoint': 'localhost:5556' is not an endpoint (no scheme)"
        ),
        Case(
            command: ["askrelay", "proxy", "--frontend", "ipc://"],
            message: "option '--frontend': 'ipc://' has no path"
        ),
        // Variables are checked like their flags and named in the message.
        Case(
            command: ["askrelay", "load"],
            environment: ["ASKRELAY_LOAD_MODE": "bogus"],
            message:
                "environment variable ASKRELAY_LOAD_MODE (for --mode) must be one of relay, flows, pending, got 'bogus'"
        ),
        Case(
            command: ["askrelay", "top"],
            environment: ["ASKRELAY_TOP_COUNT": "0"],
            message:
                "environment variable ASKRELAY_TOP_COUNT (for --count) needs a whole number in 1...1000000, got '0'"
        ),
        Case(
            command: ["askrelay", "keys", "generate"],
            environment: ["ASKRELAY_KEYS_FORCE": "maybe"],
            message:
                "environment variable ASKRELAY_KEYS_FORCE (for --force) must be 1, true, yes, 0, false or no, got 'maybe'"
        ),
        Case(
            command: ["askrelay-child", "--families", "1"],
            environment: ["ASKRELAY_LOG_LEVEL": "loud"],
            message:
                "environment variable ASKRELAY_LOG_LEVEL (for --log-level) must be one of trace, debug, info, notice, warning, error, critical, got 'loud'"
        ),
        Case(
            command: ["askrelay-parent", "--families", "1"],
            environment: ["ASKRELAY_THINK": "sometimes"],
            message: "environment variable ASKRELAY_THINK (for --think): think time 'sometimes' must be"
        ),
        Case(
            command: ["askrelay-child"],
            environment: ["ASKRELAY_CHILDREN": "c1@f1,bad"],
            message:
                "environment variable ASKRELAY_CHILDREN (for --child) must be ID@FAMILY (each 1-64 of A-Z a-z 0-9 . _ -), got 'bad'"
        ),
        // --flows 0 means unlimited: the message says so and what to add, not "give --flows".
        Case(
            command: ["askrelay-child", "--families", "2", "--flows", "0"],
            message:
                "option '--flows' is 0, which means unlimited asks per child: add --duration D to end them (for example --duration 1m), or give --flows N (1...100000000)"
        ),
        // A duration range is stated the same whether the value is out of it or past what a duration can be.
        Case(
            command: ["askrelay", "top", "--timeout", "0s"],
            message: "option '--timeout' must be from 1ms to 100d, got '0s'"
        ),
        Case(
            command: ["askrelay", "top", "--timeout", "101d"],
            message: "option '--timeout' needs a duration like 250ms, 2s, 5m or 48h, from 1ms to 100d, got '101d'"
        ),
        Case(
            command: ["askrelay-parent", "--families", "1", "--heartbeat", "101d"],
            message: "from 10ms to 100d, got '101d'"
        ),
        // The sweep sets every step's rate: --rate beside it is refused, not ignored.
        Case(
            command: ["askrelay", "load", "--sweep", "--rate", "100"],
            message:
                "option '--rate' cannot be combined with --sweep: the sweep sets each step's rate; give the first step's with --sweep-start R"
        ),
        Case(
            command: ["askrelay", "help", "simulat"],
            message:
                "askrelay: unknown subcommand 'simulat' (askrelay has the subcommands simulate, check, test, shrink, trace, load, top, rebalance, keys, export-traces, bench, proxy)"
        ),
    ]

    @Test("exit 64 and the message", arguments: cases)
    func badUsage(_ usage: Case) throws {
        let run = try Run(usage.command, environment: usage.environment)
        #expect(run.status == 64, "exit \(run.status); stderr: \(run.stderr)")
        #expect(run.stderr.contains(usage.message), "stderr: \(run.stderr)")
        #expect(run.stdout.isEmpty, "stdout: \(run.stdout)")
    }

    @Test("'askrelay help simulate' prints simulate's help, not the top-level one")
    func helpSubcommand() throws {
        let run = try Run(["askrelay", "help", "simulate"])
        #expect(run.status == 0)
        #expect(run.stdout.hasPrefix("askrelay simulate — "), "\(run.stdout.prefix(200))")
        #expect(try Run(["askrelay", "help", "keys", "generate"]).stdout.hasPrefix("askrelay keys generate — "))
    }

    @Test("every executable and subcommand prints the same --version")
    func version() throws {
        var versions: Set<String> = []
        for command in [
            ["askrelay-broker"], ["askrelay-limits"], ["askrelay-parent"], ["askrelay-child"], ["askrelay"],
            ["askrelay", "simulate"], ["askrelay", "keys", "add"],
        ] {
            let run = try Run(command + ["--version"])
            #expect(run.status == 0, "\(command): \(run.stderr)")
            let words = run.stdout.split(separator: " ")
            #expect(words.count == 2 && words[0] == command[0], "\(command): \(run.stdout)")
            versions.insert(words.last.map { $0.trimmingCharacters(in: .newlines) } ?? "")
        }
        #expect(versions.count == 1, "\(versions)")
    }

    @Test("askrelay-child --help: generated ids count from 1; --child's variable is said once")
    func childHelp() throws {
        let help = Help.text("askrelay-child")
        #expect(help.status == 0)
        #expect(help.stdout.contains("both counted from 1"))
        #expect(!help.stdout.contains("0-based"))
        let lines = help.stdout.split(separator: "\n").map(String.init)
        let index = try #require(lines.firstIndex(of: "  --child ID@FAMILY"))
        let line = lines[index + 1]
        #expect(line.components(separatedBy: "env").count == 2, "\(line)")
    }

    @Test("a scenario duration past 100d is bad usage, naming the field")
    func scenarioDuration() throws {
        let scratch = TempDirectory(prefix: "askrelay-usage")
        defer { scratch.cleanup() }
        let path = scratch.appending("scenario.json")
        try #"{"duration": 1e12}"#.write(toFile: path, atomically: true, encoding: .utf8)
        let run = try Run(["askrelay", "simulate", "--scenario", path])
        #expect(run.status == 64, "stderr: \(run.stderr)")
        #expect(run.stderr.contains("'duration'"), "stderr: \(run.stderr)")
    }

    /// One run of a built executable in a fresh folder, with only the given ASKRELAY_* variables; killed (and the
    /// test failed) if it is still running after 10 s.
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String

        init(_ command: [String], environment: [String: String] = [:]) throws {
            let scratch = TempDirectory(prefix: "askrelay-usage")
            defer { scratch.cleanup() }
            let (out, err) = (scratch.appending("stdout"), scratch.appending("stderr"))
            _ = FileManager.default.createFile(atPath: out, contents: nil)
            _ = FileManager.default.createFile(atPath: err, contents: nil)
            // Foundation starts it as the leader of a process group of its own: a command that went wrong and still
            // ran is killed with everything it started (askrelay load's broker once outlived it and hung the suite).
            let process = Process()
            process.executableURL = Executables.built.appendingPathComponent(command[0])
            process.arguments = Array(command.dropFirst())
            process.environment = Tool.cleanEnvironment.merging(environment) { _, new in new }
            process.currentDirectoryURL = scratch.url
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle(forWritingAtPath: out)
            process.standardError = FileHandle(forWritingAtPath: err)
            let exited = DispatchSemaphore(value: 0)
            process.terminationHandler = { _ in exited.signal() }
            try process.run()
            defer {
                if process.isRunning {
                    kill(-process.processIdentifier, SIGKILL)
                    process.waitUntilExit()
                }
            }
            guard exited.wait(timeout: .now() + .seconds(10)) == .success else {
                throw ProcessFailure("\(command.joined(separator: " ")) still ran after 10 s")
            }
            status = process.terminationStatus
            stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        }
    }
}
