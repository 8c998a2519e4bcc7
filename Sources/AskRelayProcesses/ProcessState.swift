import Foundation

/// A process's scheduling state, read from /proc (Linux).
public enum ProcessState {
    /// The state letters of every thread of `pid` (`R`, `S`, `T`, `Z`, ...); empty when the process is gone.
    public static func threadStates(_ pid: Int32) -> [Character] {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return [] }
        return tasks.compactMap { task -> Character? in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // "pid (comm) S ...": the state follows the command's closing parenthesis and a space.
            return stat[close...].dropFirst(2).first
        }
    }

    /// Waits until every thread of `pid` is stopped (state `T`): a SIGSTOP takes effect after kill(2) returns.
    /// - Throws: ``RelayProcessError`` if the process is gone, or not stopped within `timeout`.
    public static func waitUntilStopped(_ pid: Int32, timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let states = threadStates(pid)
            if states.isEmpty { throw RelayProcessError("process \(pid) is gone") }
            if states.allSatisfy({ $0 == "T" }) { return }
            usleep(1000)  // allowed: a poll with a deadline (the kernel tells no one when a thread stops)
        }
        throw RelayProcessError("process \(pid) was not stopped within \(timeout) of SIGSTOP")
    }

    /// Waits until no thread of `pid` is stopped (state `T`) any more: a SIGCONT takes effect after kill(2) returns.
    /// - Throws: ``RelayProcessError`` if the process is gone, or still stopped after `timeout`.
    public static func waitUntilContinued(_ pid: Int32, timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let states = threadStates(pid)
            if states.isEmpty { throw RelayProcessError("process \(pid) is gone") }
            if !states.contains("T") { return }
            usleep(1000)  // allowed: a poll with a deadline (the kernel tells no one when a thread continues)
        }
        throw RelayProcessError("process \(pid) was still stopped \(timeout) after SIGCONT")
    }
}
