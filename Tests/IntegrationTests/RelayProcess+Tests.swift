import AskRelayProcesses
import Foundation

extension Executables {
    /// The built executables' folder by the one lookup (`ASKRELAY_BIN_DIR`, else next to the test bundle or in one
    /// of its parents), as a URL.
    static var built: URL { URL(fileURLWithPath: directoryOrFirstCandidate()) }
}

extension RelayProcess {
    /// Starts `executable` (from ``Executables/built``, or `executableURL`) with `arguments`, its stderr in a log file
    /// of its own in `logDirectory`; stopped (``stop(grace:)``) when released, so a test ends it in `defer` or not at
    /// all.
    /// - Parameter environment: the whole environment of the process (default: the test's own without `ASKRELAY_*`).
    convenience init(
        _ executable: String,
        _ arguments: [String],
        logDirectory: String,
        executableURL: URL? = nil,
        environment: [String: String]? = nil
    ) throws {
        try self.init(
            name: executable,
            executable: (executableURL ?? Executables.built.appendingPathComponent(executable)).path,
            arguments: arguments,
            environment: environment ?? [:],
            replacingEnvironment: environment != nil,
            logPath: logDirectory + "/\(executable)-\(UUID().uuidString.prefix(8)).log"
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

/// A test's own failure, with its message.
struct ProcessFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
