import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// Tests/watchdog.sh, which bounds make test's `swift test` (docs/contributing.md, "When a test run hangs"): a
/// command that ends keeps its status and output; one that runs past the bound has its threads backtraced and its
/// whole process group killed.
@Suite("make test's watchdog", .serialized)
struct WatchdogTests {
    static let script = Repository.root.appendingPathComponent("Tests/watchdog.sh").path

    @Test("a command that ends within the bound keeps its exit status and output")
    func passesThrough() {
        let run = Tool.run(Self.script, ["600", "sh", "-c", "echo out; echo err >&2; exit 3"])
        #expect(run.status == 3)
        #expect(run.stdout == "out\n")
        #expect(run.stderr == "err\n")
    }

    @Test("bad usage exits 64 and says what it takes")
    func usage() {
        for arguments in [["0", "true"], ["ten", "true"], ["600"]] {
            let run = Tool.run(Self.script, arguments)
            #expect(run.status == 64, "\(arguments)")
            #expect(run.stderr.contains("usage: "), "\(arguments): \(run.stderr)")
        }
    }

    @Test("past the bound: the processes are listed, a project process is backtraced, the group is killed, exit 124")
    func hungCommand() throws {
        let folder = TempDirectory(prefix: "askrelay-watchdog")
        defer { folder.cleanup() }
        let broker = Executables.built.appendingPathComponent("askrelay-broker").path
        let pidFile = folder.appending("sleep.pid")
        // A broker in the foreground (a project process: backtraced) and a sleep in the background of the same
        // group, whose pid is written down so that the test can see it was killed too.
        let command = """
            sleep 600 & echo $! > \(pidFile)
            exec \(broker) --endpoint ipc://\(folder.path)/broker.sock --data-dir \(folder.path)/data \
            --stats-endpoint ipc://\(folder.path)/stats.sock --log-level error
            """
        let run = Tool.run(Self.script, ["3", "sh", "-c", command])
        #expect(run.status == 124, "\(run.stderr)")
        #expect(run.stderr.contains("still runs after 3 s"), "\(run.stderr)")
        #expect(run.stderr.contains("watchdog: backtraces of pid"), "\(run.stderr)")
        // gdb is among make test's packages; each thread of the broker is named with its frames.
        if Tool.find("gdb") != nil {
            #expect(run.stderr.contains("Thread 1 "), "\(run.stderr)")
            #expect(run.stderr.contains("#0 "), "\(run.stderr)")
        }
        #expect(run.stderr.contains("was killed after 3 s"), "\(run.stderr)")
        let pidText = try String(contentsOfFile: pidFile, encoding: .utf8)
        let sleeper = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
        // Killed with its group; orphaned, it may still wait to be reaped by whoever adopted it.
        #expect(
            kill(sleeper, 0) != 0 || ProcessState.isZombie(sleeper),
            "the background sleep \(sleeper) of the hung command still runs"
        )
    }
}
