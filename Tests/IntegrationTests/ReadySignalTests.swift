import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// A supervisor may send SIGTERM the moment a worker prints `ready`. Each worker must then stop as it documents
/// (exit 0), not die of the signal: its handler is installed before anything can print `ready`. The ready line of
/// the limits worker and the parent comes from their connection thread, so this is a race each round can lose.
@Suite("SIGTERM right after the ready line", .serialized)
struct ReadySignalTests {
    static let rounds = 8

    /// A broker without a journal, from BrokerProcessTests' helper.
    func broker(_ directory: TempDirectory) throws -> (RelayProcess, String) {
        try BrokerProcessTests().startBroker(directory, durability: "off")
    }

    @Test("askrelay-limits, askrelay-parent and askrelay-child exit 0 when SIGTERM follows ready at once")
    func workersStopCleanly() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let (broker, endpoint) = try broker(directory)
        defer { broker.kill9() }
        let workers: [(String, [String])] = [
            ("askrelay-limits", ["--data-dir", directory.path + "/limits"]),
            ("askrelay-parent", ["--guardian", "g1@f1"]),
            ("askrelay-child", ["--child", "c1@f1", "--flows", "0", "--duration", "1h"]),
        ]
        for (name, extra) in workers {
            var statuses: [Int32] = []
            for _ in 0..<Self.rounds {
                let worker = try RelayProcess(
                    name,
                    ["--broker", endpoint, "--heartbeat", "200ms"] + extra,
                    logDirectory: directory.path
                )
                defer { worker.kill9() }
                _ = try worker.waitForLine(startingWith: "ready")
                statuses.append(worker.stop(grace: .seconds(10))?.code ?? -1)
            }
            #expect(statuses.allSatisfy { $0 == 0 }, "\(name): exit statuses \(statuses) (15: killed by SIGTERM)")
        }
        #expect(broker.stop(grace: .seconds(10)) == .exited(0))
    }
}
