import Foundation
import Synchronization
import Testing

@testable import AskCLI

// MARK: - Commands for the runner (in-process fakes: this is a unit test of the parser)

struct Boom: Error, CustomStringConvertible {
    var description: String { "boom" }
}

struct Leaf: Command {
    static let name = "leaf"
    static let abstract = "a leaf command"
    static let discussion = "Leaf discussion."
    static let options: [OptionSpec] = [
        .value("count", "N", env: "T_COUNT", default: "3", help: "how many"),
        .value("tag", "T", env: "T_TAGS", repeatable: true, help: "tags"),
        .value("mode", "MODE", env: "T_MODE", help: "a, b or fail"),
        .flag("loud", env: "T_LOUD", help: "shout"),
    ]
    let count: Int
    let mode: String?

    init(arguments: Arguments) throws {
        count = try arguments.int("count", in: 1...10) ?? 3
        mode = try arguments.choice("mode", ["a", "b", "fail", "throw"])
    }

    func validate() throws {
        if mode == "fail" { throw UsageError("mode fail is refused by validate") }
    }

    func run() async throws -> Int32 {
        if mode == "throw" { throw Boom() }
        return Int32(count)
    }
}

struct Group: CommandGroup {
    static let name = "group"
    static let abstract = "a group"
    static let subcommands: [any Command.Type] = [Leaf.self]
}

struct Root: CommandGroup {
    static let name = "root"
    static let abstract = "the root"
    static let subcommands: [any Command.Type] = [Group.self, Leaf.self]
}

/// What ``CommandRunner`` wrote, kept in memory.
final class Captured: Sendable {
    private let text = Mutex((out: "", err: ""))
    var out: String { text.withLock { $0.out } }
    var err: String { text.withLock { $0.err } }
    var output: CommandOutput {
        CommandOutput(
            standardOutput: { line in self.text.withLock { $0.out += line + "\n" } },
            standardError: { line in self.text.withLock { $0.err += line + "\n" } }
        )
    }
}

func runRoot(_ arguments: [String], environment: [String: String] = [:]) async -> (
    code: Int32, out: String, err: String
) {
    let captured = Captured()
    let code = await CommandRunner.run(
        Root.self,
        arguments: arguments,
        environment: environment,
        output: captured.output
    )
    return (code, captured.out, captured.err)
}

func usageMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as UsageError {
        return error.message
    } catch {
        return "not a UsageError: \(error)"
    }
}

// MARK: - Parsing

@Suite("AskCLI argument parsing")
struct ParsingTests {
    let specs = Leaf.options

    func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Arguments {
        try Arguments(parsing: arguments, specs: specs, environment: environment)
    }

    @Test("--name VALUE, --name=VALUE, flags and positionals")
    func forms() throws {
        let parsed = try parse(["--count", "4", "--mode=a", "--loud", "extra", "--", "--count"])
        #expect(parsed.string("count") == "4")
        #expect(parsed.string("mode") == "a")
        #expect(parsed.flag("loud"))
        #expect(parsed.positionals == ["extra", "--count"])
        #expect(parsed.sources["count"] == .commandLine)
    }

    @Test("an inline value keeps everything after the first '=' and may be empty")
    func inlineValues() throws {
        #expect(try parse(["--mode=a=b"]).string("mode") == "a=b")
        #expect(try parse(["--mode="]).string("mode") == "")
    }

    @Test("unknown options, repeated options, a flag with a value and a missing value are refused")
    func refusals() {
        #expect(usageMessage { _ = try parse(["--nope"]) } == "unknown option '--nope'")
        #expect(
            usageMessage { _ = try parse(["--count", "1", "--count", "2"]) } == "option '--count' given more than once"
        )
        #expect(usageMessage { _ = try parse(["--loud", "--loud"]) } == "option '--loud' given more than once")
        #expect(usageMessage { _ = try parse(["--loud=yes"]) } == "option '--loud' takes no value")
        #expect(usageMessage { _ = try parse(["--count"]) } == "option '--count' needs a value (N)")
        // The next word is a known option: the value is missing, not '--loud'.
        #expect(usageMessage { _ = try parse(["--mode", "--loud"]) } == "option '--mode' needs a value (MODE)")
    }

    @Test("a repeatable option collects every value; its variable is a comma-separated list")
    func repeatable() throws {
        #expect(try parse(["--tag", "x", "--tag=y"]).strings("tag") == ["x", "y"])
        #expect(try parse([], ["T_TAGS": "x,y,z"]).strings("tag") == ["x", "y", "z"])
        #expect(try parse(["--tag", "w"], ["T_TAGS": "x,y"]).strings("tag") == ["w"])
    }

    @Test("the flag wins over the environment, the environment over the default; an empty variable is unset")
    func fallbacks() throws {
        let fromDefault = try parse([])
        #expect(fromDefault.string("count") == "3")
        #expect(fromDefault.sources["count"] == .defaultValue)
        let fromEnvironment = try parse([], ["T_COUNT": "7"])
        #expect(fromEnvironment.string("count") == "7")
        #expect(fromEnvironment.sources["count"] == .environment("T_COUNT"))
        #expect(try parse(["--count", "5"], ["T_COUNT": "7"]).string("count") == "5")
        #expect(try parse([], ["T_COUNT": ""]).string("count") == "3")
        #expect(try parse([]).string("mode") == nil)
    }

    @Test("a Boolean variable is 1/true/yes or 0/false/no; anything else names the variable")
    func booleanVariables() throws {
        for on in ["1", "true", "YES"] { #expect(try parse([], ["T_LOUD": on]).flag("loud"), "\(on)") }
        for off in ["0", "false", "No"] { #expect(try !parse([], ["T_LOUD": off]).flag("loud"), "\(off)") }
        #expect(
            usageMessage { _ = try parse([], ["T_LOUD": "maybe"]) }
                == "environment variable T_LOUD (for --loud) must be 1, true, yes, 0, false or no, got 'maybe'"
        )
    }

    @Test("a bad value names where it came from: the option or the environment variable")
    func origins() throws {
        let flag = try parse(["--count", "11"])
        #expect(
            usageMessage { _ = try flag.int("count", in: 1...10) }
                == "option '--count' needs a whole number in 1...10, got '11'"
        )
        let variable = try parse([], ["T_COUNT": "eleven"])
        #expect(
            usageMessage { _ = try variable.int("count", in: 1...10) }
                == "environment variable T_COUNT (for --count) needs a whole number in 1...10, got 'eleven'"
        )
        #expect(try parse(["--mode", "B"]).choice("mode", ["a", "b"], ignoringCase: true) == "b")
        #expect(usageMessage { _ = try parse(["--mode", "B"]).choice("mode", ["a", "b"]) } != nil)
        let mode = try parse([], ["T_MODE": "bogus"])
        #expect(
            usageMessage { _ = try mode.choice("mode", ["a", "b"]) }
                == "environment variable T_MODE (for --mode) must be one of a, b, got 'bogus'"
        )
    }

    @Test("numbers: whole numbers with _ separators, seeds up to 2^64-1, finite doubles in range")
    func numbers() throws {
        let specs: [OptionSpec] = [.value("n", "N", help: ""), .value("x", "X", help: "")]
        func parsed(_ n: String, _ x: String = "1") throws -> Arguments {
            try Arguments(parsing: ["--n", n, "--x", x], specs: specs, environment: [:])
        }
        #expect(try parsed("1_000").int("n") == 1000)
        #expect(usageMessage { _ = try parsed("99999999999999999999").int("n") } != nil)
        #expect(try parsed("18446744073709551615").uint64("n") == UInt64.max)
        #expect(
            usageMessage { _ = try parsed("-1").uint64("n") }
                == "option '--n' needs a whole number in 0...\(UInt64.max), got '-1'"
        )
        #expect(try parsed("1", "0.5").double("x", in: 0...1) == 0.5)
        for bad in ["1.5", "nan", "inf", "x"] {
            #expect(
                usageMessage { _ = try parsed("1", bad).double("x", in: 0...1) }
                    == "option '--x' needs a number in 0...1, got '\(bad)'"
            )
        }
    }

    @Test("a variable spelt without the command's prefix is not read, and a note says which one is")
    func unprefixedVariable() throws {
        let specs: [OptionSpec] = [.value("mode", "MODE", env: "ASKRELAY_LOAD_MODE", help: "")]
        let parsed = try Arguments(parsing: [], specs: specs, environment: ["ASKRELAY_MODE": "bogus"])
        #expect(parsed.string("mode") == nil)
        #expect(
            parsed.warnings == ["note: ASKRELAY_MODE is not read here; the variable of --mode is ASKRELAY_LOAD_MODE"]
        )
        let plain: [OptionSpec] = [.value("mode", "MODE", env: "ASKRELAY_MODE", help: "")]
        #expect(try Arguments(parsing: [], specs: plain, environment: ["ASKRELAY_MODE": "a"]).warnings.isEmpty)
    }

    @Test("required options say so, with their variable")
    func required() throws {
        #expect(usageMessage { _ = try parse([]).require("mode") } == "missing required option '--mode' (or T_MODE)")
        #expect(try parse(["--mode", "a"]).require("mode") == "a")
    }
}

// MARK: - Durations, time scale

@Suite("AskCLI durations and ranges")
struct DurationTests {
    @Test("a bad duration says the form and the bound; a narrower range says its bounds")
    func messages() throws {
        let specs: [OptionSpec] = [.value("heartbeat", "DURATION", env: "T_HEARTBEAT", help: "")]
        let huge = try Arguments(parsing: ["--heartbeat", "1e12s"], specs: specs, environment: [:])
        #expect(
            usageMessage { _ = try huge.duration("heartbeat") }
                == "option '--heartbeat' needs a duration like 250ms, 2s, 5m or 48h, from 0 to 100d, got '1e12s'"
        )
        let short = try Arguments(parsing: [], specs: specs, environment: ["T_HEARTBEAT": "5ms"])
        #expect(
            usageMessage { _ = try short.duration("heartbeat", in: .milliseconds(10)...ValueBounds.maximumDuration) }
                == "environment variable T_HEARTBEAT (for --heartbeat) must be from 10ms to 100d, got '5ms'"
        )
        #expect(try short.duration("heartbeat") == .milliseconds(5))
    }

    @Test("the time scale has one range for every command: 0.01...1e9")
    func timeScale() throws {
        let specs: [OptionSpec] = [.value("time-scale", "X", help: "")]
        func scale(_ text: String) throws -> Double? {
            try Arguments(parsing: ["--time-scale", text], specs: specs, environment: [:]).timeScale()
        }
        #expect(try scale("57600") == 57600)
        #expect(try scale("1e9") == 1e9)
        #expect(try scale("0.01") == 0.01)
        for bad in ["1e10", "0.001", "0", "-1", "inf"] {
            #expect(
                usageMessage { _ = try scale(bad) }
                    == "option '--time-scale' needs a number in 0.01...1000000000, got '\(bad)'"
            )
        }
    }

    @Test("durationText reads back through parseDuration")
    func text() {
        for duration: Duration in [.milliseconds(250), .seconds(2), .seconds(300), .seconds(7200), .seconds(86400 * 3)]
        {
            #expect(parseDuration(durationText(duration)) == duration)
        }
        for duration: Duration in [.microseconds(50), .microseconds(1500)] {
            #expect(parseDuration(durationText(duration)) == duration)
        }
        #expect(durationText(.microseconds(50)) == "50us")
        #expect(durationText(.zero) == "0s")
    }
}

// MARK: - Endpoints

@Suite("AskCLI endpoints")
struct EndpointTests {
    @Test("tcp://HOST:PORT and ipc://PATH are endpoints; a * port only for one that is bound")
    func accepted() {
        for text in [
            "tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://[::1]:65535", "tcp://*:5555", "ipc:///tmp/a.sock",
            "ipc://@abstract",
        ] {
            #expect(EndpointSyntax.problem(text, binding: false) == nil, "\(text)")
            #expect(EndpointSyntax.problem(text, binding: true) == nil, "\(text)")
        }
        #expect(EndpointSyntax.problem("tcp://127.0.0.1:*", binding: true) == nil)
        #expect(EndpointSyntax.problem("tcp://127.0.0.1:*", binding: false)?.contains("give the port number") == true)
    }

    @Test("no scheme gets the tcp:// spelling as a hint (it was zmq_connect errno 22, exit 69)")
    func noScheme() {
        #expect(
            EndpointSyntax.problem("localhost:5555", binding: false)
                == "'localhost:5555' is not an endpoint (no scheme): give tcp://HOST:PORT or ipc://PATH, for example tcp://localhost:5555"
        )
        #expect(
            EndpointSyntax.problem("/tmp/x.sock", binding: false)?.hasPrefix(
                "'/tmp/x.sock' is not an endpoint (no scheme)"
            ) == true
        )
    }

    @Test("another scheme is not an endpoint at all (it was 'is not loopback')")
    func otherSchemes() {
        #expect(
            EndpointSyntax.problem("foo://bar", binding: true)
                == "'foo://bar' is not an endpoint: scheme 'foo' is not tcp or ipc; give tcp://HOST:PORT or ipc://PATH"
        )
        #expect(
            EndpointSyntax.problem("inproc://x", binding: true)?.contains("scheme 'inproc' is not tcp or ipc") == true
        )
    }

    @Test("tcp needs a host and a port in 1...65535; ipc a path that fits a Unix socket")
    func malformed() {
        #expect(EndpointSyntax.problem("tcp://localhost", binding: false)?.contains("has no port") == true)
        #expect(EndpointSyntax.problem("tcp://:5555", binding: false)?.contains("has no host") == true)
        for port in ["0", "65536", "http", "-1", ""] {
            #expect(
                EndpointSyntax.problem("tcp://h:\(port)", binding: false)?.contains("has no valid port") == true,
                "\(port)"
            )
        }
        #expect(EndpointSyntax.problem("tcp://[::1:5555", binding: false)?.contains("brackets") == true)
        #expect(EndpointSyntax.problem("ipc://", binding: false)?.contains("has no path") == true)
        let long = "ipc:///" + String(repeating: "a", count: 107)
        #expect(EndpointSyntax.problem(long, binding: true)?.contains("at most 107 bytes") == true)
        #expect(EndpointSyntax.problem("ipc:///" + String(repeating: "a", count: 106), binding: true) == nil)
    }

    @Test("the accessor names the option or variable")
    func accessor() throws {
        let specs: [OptionSpec] = [.value("broker", "URL", env: "T_BROKER", default: "tcp://127.0.0.1:5555", help: "")]
        let fromEnvironment = try Arguments(parsing: [], specs: specs, environment: ["T_BROKER": "localhost:5555"])
        #expect(
            usageMessage { _ = try fromEnvironment.requireEndpoint("broker", binding: false) }?
                .hasPrefix("environment variable T_BROKER (for --broker): 'localhost:5555' is not an endpoint") == true
        )
        let fromDefault = try Arguments(parsing: [], specs: specs, environment: [:])
        #expect(try fromDefault.requireEndpoint("broker", binding: false) == "tcp://127.0.0.1:5555")
    }
}

// MARK: - The runner: help, version, exit codes

@Suite("AskCLI command runner")
struct RunnerTests {
    @Test("--help, -h and 'help' at every level print that level's help and exit 0")
    func helpEverywhere() async {
        let root = await runRoot(["--help"])
        #expect(root.code == 0)
        #expect(root.out.hasPrefix("root — the root"))
        #expect(root.out.contains("  group  a group"))
        let group = await runRoot(["group", "-h"])
        #expect(group.code == 0)
        #expect(group.out.hasPrefix("root group — a group"))
        for arguments in [
            ["group", "leaf", "--help"], ["help", "group", "leaf"], ["group", "help", "leaf"],
            ["group", "leaf", "help"],
        ] {
            let leaf = await runRoot(arguments)
            #expect(leaf.code == 0, "\(arguments)")
            #expect(leaf.out.hasPrefix("root group leaf — a leaf command"), "\(arguments): \(leaf.out)")
        }
        let top = await runRoot(["help", "leaf"])
        #expect(top.out.hasPrefix("root leaf — a leaf command"))
    }

    @Test("'help' of something that is not a subcommand is bad usage")
    func helpUnknown() async {
        let result = await runRoot(["help", "nope"])
        #expect(result.code == 64)
        #expect(result.err.contains("unknown subcommand 'nope' (root has the subcommands group, leaf)"))
        let leaf = await runRoot(["help", "leaf", "deeper"])
        #expect(leaf.code == 64)
        #expect(leaf.err.contains("root leaf has no subcommands"))
    }

    @Test("help lists each option with its default, variable and repeatability, then --help, --version, discussion")
    func helpFormat() {
        let text = CommandRunner.help(for: Leaf.self, path: ["root", "leaf"])
        #expect(text.contains("  --count N\n      how many (default: 3; env: T_COUNT)\n"))
        #expect(text.contains("  --tag T\n      tags (env: T_TAGS; repeatable, comma-separated in the variable)\n"))
        #expect(text.contains("  --loud\n      shout (env: T_LOUD)\n"))
        #expect(text.contains("  --help\n"))
        #expect(text.contains("  --version\n"))
        #expect(text.hasSuffix("Leaf discussion.\n"))
    }

    @Test("--version at every level prints the one version and exits 0")
    func version() async {
        for arguments in [["--version"], ["group", "--version"], ["leaf", "--version", "--count", "99"]] {
            let result = await runRoot(arguments)
            #expect(result.code == 0, "\(arguments)")
            #expect(result.out == "root \(AskRelayVersion.current)\n", "\(arguments)")
        }
    }

    @Test("the command's own code is returned; bad usage is 64 with the usage line; any other error is 1")
    func exitCodes() async {
        #expect(await runRoot(["leaf"]).code == 3)
        #expect(await runRoot(["leaf", "--count", "7"]).code == 7)
        #expect(await runRoot(["leaf"], environment: ["T_COUNT": "5"]).code == 5)
        let unknown = await runRoot(["leaf", "--nope"])
        #expect(unknown.code == 64)
        #expect(
            unknown.err == "root leaf: unknown option '--nope'\n\nUsage: root leaf [options]\nSee 'root leaf --help'.\n"
        )
        #expect(await runRoot(["leaf", "--count", "11"]).code == 64)
        #expect(await runRoot(["leaf"], environment: ["T_COUNT": "11"]).code == 64)
        #expect(await runRoot(["leaf", "stray"]).code == 64)
        let validate = await runRoot(["leaf", "--mode", "fail"])
        #expect(validate.code == 64)
        #expect(validate.err.hasPrefix("root leaf: mode fail is refused by validate"))
        let thrown = await runRoot(["leaf", "--mode", "throw"])
        #expect(thrown.code == 1)
        #expect(thrown.err == "root leaf: error: boom\n")
    }

    @Test("a group without a subcommand, or with an unknown one, is bad usage and shows its help")
    func groups() async {
        let missing = await runRoot([])
        #expect(missing.code == 64)
        #expect(missing.err.hasPrefix("root: missing subcommand"))
        let unknown = await runRoot(["group", "nope"])
        #expect(unknown.code == 64)
        #expect(unknown.err.hasPrefix("root group: unknown subcommand 'nope'"))
        #expect(unknown.err.contains("Subcommands:"))
    }

    @Test("--help after -- is an argument, not a request for help")
    func helpAfterSeparator() async {
        let result = await runRoot(["leaf", "--", "--help"])
        #expect(result.code == 64)
        #expect(result.err.contains("unexpected argument '--help'"))
    }
}

// MARK: - ReadyOnce

@Suite("AskCLI ReadyOnce")
struct ReadyOnceTests {
    @Test("the block runs on the first call only, also when many threads call at once")
    func once() {
        let ready = ReadyOnce()
        let runs = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 64) { _ in
            ready.once { runs.withLock { $0 += 1 } }
        }
        ready.once { runs.withLock { $0 += 1 } }
        #expect(runs.withLock { $0 } == 1)
    }
}
