import Foundation

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
    /// Bad usage: unknown flag, missing value, invalid value (`EX_USAGE`).
    public static let usage: Int32 = 64
    /// A resource the command needs is unavailable (`EX_UNAVAILABLE`).
    public static let unavailable: Int32 = 69
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

    /// A Boolean switch: `--name`; the environment variable counts when it is `1`, `true` or `yes`.
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
    let specs: [OptionSpec]

    /// Parses `arguments` against `specs`, falling back to `environment` and then to defaults.
    public init(parsing arguments: [String], specs: [OptionSpec], environment: [String: String]) throws {
        self.specs = specs
        var index = 0
        var seen: Set<String> = []
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
            let name = String(body.split(separator: "=", maxSplits: 1).first ?? "")
            let inline = body.contains("=") ? String(body.split(separator: "=", maxSplits: 1).dropFirst().first ?? "") : nil
            guard let spec = specs.first(where: { $0.name == name }) else {
                throw UsageError("unknown option '--\(name)'")
            }
            if spec.isFlag {
                if inline != nil { throw UsageError("option '--\(name)' takes no value") }
                flags.insert(name)
                continue
            }
            let value: String
            if let inline {
                value = inline
            } else if index < arguments.count {
                value = arguments[index]
                index += 1
            } else {
                throw UsageError("option '--\(name)' needs a value (\(spec.valueName ?? "VALUE"))")
            }
            if seen.contains(name) && !spec.repeatable {
                throw UsageError("option '--\(name)' given more than once")
            }
            seen.insert(name)
            values[name, default: []].append(value)
        }
        for spec in specs where values[spec.name] == nil && !flags.contains(spec.name) {
            if let variable = spec.environment, let value = environment[variable], !value.isEmpty {
                if spec.isFlag {
                    if ["1", "true", "yes"].contains(value.lowercased()) { flags.insert(spec.name) }
                } else {
                    values[spec.name] = spec.repeatable ? value.split(separator: ",").map(String.init) : [value]
                }
            } else if let value = spec.defaultValue {
                values[spec.name] = [value]
            }
        }
    }

    /// The (last) value of an option, or `nil`.
    public func string(_ name: String) -> String? { values[name]?.last }

    /// Every value of a repeatable option.
    public func strings(_ name: String) -> [String] { values[name] ?? [] }

    public func flag(_ name: String) -> Bool { flags.contains(name) }

    public func require(_ name: String) throws -> String {
        guard let value = string(name) else { throw UsageError("missing required option '--\(name)'") }
        return value
    }

    public func int(_ name: String, in range: ClosedRange<Int> = Int.min...Int.max) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text.replacingOccurrences(of: "_", with: "")), range.contains(value) else {
            throw UsageError("option '--\(name)' needs a whole number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    public func double(_ name: String, in range: ClosedRange<Double> = -Double.greatestFiniteMagnitude...Double.greatestFiniteMagnitude) throws -> Double? {
        guard let text = string(name) else { return nil }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw UsageError("option '--\(name)' needs a number in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    /// A duration such as `250ms`, `2s`, `5m`, `48h` or a plain number of seconds.
    public func duration(_ name: String) throws -> Duration? {
        guard let text = string(name) else { return nil }
        guard let value = parseDuration(text) else {
            throw UsageError("option '--\(name)' needs a duration like 250ms, 2s, 5m or 48h, got '\(text)'")
        }
        return value
    }

    /// One of a fixed set of words.
    public func choice(_ name: String, _ allowed: [String]) throws -> String? {
        guard let text = string(name) else { return nil }
        guard allowed.contains(text) else {
            throw UsageError("option '--\(name)' must be one of \(allowed.joined(separator: ", ")), got '\(text)'")
        }
        return text
    }
}

/// Parses `250ms`, `1.5s`, `5m`, `48h`, `2d` or a plain number of seconds.
public func parseDuration(_ text: String) -> Duration? {
    let units: [(String, Double)] = [("ms", 0.001), ("us", 0.000_001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
    for (suffix, scale) in units where text.hasSuffix(suffix) {
        guard let number = Double(text.dropLast(suffix.count)), number >= 0, number.isFinite else { return nil }
        return .nanoseconds(Int64((number * scale * 1e9).rounded()))
    }
    guard let seconds = Double(text), seconds >= 0, seconds.isFinite else { return nil }
    return .nanoseconds(Int64((seconds * 1e9).rounded()))
}

/// A command or subcommand. Executables describe themselves with a tree of these; ``CommandLine.run`` does the rest:
/// `--help` on every level, ``UsageError`` → exit 64 with the usage, `validate()` before `run()`.
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

public enum CommandRunner {
    /// Resolves the subcommand path, parses, validates and runs. Prints help or errors to stderr/stdout.
    /// - Returns: the exit code for the process.
    public static func run(
        _ root: any Command.Type,
        arguments: [String] = Array(CommandLine.arguments.dropFirst()),
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) async -> Int32 {
        var command = root
        var path = [root.name]
        var rest = arguments[...]
        while let next = rest.first, let sub = command.subcommands.first(where: { $0.name == next }) {
            command = sub
            path.append(sub.name)
            rest = rest.dropFirst()
        }
        if rest.contains("--help") || rest.contains("-h") || rest.first == "help" {
            print(help(for: command, path: path))
            return ExitCode.success
        }
        if !command.subcommands.isEmpty && (command is any CommandGroup.Type) {
            let message = rest.first.map { "unknown subcommand '\($0)'" } ?? "missing subcommand"
            printError("\(path.joined(separator: " ")): \(message)\n\n\(help(for: command, path: path))")
            return ExitCode.usage
        }
        do {
            let parsed = try Arguments(parsing: Array(rest), specs: command.options, environment: environment)
            if command.positionalHelp == nil, let extra = parsed.positionals.first {
                throw UsageError("unexpected argument '\(extra)'")
            }
            let instance = try command.init(arguments: parsed)
            try instance.validate()
            return try await instance.run()
        } catch let error as UsageError {
            printError("\(path.joined(separator: " ")): \(error.message)\n\n\(usageLine(for: command, path: path))\nSee '\(path.joined(separator: " ")) --help'.")
            return ExitCode.usage
        } catch {
            printError("\(path.joined(separator: " ")): error: \(error)")
            return ExitCode.failure
        }
    }

    static func usageLine(for command: any Command.Type, path: [String]) -> String {
        var line = "Usage: \(path.joined(separator: " "))"
        if !command.subcommands.isEmpty { line += " <subcommand>" }
        if !command.options.isEmpty { line += " [options]" }
        if let positional = command.positionalHelp { line += " \(positional)" }
        return line
    }

    /// The full help text of a command.
    public static func help(for command: any Command.Type, path: [String]) -> String {
        var text = "\(path.joined(separator: " ")) — \(command.abstract)\n\n\(usageLine(for: command, path: path))\n"
        if !command.subcommands.isEmpty {
            text += "\nSubcommands:\n"
            let width = command.subcommands.map { $0.name.count }.max() ?? 0
            for sub in command.subcommands {
                text += "  \(sub.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(sub.abstract)\n"
            }
        }
        text += "\nOptions:\n"
        do {
            for option in command.options {
                var head = "  --\(option.name)"
                if let valueName = option.valueName { head += " \(valueName)" }
                text += head + "\n      \(option.help)"
                var notes: [String] = []
                if let value = option.defaultValue { notes.append("default: \(value)") }
                if let variable = option.environment { notes.append("env: \(variable)") }
                if option.repeatable { notes.append("repeatable") }
                if !notes.isEmpty { text += " (\(notes.joined(separator: "; ")))" }
                text += "\n"
            }
        }
        text += "  --help\n      Show this help.\n"
        if !command.discussion.isEmpty { text += "\n\(command.discussion)\n" }
        return text
    }
}

/// Writes a line to standard output at once (unbuffered), so a parent process reading a pipe sees it now.
public func printLine(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { buffer in _ = Foundation.write(1, buffer.baseAddress, buffer.count) }
}

/// Writes a line to standard error.
public func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Runs blocking work (libzmq calls, SQLite) on a dedicated thread so it never occupies the cooperative pool,
/// and resumes the caller with its result.
public func onDedicatedThread<T: Sendable>(
    name: String,
    _ work: @escaping @Sendable () throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }
}

/// A thread started for blocking work, which can be waited for.
public final class JoinableThread: Sendable {
    private let finished = DispatchSemaphore(value: 0)

    /// Starts `body` on a new thread at once.
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        let finished = self.finished
        let thread = Thread {
            body()
            finished.signal()
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }

    /// Waits for the thread to finish. - Returns: `false` if `timeout` passed first.
    @discardableResult
    public func join(timeout: Duration? = nil) -> Bool {
        guard let timeout else {
            finished.wait()
            return true
        }
        let nanoseconds = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        return finished.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .success
    }
}

/// Turns SIGTERM / SIGINT (or any signals) into a callback on a dispatch queue, for a graceful drain.
public final class SignalWatcher: @unchecked Sendable {  // @unchecked: the sources are only touched in init and deinit.
    private let sources: [any DispatchSourceSignal]

    public init(signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) {
        let queue = DispatchQueue(label: "askrelay.signals")
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
