import Foundation

/// A process's scheduling state, read from /proc (Linux): the one reader of `/proc/<pid>/stat` for the tools and
/// tests.
public enum ProcessState {
    /// The fields of `/proc/<pid>/stat` after the command, from proc(5)'s third on: state, ppid, pgrp, session, ...;
    /// `nil` when the process is gone.
    public static func statFields(_ pid: Int32) -> [Substring]? {
        fields(ofStat: "/proc/\(pid)/stat")
    }

    /// The state letter of `pid` (`R`, `S`, `T` stopped, `Z` zombie, ...): its main thread's, as `/proc/<pid>/stat`
    /// gives it; `nil` when the process is gone.
    public static func state(_ pid: Int32) -> Character? {
        statFields(pid)?.first?.first
    }

    /// Whether `pid` is a zombie: ended, not yet reaped by its parent.
    public static func isZombie(_ pid: Int32) -> Bool {
        state(pid) == "Z"
    }

    /// Whether `pid` is a live process: there, and not a zombie (one waiting for its reaper counts as gone).
    public static func isAlive(_ pid: Int32) -> Bool {
        state(pid).map { $0 != "Z" } ?? false
    }

    /// The state letters of every thread of `pid` (`R`, `S`, `T`, `Z`, ...); empty when the process is gone.
    public static func threadStates(_ pid: Int32) -> [Character] {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return [] }
        return tasks.compactMap { task in fields(ofStat: "/proc/\(pid)/task/\(task)/stat")?.first?.first }
    }

    /// "pid (comm) S ppid ...": the fields after the command's closing parenthesis (the command may hold spaces and
    /// parentheses itself, so the last one ends it).
    private static func fields(ofStat path: String) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: path, encoding: .utf8), let close = stat.lastIndex(of: ")") else {
            return nil
        }
        return stat[stat.index(after: close)...].split(separator: " ")
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
