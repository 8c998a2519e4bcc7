// The duration grammar, the shared value bounds, the Duration conversions and the dedicated threads live in AskBasics
// (Foundation only); every command uses them through AskCLI, so they are re-exported here.
@_exported import AskBasics
import Foundation
import Synchronization

/// A command-line mistake: printed with the command's usage, exit code 64 (`EX_USAGE`).
public struct UsageError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Exit codes used by every AskRelay executable.
public enum ExitCode {
    public static let success: Int32 = 0
    /// The command ran and found a failure (an invariant broken, a target missed, a peer unreachable).
    public static let failure: Int32 = 1
    /// The verdict is unknown beyond what the user allows: more flows' ends undecided than `--max-unknown` (and no
    /// violation, which is `failure`).
    public static let unknownVerdict: Int32 = 3
    /// Bad usage: unknown flag, missing value, invalid value (`EX_USAGE`).
    public static let usage: Int32 = 64
    /// A resource the command needs is unavailable (`EX_UNAVAILABLE`).
    public static let unavailable: Int32 = 69
}

/// The version every executable prints for `--version`; the one place it is written.
public enum AskRelayVersion {
    public static let current = "0.13.0"
}

/// Where an option's value came from, so that an error names what the user actually wrote.
public enum ValueSource: Sendable, Equatable {
    case commandLine
    case environment(String)
    case defaultValue
}

/// One `--flag` a command accepts, with its environment-variable equivalent and default.
public struct OptionSpec: Sendable {
    public let name: String
    public let valueName: String?
    public let environment: String?
    public let defaultValue: String?
    public let help: String
    public let repeatable: Bool

    /// An option that takes a value: `--name VALUE` or `--name=VALUE`.
    public static func value(
        _ name: String,
        _ valueName: String,
        env: String? = nil,
        default defaultValue: String? = nil,
        repeatable: Bool = false,
        help: String
    ) -> OptionSpec {
        OptionSpec(
            name: name,
            valueName: valueName,
            environment: env,
            defaultValue: defaultValue,
            help: help,
            repeatable: repeatable
        )
    }

    /// A Boolean switch: `--name`; its environment variable may be `1`, `true`, `yes` (on) or `0`, `false`, `no`.
    public static func flag(_ name: String, env: String? = nil, help: String) -> OptionSpec {
        OptionSpec(name: name, valueName: nil, environment: env, defaultValue: nil, help: help, repeatable: false)
    }

    var isFlag: Bool { valueName == nil }
}

/// Parsed arguments of one command, with typed accessors that report bad values as ``UsageError``.
public struct Arguments: Sendable {
    public private(set) var values: [String: [String]] = [:]
    public private(set) var flags: Set<String> = []
    public private(set) var positionals: [String] = []
    /// Where each option's value (or flag) came from.
    public private(set) var sources: [String: ValueSource] = [:]
    /// Things worth saying that are not errors: a variable spelt without the command's prefix, which is not read.
    public private(set) var warnings: [String] = []
    let specs: [OptionSpec]

    /// Parses `arguments` against `specs`, falling back to `environment` and then to defaults.
    public init(parsing arguments: [String], specs: [OptionSpec], environment: [String: String]) throws {
        self.specs = specs
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" {
                positionals.append(contentsOf: arguments[index...])
                break
            }
            guard argument.hasPrefix("--") else {
                positionals.append(argument)
                continue
            }
            let body = argument.dropFirst(2)
            let parts = body.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            let inline = parts.count > 1 ? String(parts[1]) : nil
            guard let spec = specs.first(where: { $0.name == name }) else {
                throw UsageError("unknown option '--\(name)'")
            }
            if sources[name] != nil && !spec.repeatable {
                throw UsageError("option '--\(name)' given more than once")
            }
            sources[name] = .commandLine
            if spec.isFlag {
                if inline != nil { throw UsageError("option '--\(name)' takes no value") }
                flags.insert(name)
                continue
            }
            let value: String
            if let inline {
                value = inline
            } else if index < arguments.count, !Self.looksLikeOption(arguments[index], specs: specs) {
                value = arguments[index]
                index += 1
            } else {
                throw UsageError("option '--\(name)' needs a value (\(spec.valueName ?? "VALUE"))")
            }
            values[name, default: []].append(value)
        }
        for spec in specs where sources[spec.name] == nil {
            if let variable = spec.environment, let value = environment[variable], !value.isEmpty {
                if spec.isFlag {
                    switch value.lowercased() {
                    case "1", "true", "yes": flags.insert(spec.name)
                    case "0", "false", "no": break
                    default:
                        throw UsageError(
                            "environment variable \(variable) (for --\(spec.name)) must be 1, true, yes, 0, false or no, got '\(value)'"
                        )
                    }
                } else {
                    values[spec.name] = spec.repeatable ? value.split(separator: ",").map(String.init) : [value]
                }
                sources[spec.name] = .environment(variable)
            } else if let value = spec.defaultValue {
                values[spec.name] = [value]
                sources[spec.name] = .defaultValue
            }
        }
        // `ASKRELAY_MODE=x askrelay load` reads nothing (load's variable is ASKRELAY_LOAD_MODE): say so, once per name.
        for spec in specs {
            guard let variable = spec.environment else { continue }
            let plain = "ASKRELAY_" + spec.name.uppercased().replacingOccurrences(of: "-", with: "_")
            guard plain != variable, environment[plain] != nil, !specs.contains(where: { $0.environment == plain })
            else { continue }
            warnings.append("note: \(plain) is not read here; the variable of --\(spec.name) is \(variable)")
        }
    }

    /// `--known-option` after a value-taking option means its value is missing, not that the value is `--x`.
    static func looksLikeOption(_ text: String, specs: [OptionSpec]) -> Bool {
        guard text.hasPrefix("--") else { return false }
        let name = text.dropFirst(2).split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
        return text == "--" || name == "help" || specs.contains { $0.name == name }
    }

    /// Names where a value came from, for error messages: the option, or the environment variable that gave it.
    public func origin(_ name: String) -> String {
        switch sources[name] {
        case .environment(let variable): "environment variable \(variable) (for --\(name))"
        case .defaultValue: "the default of option '--\(name)'"
        case .commandLine, nil: "option '--\(name)'"
        }
    }

    /// The (last) value of an option, or `nil`.
    public func string(_ name: String) -> String? { values[name]?.last }

    /// Every value of a repeatable option.
    public func strings(_ name: String) -> [String] { values[name] ?? [] }

    public func flag(_ name: String) -> Bool { flags.contains(name) }

    public func require(_ name: String) throws -> String {
        guard let value = string(name) else {
            let variable = specs.first { $0.name == name }?.environment.map { " (or \($0))" } ?? ""
            throw UsageError("missing required option '--\(name)'\(variable)")
        }
        return value
    }

    public func int(_ name: String, in range: ClosedRange<Int> = Int.min...Int.max) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text.replacingOccurrences(of: "_", with: "")), range.contains(value) else {
            throw UsageError(
                "\(origin(name)) needs a whole number in \(range.lowerBound)...\(range.upperBound), got '\(text)'"
            )
        }
        return value
    }

    /// A whole number in `0...UInt64.max` (seeds).
    public func uint64(_ name: String) throws -> UInt64? {
        guard let text = string(name) else { return nil }
        guard let value = UInt64(text.replacingOccurrences(of: "_", with: "")) else {
            throw UsageError("\(origin(name)) needs a whole number in 0...\(UInt64.max), got '\(text)'")
        }
        return value
    }

    public func double(
        _ name: String,
        in range: ClosedRange<Double> = -Double.greatestFiniteMagnitude...Double.greatestFiniteMagnitude
    ) throws -> Double? {
        guard let text = string(name) else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw UsageError(
                "\(origin(name)) needs a number in \(numberText(range.lowerBound))...\(numberText(range.upperBound)), got '\(text)'"
            )
        }
        return value
    }

    /// `--time-scale`: a number in ``ValueBounds/timeScale``.
    public func timeScale(_ name: String = "time-scale") throws -> Double? {
        try double(name, in: ValueBounds.timeScale)
    }

    /// A duration such as `250ms`, `2s`, `5m`, `48h` or a plain number of seconds, at most
    /// ``ValueBounds/maximumDuration`` (and within `range` when given).
    public func duration(_ name: String, in range: ClosedRange<Duration>? = nil) throws -> Duration? {
        guard let text = string(name) else { return nil }
        guard let value = parseDuration(text) else {
            // The same range as the message below, so both say where a valid value lies.
            let lowest = range.map { durationText($0.lowerBound) } ?? "0"
            let highest = range.map { durationText($0.upperBound) } ?? ValueBounds.maximumDurationText
            throw UsageError(
                "\(origin(name)) needs a duration like 250ms, 2s, 5m or 48h, from \(lowest) to \(highest), got '\(text)'"
            )
        }
        if let range, !range.contains(value) {
            throw UsageError(
                "\(origin(name)) must be from \(durationText(range.lowerBound)) to \(durationText(range.upperBound)), got '\(text)'"
            )
        }
        return value
    }

    /// One of a fixed set of words; with `ignoringCase`, `INFO` is `info` (the allowed spelling is returned).
    public func choice(_ name: String, _ allowed: [String], ignoringCase: Bool = false) throws -> String? {
        guard let text = string(name) else { return nil }
        if ignoringCase, let word = allowed.first(where: { $0.lowercased() == text.lowercased() }) { return word }
        guard allowed.contains(text) else {
            throw UsageError("\(origin(name)) must be one of \(allowed.joined(separator: ", ")), got '\(text)'")
        }
        return text
    }

    /// A ZeroMQ endpoint checked by ``EndpointSyntax``: `tcp://HOST:PORT` or `ipc://PATH`.
    /// - Parameter binding: whether the endpoint is bound (a `*` port is then allowed) or connected to.
    public func endpoint(_ name: String, binding: Bool) throws -> String? {
        guard let text = string(name) else { return nil }
        if let problem = EndpointSyntax.problem(text, binding: binding) {
            throw UsageError("\(origin(name)): \(problem)")
        }
        return text
    }

    /// The (last) value of an option, checked by `problem` (what is wrong with a text, or `nil` when it is good).
    public func checked(_ name: String, _ problem: (String) -> String?) throws -> String? {
        guard let text = string(name) else { return nil }
        if let problem = problem(text) { throw UsageError("\(origin(name)): \(problem)") }
        return text
    }

    /// A required endpoint option (usually one with a default), checked like ``endpoint(_:binding:)``.
    public func requireEndpoint(_ name: String, binding: Bool) throws -> String {
        _ = try require(name)
        return try endpoint(name, binding: binding) ?? ""
    }

    /// Every value of a repeatable endpoint option, each checked like ``endpoint(_:binding:)``.
    public func endpoints(_ name: String, binding: Bool) throws -> [String] {
        try strings(name).map { text in
            if let problem = EndpointSyntax.problem(text, binding: binding) {
                throw UsageError("\(origin(name)): \(problem)")
            }
            return text
        }
    }
}

/// What an endpoint given on a command line must look like. One place for every executable and flag.
public enum EndpointSyntax {
    /// The longest ipc path libzmq can bind or connect (a Unix socket's `sun_path`, without its terminating zero).
    public static let maximumIPCPath = 107

    /// Why `text` is not a usable endpoint, in words with what to give instead; `nil` when it is one.
    public static func problem(_ text: String, binding: Bool) -> String? {
        let hint = "give tcp://HOST:PORT or ipc://PATH"
        guard let schemeEnd = text.range(of: "://") else {
            if text.contains(":"), !text.contains("/") {
                return "'\(text)' is not an endpoint (no scheme): \(hint), for example tcp://\(text)"
            }
            return "'\(text)' is not an endpoint (no scheme): \(hint)"
        }
        let scheme = text[..<schemeEnd.lowerBound]
        let rest = String(text[schemeEnd.upperBound...])
        switch scheme {
        case "tcp":
            guard let colon = rest.lastIndex(of: ":") else {
                return "'\(text)' has no port: \(hint), for example tcp://\(rest):5555"
            }
            let host = rest[..<colon]
            let port = rest[rest.index(after: colon)...]
            if host.isEmpty { return "'\(text)' has no host: \(hint), for example tcp://127.0.0.1\(rest)" }
            if host.hasPrefix("[") != host.hasSuffix("]") { return "'\(text)': an IPv6 host goes in brackets, [::1]" }
            if port == "*" {
                return binding
                    ? nil : "'\(text)': a port of * only works for an endpoint that is bound; give the port number"
            }
            guard let number = Int(port), (1...65_535).contains(number), port.allSatisfy(\.isASCII) else {
                return
                    "'\(text)' has no valid port ('\(port)'): the port is a number in 1...65535\(binding ? " or *" : "")"
            }
            return nil
        case "ipc":
            if rest.isEmpty { return "'\(text)' has no path: \(hint)" }
            if rest.utf8.count > maximumIPCPath {
                return
                    "'\(text)': an ipc path may be at most \(maximumIPCPath) bytes (it is \(rest.utf8.count)); use a shorter folder"
            }
            return nil
        default:
            return "'\(text)' is not an endpoint: scheme '\(scheme)' is not tcp or ipc; \(hint)"
        }
    }
}

/// A bound of a range for messages: whole numbers without a fraction (`1000000000`, not `1e9` or `1000000000.0`).
public func numberText(_ value: Double) -> String {
    if value.rounded() == value && abs(value) < 1e15 { return String(Int64(value)) }
    return "\(value)"
}

/// A command or subcommand. Executables describe themselves with a tree of these; ``CommandLine.run`` does the rest:
/// `--help` and `--version` on every level, ``UsageError`` → exit 64 with the usage, `validate()` before `run()`.
public protocol Command: Sendable {
    static var name: String { get }
    /// One line for the parent's table of subcommands.
    static var abstract: String { get }
    /// More help, printed after the options.
    static var discussion: String { get }
    static var options: [OptionSpec] { get }
    static var positionalHelp: String? { get }
    static var subcommands: [any Command.Type] { get }

    /// Builds the command from parsed arguments; throw ``UsageError`` for a bad value.
    init(arguments: Arguments) throws
    /// Cross-checks the options before anything runs.
    func validate() throws
    /// Runs the command and returns the process exit code.
    func run() async throws -> Int32
}

extension Command {
    public static var discussion: String { "" }
    public static var options: [OptionSpec] { [] }
    public static var positionalHelp: String? { nil }
    public static var subcommands: [any Command.Type] { [] }
    public func validate() throws {}
}

/// A command that only groups subcommands.
public protocol CommandGroup: Command {}

extension CommandGroup {
    public init(arguments: Arguments) throws {
        throw UsageError("missing subcommand")
    }
    public func run() async throws -> Int32 { ExitCode.usage }
}

/// Where ``CommandRunner`` writes: the process's stdout and stderr, or a test's buffers.
public struct CommandOutput: Sendable {
    public let standardOutput: @Sendable (String) -> Void
    public let standardError: @Sendable (String) -> Void

    public init(
        standardOutput: @escaping @Sendable (String) -> Void,
        standardError: @escaping @Sendable (String) -> Void
    ) {
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    public static let process = CommandOutput(standardOutput: { print($0) }, standardError: { printError($0) })
}

public enum CommandRunner {
    /// Resolves the subcommand path, parses, validates and runs. Prints help or errors to stderr/stdout.
    /// - Returns: the exit code for the process.
    public static func run(
        _ root: any Command.Type,
        arguments: [String] = Array(CommandLine.arguments.dropFirst()),
        environment: [String: String] = ProcessInfo.processInfo.environment,
        output: CommandOutput = .process
    ) async -> Int32 {
        var command = root
        var path = [root.name]
        var rest = arguments[...]
        while let next = rest.first, let sub = command.subcommands.first(where: { $0.name == next }) {
            command = sub
            path.append(sub.name)
            rest = rest.dropFirst()
        }
        // `help [subcommand ...]`: the help of that subcommand.
        if rest.first == "help" {
            return printHelp(of: Array(rest.dropFirst()), under: command, path: path, output: output)
        }
        let options = rest.prefix { $0 != "--" }
        if options.contains("--help") || options.contains("-h") {
            output.standardOutput(help(for: command, path: path))
            return ExitCode.success
        }
        if options.contains("--version") {
            output.standardOutput("\(root.name) \(AskRelayVersion.current)")
            return ExitCode.success
        }
        if !command.subcommands.isEmpty && (command is any CommandGroup.Type) {
            let message = rest.first.map { "unknown subcommand '\($0)'" } ?? "missing subcommand"
            output.standardError("\(path.joined(separator: " ")): \(message)\n\n\(help(for: command, path: path))")
            return ExitCode.usage
        }
        do {
            let parsed = try Arguments(parsing: Array(rest), specs: command.options, environment: environment)
            for warning in parsed.warnings { output.standardError("\(path.joined(separator: " ")): \(warning)") }
            if command.positionalHelp == nil, let extra = parsed.positionals.first {
                throw UsageError("unexpected argument '\(extra)'")
            }
            let instance = try command.init(arguments: parsed)
            try instance.validate()
            return try await instance.run()
        } catch let error as UsageError {
            let name = path.joined(separator: " ")
            output.standardError(
                "\(name): \(error.message)\n\n\(usageLine(for: command, path: path))\nSee '\(name) --help'."
            )
            return ExitCode.usage
        } catch {
            output.standardError("\(path.joined(separator: " ")): error: \(error)")
            return ExitCode.failure
        }
    }

    /// `help WORD...` below `command`: prints the help of that subcommand, or an error naming the subcommands.
    static func printHelp(
        of words: [String],
        under command: any Command.Type,
        path: [String],
        output: CommandOutput
    ) -> Int32 {
        var command = command
        var path = path
        for word in words {
            let name = path.joined(separator: " ")
            guard let sub = command.subcommands.first(where: { $0.name == word }) else {
                let known = command.subcommands.map { $0.name }.joined(separator: ", ")
                let what = command.subcommands.isEmpty ? "has no subcommands" : "has the subcommands \(known)"
                output.standardError("\(name): unknown subcommand '\(word)' (\(name) \(what))")
                return ExitCode.usage
            }
            command = sub
            path.append(sub.name)
        }
        output.standardOutput(help(for: command, path: path))
        return ExitCode.success
    }

    static func usageLine(for command: any Command.Type, path: [String]) -> String {
        var line = "Usage: \(path.joined(separator: " "))"
        if !command.subcommands.isEmpty { line += " <subcommand>" }
        if !command.options.isEmpty { line += " [options]" }
        if let positional = command.positionalHelp { line += " \(positional)" }
        return line
    }

    /// The full help text of a command. Each option is a header line `  --name VALUE` and one indented line of help
    /// that ends, when there are any, with `(default: X; env: NAME; repeatable)`: the docs' flag tables are
    /// checked against exactly this.
    public static func help(for command: any Command.Type, path: [String]) -> String {
        var text = "\(path.joined(separator: " ")) — \(command.abstract)\n\n\(usageLine(for: command, path: path))\n"
        if !command.subcommands.isEmpty {
            text += "\nSubcommands:\n"
            let width = command.subcommands.map { $0.name.count }.max() ?? 0
            for sub in command.subcommands {
                text += "  \(sub.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(sub.abstract)\n"
            }
            text += "\nSee '\(path.joined(separator: " ")) help <subcommand>' for a subcommand's options.\n"
        }
        text += "\nOptions:\n"
        for option in command.options {
            var head = "  --\(option.name)"
            if let valueName = option.valueName { head += " \(valueName)" }
            text += head + "\n      \(option.help)"
            var notes: [String] = []
            if let value = option.defaultValue { notes.append("default: \(value)") }
            if let variable = option.environment { notes.append("env: \(variable)") }
            if option.repeatable {
                notes.append(option.environment == nil ? "repeatable" : "repeatable, comma-separated in the variable")
            }
            if !notes.isEmpty { text += " (\(notes.joined(separator: "; ")))" }
            text += "\n"
        }
        text += "  --help\n      Show this help.\n"
        text += "  --version\n      Print the version (\(AskRelayVersion.current)).\n"
        if !command.discussion.isEmpty { text += "\n\(command.discussion)\n" }
        return text
    }
}

/// Writes a line to standard output at once (unbuffered), so a parent process reading a pipe sees it now.
extension OptionSpec {
    /// The options every worker executable (askrelay-limits, -parent, -child) takes for its broker connection: the
    /// heartbeat, the CURVE keys, the log level, and its metrics endpoint.
    /// - Parameter logLevels: the level names, listed in the help.
    public static func workerConnection(logLevels: [String]) -> [OptionSpec] {
        [
            .value("heartbeat", "DURATION", env: "ASKRELAY_HEARTBEAT", default: "1s", help: "heartbeat interval"),
            .value(
                "curve-key",
                "FILE",
                env: "ASKRELAY_CURVE_KEY",
                help: "this worker's CURVE key file (askrelay keys generate); with --broker-key"
            ),
            .value(
                "broker-key",
                "FILE",
                env: "ASKRELAY_BROKER_KEY",
                help: "file holding the broker's CURVE public key (keys/broker.public)"
            ),
            .value(
                "log-level",
                "LEVEL",
                env: "ASKRELAY_LOG_LEVEL",
                default: "info",
                help: logLevels.joined(separator: ", ")
            ),
            .value(
                "metrics-endpoint",
                "HOST:PORT",
                env: "ASKRELAY_METRICS_ENDPOINT",
                help: "serve Prometheus metrics on http://HOST:PORT/metrics (port 0: the OS picks one)"
            ),
            .value(
                "trace-log",
                "FILE",
                env: "ASKRELAY_TRACE_LOG",
                help:
                    "append a trace line per message sent, received, acked or refused (docs/tracing.md, \"Recording\")"
            ),
            .otlpEndpoint,
        ]
    }
}

extension OptionSpec {
    /// `--otlp-endpoint URL` of the broker and every worker: the live OpenTelemetry export of the trace.
    public static let otlpEndpoint = OptionSpec.value(
        "otlp-endpoint",
        "URL",
        env: "ASKRELAY_OTLP_ENDPOINT",
        help: "send the trace as spans to an OpenTelemetry collector's http://HOST:PORT while running "
            + "(docs/tracing.md, \"OpenTelemetry\")"
    )
}
