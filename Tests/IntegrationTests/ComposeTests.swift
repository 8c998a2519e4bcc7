import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// The deployment files stay true: `docker-compose config` accepts compose/docker-compose.yml, every `--flag` a
/// service (or the broker's health check) passes is one the executable's `--help` lists, and compose/Dockerfile has
/// the shape we rely on. The image itself is not built here (no Docker engine); see compose/README.md.
@Suite("compose files: docker-compose config, flags against --help, Dockerfile shape", .timeLimit(.minutes(2)))
struct ComposeTests {
    static let composeFile = Repository.root.appendingPathComponent("compose/docker-compose.yml").path
    static let dockerfile = Repository.root.appendingPathComponent("compose/Dockerfile").path

    /// `docker-compose config` once for the whole suite, with no ASKRELAY_*/COMPOSE_* variables from the caller, so
    /// the defaults written in the file are what is checked.
    static let config: ToolRun? = Tool.find("docker-compose").map { compose in
        Tool.run(compose, ["-f", composeFile, "config"], environment: Tool.cleanEnvironment)
    }

    static var parsed: ComposeConfig {
        get throws {
            guard let config else { throw ProcessFailure("docker-compose is not installed") }
            guard config.status == 0 else {
                throw ProcessFailure("docker-compose config exited \(config.status):\n\(config.stderr)")
            }
            return ComposeConfig(yaml: config.stdout)
        }
    }

    static let hasCompose = Tool.find("docker-compose") != nil
    static let noCompose: Comment =
        "docker-compose is not installed (`make test-deps` installs Debian's docker-compose)"

    @Test("docker-compose config accepts compose/docker-compose.yml", .enabled(if: hasCompose, noCompose))
    func configAccepts() throws {
        let config = try #require(Self.config)
        #expect(config.status == 0, "docker-compose config exited \(config.status):\n\(config.stderr)")
        #expect(config.stdout.contains("services:"))
    }

    @Test(
        "the services are keys, broker, limits, parent, child, each running one of our executables",
        .enabled(if: hasCompose, noCompose)
    )
    func servicesAreOurs() throws {
        let config = try Self.parsed
        #expect(config.services == ["broker", "child", "keys", "limits", "parent"])
        let expected = [
            "broker": "askrelay-broker", "limits": "askrelay-limits", "parent": "askrelay-parent",
            "child": "askrelay-child", "keys": "askrelay",
        ]
        for service in config.services {
            let invocation = try #require(config.invocation(service), "service \(service) has no command")
            #expect(invocation.executable == expected[service], "service \(service) runs \(invocation.executable)")
        }
        let health = try #require(config.healthCheck("broker"), "the broker has a health check")
        #expect(health.executable == "askrelay" && health.subcommands == ["top"])
    }

    @Test(
        "workers wait for a healthy broker; the journal is a named volume; SIGTERM gets a grace period",
        .enabled(if: hasCompose, noCompose)
    )
    func wiring() throws {
        let config = try Self.parsed
        for service in ["limits", "parent", "child"] {
            #expect(
                config.scalars["services.\(service).depends_on.broker.condition"] == "service_healthy",
                "\(service) depends on a healthy broker"
            )
        }
        for service in config.services where service != "keys" {
            #expect(
                config.scalars["services.\(service).stop_grace_period"] != nil,
                "\(service) has a stop_grace_period"
            )
        }
        // CURVE: every long-running service waits for the one-shot keys service and mounts the keys.
        for service in ["broker", "limits", "parent", "child"] {
            #expect(
                config.scalars["services.\(service).depends_on.keys.condition"] == "service_completed_successfully",
                "\(service) waits for the keys"
            )
            #expect(
                config.lists["services.\(service).volumes"]?.contains("keys:/etc/askrelay/keys:ro") == true,
                "\(service) mounts the keys read-only"
            )
        }
        #expect(
            !(config.lists["services.broker.command"] ?? []).contains("--allow-insecure"),
            "the broker runs CURVE, not --allow-insecure"
        )
        #expect(config.lists["services.broker.volumes"]?.contains("journal:/var/lib/askrelay:rw") == true)
        #expect(config.scalars["volumes.journal.name"] == "askrelay-journal", "journal is a named volume")
        let ports = config.lists["services.broker.ports"] ?? []
        #expect(
            ports.contains { $0.hasSuffix(":5555:5555/tcp") } && ports.contains { $0.hasSuffix(":5556:5556/tcp") },
            "\(ports)"
        )
        #expect(ports.allSatisfy { $0.hasPrefix("127.0.0.1:") }, "published on loopback by default: \(ports)")
        for service in ["parent", "child"] {
            #expect(config.scalars["services.\(service).deploy.replicas"] != nil, "\(service) is scalable")
        }
    }

    @Test("broker flags in compose are flags of askrelay-broker", .enabled(if: hasCompose, noCompose))
    func brokerFlags() throws { try checkFlags(of: "broker") }

    @Test("the keys service runs askrelay keys generate with its real flags", .enabled(if: hasCompose, noCompose))
    func keysFlags() throws {
        let invocation = try #require(try Self.parsed.invocation("keys"))
        #expect(invocation.subcommands == ["keys", "generate"])
        try checkFlags(invocation, what: "service keys")
    }

    @Test("the broker health check uses flags of askrelay top", .enabled(if: hasCompose, noCompose))
    func healthCheckFlags() throws {
        let invocation = try #require(try Self.parsed.healthCheck("broker"))
        try checkFlags(invocation, what: "the broker health check")
    }

    @Test("limits flags in compose are flags of askrelay-limits", .enabled(if: hasCompose, noCompose))
    func limitsFlags() throws { try checkFlags(of: "limits") }

    @Test("parent flags in compose are flags of askrelay-parent", .enabled(if: hasCompose, noCompose))
    func parentFlags() throws { try checkFlags(of: "parent") }

    @Test("child flags in compose are flags of askrelay-child", .enabled(if: hasCompose, noCompose))
    func childFlags() throws { try checkFlags(of: "child") }

    func checkFlags(of service: String) throws {
        let invocation = try #require(try Self.parsed.invocation(service), "service \(service) has a command")
        try checkFlags(invocation, what: "service \(service)")
    }

    func checkFlags(_ invocation: Invocation, what: String) throws {
        #expect(!invocation.flags.isEmpty, "\(what) passes flags")
        let help = Help.text(invocation.executable, invocation.subcommands)
        try #require(
            help.status == 0,
            "\((invocation.executable + " " + invocation.subcommands.joined(separator: " ")).trimmingCharacters(in: .whitespaces)) --help exited \(help.status): \(help.stderr)"
        )
        // The option headers of AskCLI's help: "  --name VALUE" lines (the discussion text below does not count).
        let listed = Set(
            help.stdout.split(separator: "\n").filter { $0.hasPrefix("  --") }.map {
                String($0.dropFirst(2).prefix { $0 != " " })
            }
        )
        for flag in invocation.flags {
            #expect(
                listed.contains(flag),
                "\(what) passes \(flag), which \(invocation.executable) \(invocation.subcommands.joined(separator: " ")) --help does not list"
            )
        }
    }

    // MARK: compose/docker-compose.sharded.yml

    static let shardedFile = Repository.root.appendingPathComponent("compose/docker-compose.sharded.yml").path

    /// `docker-compose config` of the sharded file, as for the single-broker one.
    static let shardedConfig: ToolRun? = Tool.find("docker-compose").map { compose in
        Tool.run(compose, ["-f", shardedFile, "config"], environment: Tool.cleanEnvironment)
    }

    static var sharded: ComposeConfig {
        get throws {
            guard let config = shardedConfig else { throw ProcessFailure("docker-compose is not installed") }
            guard config.status == 0 else {
                throw ProcessFailure("docker-compose config (sharded) exited \(config.status):\n\(config.stderr)")
            }
            return ComposeConfig(yaml: config.stdout)
        }
    }

    @Test(
        "the sharded file: brokers b0, b1, b2 with admin endpoints, a limits worker per broker, workers on b0,b1",
        .enabled(if: hasCompose, noCompose)
    )
    func shardedServices() throws {
        let config = try Self.sharded
        #expect(
            config.services == [
                "b0", "b1", "b2", "child", "keys", "limits-b0", "limits-b1", "limits-b2", "parent", "rebalance", "top",
            ]
        )
        let initial = "b0=tcp://b0:5555,b1=tcp://b1:5555"
        let all = initial + ",b2=tcp://b2:5555"
        for (name, list) in [("b0", initial), ("b1", initial), ("b2", all)] {
            let command = config.lists["services.\(name).command"] ?? []
            func value(_ flag: String) -> String? {
                command.firstIndex(of: flag).flatMap { $0 + 1 < command.count ? command[$0 + 1] : nil }
            }
            #expect(value("--shard-name") == name, "\(name): \(command)")
            #expect(value("--brokers") == list, "\(name) starts with \(list): \(command)")
            #expect(value("--admin-endpoint") == "tcp://0.0.0.0:5557" && command.contains("--allow-insecure"))
            // CURVE stays on for 5555: the keys are given.
            #expect(value("--curve-secret-file") != nil && value("--principals") != nil, "\(name) runs CURVE")
            #expect(
                config.lists["services.\(name).volumes"]?.contains("journal-\(name):/var/lib/askrelay:rw") == true,
                "\(name) has a journal volume of its own"
            )
            let limits = config.lists["services.limits-\(name).command"] ?? []
            let shard = limits.firstIndex(of: "--shard-name").map { limits[$0 + 1] }
            let brokers = limits.firstIndex(of: "--brokers").map { limits[$0 + 1] }
            #expect(shard == name && brokers == list, "limits-\(name) serves \(name) of \(list): \(limits)")
            #expect(
                config.scalars["services.limits-\(name).depends_on.\(name).condition"] == "service_healthy",
                "limits-\(name) waits for \(name)"
            )
        }
        for service in ["parent", "child"] {
            let invocation = try #require(config.invocation(service))
            #expect(invocation.flags.contains("--brokers") && !invocation.flags.contains("--broker"))
            let command = config.lists["services.\(service).command"]?.last ?? ""
            #expect(command.contains("--brokers \"\(initial)\""), "\(service) starts with b0,b1: \(command)")
        }
        #expect(config.lists["services.rebalance.profiles"] == ["tools"], "rebalance is not started by up")
        #expect(config.lists["services.top.profiles"] == ["tools"], "top is not started by up")
    }

    @Test("every flag of the sharded file is a flag of its executable", .enabled(if: hasCompose, noCompose))
    func shardedFlags() throws {
        let config = try Self.sharded
        for service in ["b0", "b1", "b2", "limits-b0", "limits-b1", "limits-b2", "parent", "child", "keys"] {
            let invocation = try #require(config.invocation(service), "service \(service) has a command")
            try checkFlags(invocation, what: "sharded service \(service)")
        }
        let health = try #require(config.healthCheck("b0"))
        try checkFlags(health, what: "the brokers' health check")
        // The one-shot services: their entrypoint and the flags their documented commands pass.
        let rebalance = try #require(
            Invocation(["askrelay", "rebalance", "--from", "b0,b1", "--to", "b0", "--epoch", "1"])
        )
        try checkFlags(rebalance, what: "the rebalance service")
        let entrypoint = config.lists["services.rebalance.entrypoint"] ?? []
        #expect(entrypoint.count == 4 && entrypoint[2].hasSuffix("exec askrelay rebalance \"$$@\""), "\(entrypoint)")
        #expect(
            config.scalars["services.rebalance.environment.ASKRELAY_REBALANCE_ADMIN"]
                == "b0=tcp://b0:5557,b1=tcp://b1:5557,b2=tcp://b2:5557"
        )
        let top = try #require(Invocation(config.lists["services.top.entrypoint"] ?? []))
        try checkFlags(top, what: "the top service")
    }

    @Test("the parser reads what docker-compose prints: indentless lists, folded long strings, quotes")
    func parserReadsComposeOutput() {
        let yaml = """
            services:
              child:
                command:
                - sh
                - -c
                - exec askrelay-child --broker tcp://broker:5555 --families "100" --id-prefix
                  "c-$${HOSTNAME}-" --flows '10'
                depends_on:
                  broker:
                    condition: service_healthy
              broker:
                healthcheck:
                  test:
                  - CMD
                  - askrelay
                  - top
                  - --count
                  - '1'
                command:
                - askrelay-broker
                - --log-level
                - 'it''s'
            version: '3.8'
            """
        let config = ComposeConfig(yaml: yaml)
        #expect(config.services == ["broker", "child"])
        #expect(config.lists["services.broker.command"] == ["askrelay-broker", "--log-level", "it's"])
        #expect(config.scalars["services.child.depends_on.broker.condition"] == "service_healthy")
        let child = config.invocation("child")
        #expect(child?.executable == "askrelay-child")
        #expect(child?.flags == ["--broker", "--families", "--id-prefix", "--flows"])
        let health = config.healthCheck("broker")
        #expect(health?.executable == "askrelay" && health?.subcommands == ["top"] && health?.flags == ["--count"])
    }

    // MARK: Dockerfile

    @Test("compose/Dockerfile: swift build stage, bookworm-slim runtime, non-root user, no remote ADD, every product")
    func dockerfileShape() throws {
        let instructions = try Dockerfile.instructions(path: Self.dockerfile)
        let froms = instructions.filter { $0.keyword == "FROM" }
        try #require(froms.count >= 2, "multi-stage: \(froms.count) FROM lines")
        let arguments = Dictionary(
            instructions.filter { $0.keyword == "ARG" && $0.arguments.contains("=") }.map {
                let parts = $0.arguments.split(separator: "=", maxSplits: 1).map(String.init)
                return (parts[0], parts[1])
            },
            uniquingKeysWith: { first, _ in first }
        )
        func image(_ from: Instruction) -> String {
            let reference = String(from.arguments.split(separator: " ")[0])
            guard reference.hasPrefix("${"), reference.hasSuffix("}") else { return reference }
            return arguments[String(reference.dropFirst(2).dropLast())] ?? reference
        }
        let build = image(froms[0])
        #expect(
            build.hasPrefix("swift:6.") && build.hasSuffix("-bookworm"),
            "build stage from an official Swift 6 bookworm image: \(build)"
        )
        #expect(froms[0].arguments.lowercased().hasSuffix(" as build"))
        #expect(
            image(froms[froms.count - 1]) == "debian:bookworm-slim",
            "runtime stage: \(image(froms[froms.count - 1]))"
        )

        let users = instructions.filter { $0.keyword == "USER" }
        let user = try #require(users.last, "a USER line").arguments
        #expect(!["root", "0"].contains(String(user.split(separator: ":")[0])), "runs as \(user)")
        #expect(user.hasPrefix("askrelay"))

        for add in instructions where add.keyword == "ADD" {
            #expect(!add.arguments.contains("://"), "ADD of a remote URL: \(add.arguments)")
        }
        let runs = instructions.filter { $0.keyword == "RUN" }.map(\.arguments).joined(separator: "\n")
        #expect(runs.contains("swift build -c release --static-swift-stdlib"))
        for package in ["libzmq3-dev", "libsqlite3-dev", "pkg-config", "libzmq5", "libsqlite3-0"] {
            #expect(runs.contains(package), "installs \(package)")
        }
        // Every executable product of Package.swift is built and installed.
        let manifest = try String(contentsOf: Repository.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let products = manifest.components(separatedBy: ".executable(name: \"").dropFirst().map {
            String($0.prefix { $0 != "\"" })
        }
        #expect(products.count == 5, "executables in Package.swift: \(products)")
        for product in products {
            #expect(runs.contains(" \(product) ") || runs.contains(" \(product);"), "the build stage builds \(product)")
        }
        #expect(
            instructions.contains {
                $0.keyword == "COPY" && $0.arguments.hasPrefix("--from=build ")
                    && $0.arguments.hasSuffix("/usr/local/bin/")
            }
        )
        let exposed = Set(
            instructions.filter { $0.keyword == "EXPOSE" }.flatMap {
                $0.arguments.split(separator: " ").map(String.init)
            }
        )
        #expect(exposed.isSuperset(of: ["5555", "5556"]), "EXPOSE \(exposed)")
        #expect(instructions.contains { $0.keyword == "VOLUME" && $0.arguments.contains("/var/lib/askrelay") })
    }

    @Test("compose/Dockerfile.prebuilt (what make deploy-test builds) has the runtime stage of compose/Dockerfile")
    func prebuiltMatchesRuntimeStage() throws {
        let full = try Dockerfile.instructions(path: Self.dockerfile)
        let prebuilt = try Dockerfile.instructions(
            path: Repository.root.appendingPathComponent("compose/Dockerfile.prebuilt").path
        )
        let runtime = Array(full.drop { !($0.keyword == "FROM" && $0.arguments.hasSuffix(" AS runtime")) }.dropFirst())
        try #require(!runtime.isEmpty, "compose/Dockerfile has a stage named runtime")
        // The same instructions, but for the executables' source (a folder of the context instead of the build stage)
        // and the PATH that an imported base image lacks.
        func comparable(_ list: [Instruction]) -> [String] {
            list.filter { !["COPY", "ENV", "FROM", "ARG"].contains($0.keyword) }.map { "\($0.keyword) \($0.arguments)" }
        }
        #expect(comparable(prebuilt) == comparable(runtime))
        #expect(prebuilt.contains { $0.keyword == "COPY" && $0.arguments == "bin/ /usr/local/bin/" })
    }
}

// MARK: - Helpers

enum Repository {
    /// The package root: this file is Tests/IntegrationTests/ComposeTests.swift.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
}

struct ToolRun: Sendable {
    var status: Int32
    var stdout: String
    var stderr: String
}

enum Tool {
    static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }

    static var cleanEnvironment: [String: String] {
        ProcessInfo.processInfo.environment.filter { key, _ in !key.hasPrefix("ASKRELAY_") && !key.hasPrefix("COMPOSE_")
        }
    }

    /// Runs a tool to completion; stdout and stderr go to files (no pipe can fill up and block it).
    static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) -> ToolRun {
        let scratch = TempDirectory(prefix: "askrelay-tool")
        defer { scratch.cleanup() }
        do {
            let (out, err) = (scratch.appending("stdout"), scratch.appending("stderr"))
            _ = FileManager.default.createFile(atPath: out, contents: nil)
            _ = FileManager.default.createFile(atPath: err, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            if let environment { process.environment = environment }
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle(forWritingAtPath: out)
            process.standardError = FileHandle(forWritingAtPath: err)
            try process.run()
            process.waitUntilExit()
            return ToolRun(
                status: process.terminationStatus,
                stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
            )
        } catch {
            return ToolRun(status: -1, stdout: "", stderr: "could not run \(executable): \(error)")
        }
    }
}

/// `--help` of our executables from the build folder, run once each.
enum Help {
    private static let cache = HelpCache()

    static func text(_ executable: String, _ subcommands: [String] = []) -> ToolRun {
        cache.get(([executable] + subcommands).joined(separator: " ")) {
            Tool.run(Executables.built.appendingPathComponent(executable).path, subcommands + ["--help"])
        }
    }
}

final class HelpCache: @unchecked Sendable {  // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var runs: [String: ToolRun] = [:]
    func get(_ key: String, _ make: () -> ToolRun) -> ToolRun {
        lock.withLock {
            if let run = runs[key] { return run }
            let run = make()
            runs[key] = run
            return run
        }
    }
}

/// One command line: the executable, its subcommand path (`askrelay top`), and the `--flags` it passes.
struct Invocation: Equatable {
    var executable: String
    var subcommands: [String]
    var flags: [String]

    /// From an exec-form list; `sh -c "... exec X --a ..."` and healthcheck `CMD` / `CMD-SHELL` forms are unwrapped.
    init?(_ items: [String]) {
        var words = items
        if words.first == "CMD" { words.removeFirst() }
        if words.first == "CMD-SHELL", words.count == 2 { words = ["sh", "-c", words[1]] }
        if words.count == 3, ["sh", "/bin/sh", "bash"].contains(words[0]), words[1] == "-c" {
            words = Self.shellWords(words[2])
            if let exec = words.firstIndex(of: "exec") { words = Array(words[(exec + 1)...]) }
        }
        guard let first = words.first else { return nil }
        executable = first
        var rest = words.dropFirst()
        subcommands = []
        // Only the front command has subcommands (askrelay top, askrelay simulate ...).
        if first == "askrelay" {
            while let word = rest.first, !word.hasPrefix("-") {
                subcommands.append(word)
                rest = rest.dropFirst()
            }
        }
        flags = rest.filter { $0.hasPrefix("--") }.map { String($0.split(separator: "=", maxSplits: 1)[0]) }
    }

    /// Splits a shell command line into words: whitespace separates, single and double quotes group, quotes removed.
    static func shellWords(_ line: String) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        for character in line {
            if let open = quote {
                if character == open { quote = nil } else { word.append(character) }
            } else if character == "'" || character == "\"" {
                quote = character
                inWord = true
            } else if character.isWhitespace {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if inWord { words.append(word) }
        return words
    }
}

/// The YAML that `docker-compose config` prints, read line by line: every `key: value` as a dotted path, every
/// block list (PyYAML writes them indentless) as a path to its items. Enough for this output, not general YAML.
struct ComposeConfig {
    var scalars: [String: String] = [:]
    var lists: [String: [String]] = [:]

    init(yaml: String) {
        var stack: [(indent: Int, key: String)] = []
        let lines = yaml.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        var index = 0
        while index < lines.count {
            let line = lines[index]
            index += 1
            let indent = line.prefix { $0 == " " }.count
            let content = line.dropFirst(indent)
            if content.hasPrefix("#") { continue }
            if content.hasPrefix("- ") || content == "-" {
                // A list item; a long scalar continues on deeper-indented lines (folded with a space).
                var value = String(content.dropFirst(2))
                while index < lines.count {
                    let next = lines[index]
                    let nextIndent = next.prefix { $0 == " " }.count
                    guard nextIndent > indent else { break }
                    value += " " + next.dropFirst(nextIndent)
                    index += 1
                }
                while let top = stack.last, top.indent > indent { stack.removeLast() }
                lists[stack.map(\.key).joined(separator: "."), default: []].append(Self.unquote(value))
                continue
            }
            guard let colon = Self.keyColon(content) else { continue }
            let key = Self.unquote(String(content[..<colon]))
            let value = content[content.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            while let top = stack.last, top.indent >= indent { stack.removeLast() }
            stack.append((indent, key))
            if !value.isEmpty { scalars[stack.map(\.key).joined(separator: ".")] = Self.unquote(value) }
        }
    }

    /// Service names, sorted.
    var services: [String] {
        Set(
            (Array(scalars.keys) + Array(lists.keys)).compactMap { path -> String? in
                let parts = path.split(separator: ".")
                return parts.count >= 3 && parts[0] == "services" ? String(parts[1]) : nil
            }
        ).sorted()
    }

    func invocation(_ service: String) -> Invocation? {
        if let items = lists["services.\(service).command"] { return Invocation(items) }
        return scalars["services.\(service).command"].flatMap { Invocation(["sh", "-c", $0]) }
    }

    func healthCheck(_ service: String) -> Invocation? {
        lists["services.\(service).healthcheck.test"].flatMap { Invocation($0) }
    }

    /// The colon ending a mapping key (`key:` or `key: value`), outside quotes.
    private static func keyColon(_ content: Substring) -> String.Index? {
        var quote: Character?
        var index = content.startIndex
        while index < content.endIndex {
            let character = content[index]
            if let open = quote {
                if character == open { quote = nil }
            } else if character == "'" || character == "\"" {
                quote = character
            } else if character == ":" {
                let next = content.index(after: index)
                if next == content.endIndex || content[next] == " " { return index }
            }
            index = content.index(after: index)
        }
        return nil
    }

    static func unquote(_ text: String) -> String {
        if text.count >= 2, text.hasPrefix("'"), text.hasSuffix("'") {
            return String(text.dropFirst().dropLast()).replacingOccurrences(of: "''", with: "'")
        }
        if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") {
            return String(text.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
                .replacingOccurrences(of: "\\\\", with: "\\")
        }
        return text
    }
}

struct Instruction {
    var keyword: String
    var arguments: String
}

enum Dockerfile {
    /// Instructions with continuation lines joined and comments dropped.
    static func instructions(path: String) throws -> [Instruction] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var result: [Instruction] = []
        var pending = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") || (line.isEmpty && pending.isEmpty) { continue }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let whole = (pending + line).trimmingCharacters(in: .whitespaces)
            pending = ""
            guard !whole.isEmpty else { continue }
            let keyword = String(whole.prefix { !$0.isWhitespace })
            result.append(
                Instruction(
                    keyword: keyword.uppercased(),
                    arguments: whole.dropFirst(keyword.count).trimmingCharacters(in: .whitespaces)
                )
            )
        }
        return result
    }
}
