import AskRelayProcesses
import Foundation
import Testing

extension Executables {
    /// The built executables' folder by the one lookup (`ASKRELAY_BIN_DIR`, else next to the test bundle or in one
    /// of its parents), as a URL.
    static var built: URL { URL(fileURLWithPath: directoryOrFirstCandidate()) }
}

extension RelayProcess {
    /// Starts `executable` (from ``Executables/built``, or `executableURL`) with `arguments`, its stderr in
    /// `logPath`; stopped (``stop(grace:)``) when released, so a test ends it in `defer` or not at all.
    /// - Parameters:
    ///   - name: its name in messages (default: `executable`).
    ///   - environment: the whole environment of the process (default: the test's own without `ASKRELAY_*`).
    convenience init(
        _ executable: String,
        _ arguments: [String],
        name: String? = nil,
        logPath: String,
        executableURL: URL? = nil,
        environment: [String: String]? = nil
    ) throws {
        let launch = ProcessLaunch(
            name: name ?? executable,
            executable: (executableURL ?? Executables.built.appendingPathComponent(executable)).path,
            arguments: arguments,
            environment: environment ?? [:],
            replacingEnvironment: environment != nil,
            logPath: logPath
        )
        try self.init(launch)
    }

    /// The same with its stderr in a log file of its own in `logDirectory`.
    convenience init(
        _ executable: String,
        _ arguments: [String],
        logDirectory: String,
        executableURL: URL? = nil,
        environment: [String: String]? = nil
    ) throws {
        try self.init(
            executable,
            arguments,
            logPath: logDirectory + "/\(executable)-\(UUID().uuidString.prefix(8)).log",
            executableURL: executableURL,
            environment: environment
        )
    }

    /// The first endpoint of a broker's ready line (waiting for it).
    func readyEndpoint(timeout: Duration = .seconds(20)) throws -> String {
        let line = try waitUntilReady(timeout: timeout)
        guard let endpoint = line.endpoint else { throw RelayProcessError("no endpoints in '\(line)'") }
        return endpoint
    }

    /// SIGKILL and reap, never failing (cleanup).
    func kill9() { _ = try? kill() }
}

/// Runs `executable` (default `askrelay`) with `arguments` to its end and expects a usage error: exit 64, `message` in
/// its stderr, nothing on its stdout.
func expectUsageError(
    _ arguments: [String],
    _ message: String,
    executable: String = "askrelay",
    logDirectory: String,
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let run = try RelayProcess(executable, arguments, logDirectory: logDirectory)
    #expect(try run.wait(timeout: .seconds(20)) == .exited(64), "\(arguments)", sourceLocation: sourceLocation)
    #expect(run.stderr.contains(message), "\(arguments): \(run.stderr)", sourceLocation: sourceLocation)
    #expect(run.output.isEmpty, "\(run.output)", sourceLocation: sourceLocation)
}

/// A test's own failure, with its message.
struct ProcessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
