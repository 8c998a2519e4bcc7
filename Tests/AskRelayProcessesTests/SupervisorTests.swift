import AskTestKit
import Foundation
import Synchronization
import Testing

@testable import AskRelayProcesses

@Suite("ProcessSupervisor with real processes", .timeLimit(.minutes(1)))
struct SupervisorTests {
    /// A folder of this test's own, removed when the test ends (with the suite's instance).
    let folder = TempDirectory(prefix: "supervisor")
    var directory: String { folder.path }

    /// A shell that writes to stderr, says ready with its pid, then blocks until it is signalled (stderr first: once
    /// the ready line is seen, the log line is written, so a SIGKILL right after cannot come before it).
    static let blocker = ["-c", "echo 'to the log' >&2; echo \"ready pid=$$\"; exec tail -f /dev/null"]

    @Test("waits for the ready line, exposes the pid, logs stderr, and a SIGKILL ends it")
    func readyAndKill() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let log = (directory as NSString).appendingPathComponent("sh.log")
        let process = try supervisor.start(
            ProcessLaunch(name: "sh", executable: "/bin/sh", arguments: Self.blocker, logPath: log)
        )
        let line = try process.waitForLine(timeout: .seconds(10))
        let pid = try #require(process.pid)
        #expect(line == "ready pid=\(pid)")
        #expect(process.isRunning)
        #expect(process.incarnations.last?.readyLine == line)
        process.signal(SIGKILL)
        #expect(try process.waitForExit(timeout: .seconds(10)) == .signaled(SIGKILL))
        #expect(!process.isRunning)
        #expect(
            String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self).contains("to the log")
        )
    }

    @Test("readiness without waiting: ready with the time the line arrived; a new run starts afresh; exited")
    func readinessWithoutWaiting() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let process = try supervisor.start(
            ProcessLaunch(
                name: "sh",
                executable: "/bin/sh",
                arguments: ["-c", "echo ready now; exec tail -f /dev/null"]
            )
        )
        _ = supervisor.wait(until: .now + .seconds(10)) { process.readinessUnlocked() != .waiting }
        #expect(process.readiness() == .ready("ready now"))
        let run = try #require(process.incarnations.last)
        #expect(run.readyLine == "ready now")
        let readyAt = try #require(run.readyAt)
        #expect(readyAt >= run.startedAt)
        process.signal(SIGKILL)
        _ = try process.waitForExit(timeout: .seconds(10))
        try process.restart()
        // A new run starts afresh: the earlier run's line does not count, and it has no ready time yet.
        #expect(process.readiness(prefix: "never") == .waiting)
        #expect(
            process.incarnations.last?.readyAt == nil || process.incarnations.last?.readyAt ?? .distantPast > readyAt
        )
        process.signal(SIGKILL)
        _ = try process.waitForExit(timeout: .seconds(10))
        #expect(process.readiness(prefix: "never") == .exited(.signaled(SIGKILL)))
    }

    @Test("after waitForExit, lines holds everything the process wrote, even what was still in the pipe at its exit")
    func linesCompleteAfterExit() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        // About 190 KB: the process exits with up to a pipe's worth (64 KiB) not yet read.
        let process = try supervisor.start(
            ProcessLaunch(
                name: "chatty",
                executable: "/bin/sh",
                arguments: ["-c", "seq 1 30000; echo last"]
            )
        )
        #expect(try process.waitForExit(timeout: .seconds(20)) == .exited(0))
        let lines = process.lines
        #expect(lines.count == 30001)
        #expect(lines.last == "last")
    }

    @Test("a process that never prints ready fails with a clear error naming the deadline")
    func neverReady() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let process = try supervisor.start(
            ProcessLaunch(
                name: "mute",
                executable: "/bin/sh",
                arguments: ["-c", "echo starting; exec tail -f /dev/null"]
            )
        )
        // Its one line is read before the short wait begins: on a loaded machine the shell may not have written it
        // within 300 ms.
        _ = try process.waitForLine(prefix: "starting", timeout: .seconds(20))
        do {
            try process.waitForLine(timeout: .milliseconds(300))
            Issue.record("waitForLine returned without a ready line")
        } catch let error as SupervisorError {
            #expect(error.process == "mute")
            #expect(error.description.contains("did not print 'ready ...' within 300ms"))
        }
        #expect(process.isRunning)
        #expect(process.lines == ["starting"])
    }

    @Test("a process that exits before ready fails at once with its exit status and last log lines")
    func exitsBeforeReady() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let log = (directory as NSString).appendingPathComponent("broken.log")
        let process = try supervisor.start(
            ProcessLaunch(
                name: "broken",
                executable: "/bin/sh",
                arguments: ["-c", "echo 'no config' >&2; exit 3"],
                logPath: log
            )
        )
        // At once, not at the deadline: the deadline is past the suite's time limit, and the error is the exit's
        // ("exited ... before printing"), not the timeout's ("did not print ... within").
        #expect {
            try process.waitForLine(timeout: .seconds(120))
        } throws: { error in
            let text = "\(error)"
            return text.contains("exited (exit 3) before printing 'ready ...'") && text.contains("no config")
                && !text.contains("did not print")
        }
        #expect(process.exitStatus == .exited(3))
    }

    @Test("the last stderr lines of the current run are in the error whatever the log is: none, or our stderr")
    func exitsBeforeReadyWithoutLogFile() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        for logPath in [nil, "/dev/stderr"] {
            let process = try supervisor.start(
                ProcessLaunch(
                    name: "broken",
                    executable: "/bin/sh",
                    arguments: ["-c", "echo 'give the guardians with one flag' >&2; exit 64"],
                    logPath: logPath
                )
            )
            #expect {
                try process.waitForLine(timeout: .seconds(30))
            } throws: { error in
                let text = "\(error)"
                return text.contains("exited (exit 64) before printing 'ready ...'")
                    && text.contains("give the guardians with one flag") && !text.contains("(log: /dev/stderr)")
            }
        }
    }

    @Test("a server that exits before its ready line is reported as having exited, with its message")
    func serverProcessExitsBeforeReady() throws {
        #expect {
            _ = try RelayProcess.server(
                executable: "/bin/sh",
                arguments: ["-c", "echo 'askrelay-parent: give the guardians' >&2; exit 64"],
                timeout: .seconds(600)
            )
        } throws: { error in
            let text = "\(error)"
            return text.contains("exited (exit 64)") && text.contains("askrelay-parent: give the guardians")
                && !text.contains("within")
        }
    }

    @Test("supervised processes get none of our ASKRELAY_* variables, only those the supervisor passes")
    func askRelayVariablesDoNotLeak() throws {
        #expect(
            ProcessSupervisor.inheritedEnvironment(["ASKRELAY_FAMILIES": "5", "PATH": "/bin", "ASKRELAYX": "1"])
                == ["PATH": "/bin", "ASKRELAYX": "1"]
        )
        // Only this test reads ASKRELAY_LEAK_PROBE; PATH shows the rest of the environment still arrives.
        setenv("ASKRELAY_LEAK_PROBE", "leaked", 1)
        defer { unsetenv("ASKRELAY_LEAK_PROBE") }
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let process = try supervisor.start(
            ProcessLaunch(
                name: "env",
                executable: "/bin/sh",
                arguments: [
                    "-c", "echo \"ready ${ASKRELAY_LEAK_PROBE-absent} ${ASKRELAY_GIVEN-absent} ${PATH:+path}\"",
                ],
                environment: ["ASKRELAY_GIVEN": "given"]
            )
        )
        #expect(try process.waitForLine(timeout: .seconds(30)) == "ready absent given path")
    }

    @Test("exit codes are reported; a missing executable is a clear error")
    func exitCodes() throws {
        let supervisor = ProcessSupervisor()
        defer { supervisor.killAll() }
        let process = try supervisor.start(
            ProcessLaunch(
                name: "ok",
                executable: "/bin/sh",
                arguments: ["-c", "echo ready; echo done flows=3"]
            )
        )
        #expect(try process.waitForLine(prefix: "done", timeout: .seconds(10)) == "done flows=3")
        #expect(try process.waitForExit(timeout: .seconds(10)) == .exited(0))
        #expect(throws: SupervisorError.self) {
            try supervisor.start(ProcessLaunch(name: "ghost", executable: "/nonexistent/askrelay-ghost", arguments: []))
        }
    }

    @Test("SIGSTOP and SIGCONT, restart with the same arguments, SIGTERM, and killAll")
    func signalsAndRestart() throws {
        let seen = Mutex<[String]>([])
        let supervisor = ProcessSupervisor { name, line in
            seen.withLock { $0.append("\(name): \(line)") }
        }
        defer { supervisor.killAll() }
        let process = try supervisor.start(ProcessLaunch(name: "w", executable: "/bin/sh", arguments: Self.blocker))
        try process.waitForLine(timeout: .seconds(10))
        let first = try #require(process.pid)
        process.signal(SIGSTOP)
        process.signal(SIGCONT)
        #expect(process.isRunning)
        #expect(throws: SupervisorError.self) { try process.restart() }
        process.signal(SIGTERM, expected: true)
        #expect(try process.waitForExit(timeout: .seconds(10)) == .signaled(SIGTERM))
        #expect(process.incarnations.last?.expectedSignal == SIGTERM)

        try process.restart()
        let line = try process.waitForLine(timeout: .seconds(10))
        let second = try #require(process.pid)
        #expect(second != first)
        #expect(line == "ready pid=\(second)")
        #expect(process.incarnations.count == 2)

        // A stopped process still dies from killAll.
        process.signal(SIGSTOP)
        let other = try supervisor.start(ProcessLaunch(name: "v", executable: "/bin/sh", arguments: Self.blocker))
        try other.waitForLine(timeout: .seconds(10))
        supervisor.killAll()
        #expect(!process.isRunning && !other.isRunning)
        #expect(process.exitStatus == .signaled(SIGKILL))
        let lines = seen.withLock { $0 }
        #expect(lines.contains("w: ready pid=\(first)") && lines.contains("v: ready pid=\(other.pid ?? 0)"))
    }
}
