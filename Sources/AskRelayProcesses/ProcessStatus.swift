import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How a process ended.
public enum ProcessExitStatus: Sendable, Hashable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32)

    public var isSuccess: Bool { self == .exited(0) }

    public var description: String {
        switch self {
        case .exited(let code): "exit \(code)"
        case .signaled(let signal): "killed by \(signalName(signal))"
        }
    }
}

public func signalName(_ signal: Int32) -> String {
    switch signal {
    case SIGKILL: "SIGKILL"
    case SIGTERM: "SIGTERM"
    case SIGINT: "SIGINT"
    case SIGSTOP: "SIGSTOP"
    case SIGCONT: "SIGCONT"
    case SIGSEGV: "SIGSEGV"
    case SIGABRT: "SIGABRT"
    case SIGILL: "SIGILL"
    case SIGTRAP: "SIGTRAP"
    case SIGBUS: "SIGBUS"
    default: "signal \(signal)"
    }
}

/// A supervision failure: a process that could not start, never said ready, or did not exit in time.
public struct SupervisorError: Error, CustomStringConvertible, Sendable {
    public let process: String
    public let message: String
    public init(process: String, _ message: String) {
        self.process = process
        self.message = message
    }
    public var description: String { "\(process): \(message)" }
}

/// One run of a supervised process (it gets a new one when it is restarted).
public struct Incarnation: Sendable, Hashable {
    public var pid: pid_t
    public var startedAt: Date
    public var exit: ProcessExitStatus?
    /// The signal our own fault schedule sent to end it, if any: its exit by that signal is expected.
    public var expectedSignal: Int32?
    /// The `ready ...` line, once printed.
    public var readyLine: String?
    /// When the run's exit was collected.
    public var endedAt: Date? = nil
    /// When the run's first `ready` line arrived (workers print it once the broker registered them).
    public var readyAt: Date? = nil
}

/// Where a process's current run stands with a line it is expected to print (see
/// ``SupervisedProcess/readinessUnlocked(prefix:)``).
public enum Readiness: Sendable, Equatable {
    case waiting
    case ready(String)
    /// The run ended (and its output was read to the end) without printing the line.
    case exited(ProcessExitStatus)
}
