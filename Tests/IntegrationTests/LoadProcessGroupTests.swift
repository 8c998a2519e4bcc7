import AskCLI
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// The broker, limits worker and parents `askrelay load` starts die with it however it ends (ServerProcess joins
/// a ProcessGroupGuard's group): a broker that outlived a killed load once held a test suite's pipes for minutes.
@Suite("askrelay load's processes die with it", .timeLimit(.minutes(2)))
struct LoadProcessGroupTests {
    @Test("kill -9 of askrelay load ends the broker, the limits worker and the parents it started")
    func killedLoadLeavesNothing() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let load = try RelayProcess(
            "askrelay",
            [
                "load", "--mode", "flows", "--endpoints", "10", "--families", "4", "--duration", "600s", "--warmup",
                "0s", "--report-dir", directory.path + "/report",
            ],
            logPath: directory.path + "/askrelay.log"
        )
        let pid = try #require(load.pid)
        // The broker, the limits worker and a parent: load starts the flows only once all three are ready.
        var started: [Int32] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while started.count < 3 && load.isRunning && ContinuousClock.now < deadline {
            _ = try? load.wait(timeout: .milliseconds(20))
            started = FlowLoadTests.children(of: pid)
        }
        try #require(started.count >= 3, "load started \(started.count) processes")
        defer { for child in started { kill(child, SIGKILL) } }
        load.signal(SIGKILL)
        _ = try load.wait(timeout: .seconds(30))
        let gone = ContinuousClock.now + .seconds(30)
        while started.contains(where: ProcessState.isAlive) && ContinuousClock.now < gone {
            usleep(20_000)  // allowed: a poll with a deadline (the children are not ours to wait for)
        }
        #expect(started.filter(ProcessState.isAlive).isEmpty, "still running after load's SIGKILL: \(started)")
    }
}
