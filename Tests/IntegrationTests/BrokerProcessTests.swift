import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@Suite("askrelay-broker as a real process", .timeLimit(.minutes(2)), .serialized)
struct BrokerProcessTests {
    func startBroker(_ directory: TempDirectory, durability: String = "batch", endpoint: String = "tcp://127.0.0.1:*")
        throws -> (RelayProcess, String)
    {
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", endpoint, "--data-dir", directory.path + "/data", "--durability", durability,
                "--heartbeat", "200ms",
            ],
            logDirectory: directory.path
        )
        return (broker, try broker.readyEndpoint())
    }

    @Test("kill -9 at any moment loses nothing acknowledged: every acked message is delivered after restart")
    func killNineLosesNothingAcknowledged() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        var (broker, endpoint) = try startBroker(directory)
        defer { broker.kill9() }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: endpoint)
        try client.register(role: .client, ["client/1"])
        var acked: [MessageID] = []
        var sent: [MessageID] = []
        // Keep 50 in flight; kill the broker with SIGKILL once 300 are acknowledged, mid-stream.
        while acked.count < 300 {
            while sent.count - acked.count < 50 {
                sent.append(
                    try client.sendMessage(
                        from: "client/1",
                        to: "echo/offline",
                        kind: "echo",
                        body: Array("payload-\(sent.count)".utf8)
                    )
                )
            }
            guard let message = try client.next(timeout: .seconds(5)) else { throw TestFailure("no ACK within 5 s") }
            if message.command == .ack { acked.append(contentsOf: message.ackIDs) }
        }
        broker.kill9()
        let port = endpoint
        (broker, endpoint) = try startBroker(directory, endpoint: port)
        let echo = try RawPeer(context: try ZMQContext(), endpoint: endpoint)
        try echo.register(role: .echo, ["echo/offline"])
        var delivered: [MessageID] = []
        let ackedSet = Set(acked)
        while !ackedSet.isSubset(of: Set(delivered)) {
            let delivery = try echo.expectDelivery()
            delivered.append(delivery.id!)
            try echo.ack([delivery.id!])
        }
        // Order is kept: the delivered sequence follows the send order.
        let position = Dictionary(uniqueKeysWithValues: sent.enumerated().map { ($1, $0) })
        let order = delivered.compactMap { position[$0] }
        #expect(order == order.sorted(), "delivered in the order sent")
        #expect(Set(delivered).count == delivered.count, "no duplicates within one delivery run")
    }

    /// Eight rounds, each a SIGTERM the moment a session registered: the signal must not be lost while its watcher
    /// arms, and the BYE must leave before the process exits.
    @Test("SIGTERM drains: the broker says BYE to its sessions and exits 0")
    func sigtermDrains() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        for _ in 0..<8 {
            let (broker, endpoint) = try startBroker(directory)
            defer { broker.kill9() }
            let peer = try RawPeer(context: try ZMQContext(), endpoint: endpoint)
            try peer.register(role: .echo, ["echo/1"])
            broker.signal(SIGTERM)
            _ = try peer.expect { $0.command == .bye }
            #expect(broker.stop(grace: .seconds(10)) == .exited(0))
        }
    }

    @Test("a second connection cannot take over a live address, and bad input does not disturb the served one")
    func hijackAndBadInput() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let (broker, endpoint) = try startBroker(directory, durability: "off")
        defer { broker.kill9() }
        let context = try ZMQContext()
        let owner = try RawPeer(context: context, endpoint: endpoint)
        try owner.register(role: .guardian, ["guardian/g1"], family: "f1")
        let thief = try RawPeer(context: context, endpoint: endpoint)
        try thief.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g1", family: "f2")])
        #expect(try thief.expectNack().code == ErrorCode.addressTaken.rawValue)
        try thief.sendFrames([Array("junk".utf8)])
        let junk = try thief.expectNack()
        #expect(junk.code == ErrorCode.badSignature.rawValue, "\(junk)")
        try thief.sendFrames([Wire.signature + [0x42]])
        #expect(try thief.expectNack().code == ErrorCode.unknownCommand.rawValue)
        let client = try RawPeer(context: context, endpoint: endpoint)
        try client.register(role: .client, ["client/1"])
        let id = try client.sendMessage(from: "client/1", to: "guardian/g1", kind: "echo", body: [1])
        try client.expectAck(id)
        #expect(try owner.expectDelivery().id == id)
    }

    @Test("bad usage exits 64 with a reason; a non-loopback endpoint needs --allow-insecure")
    func usage() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        for arguments in [
            ["--window", "zero"], ["--durability", "sometimes"], ["--spin", "fast"], ["--spin", "1s"],
            ["--endpoint", "tcp://0.0.0.0:5999"], ["--bogus"],
        ] {
            let process = try RelayProcess(
                "askrelay-broker",
                arguments + ["--data-dir", directory.path + "/d"],
                logDirectory: directory.path
            )
            #expect(try process.wait(timeout: .seconds(20)).code == 64, "\(arguments)")
            let log = try String(contentsOfFile: process.logPath, encoding: .utf8)
            #expect(log.contains("Usage: askrelay-broker"), "\(arguments): \(log)")
        }
    }

    @Test("the stats endpoint publishes snapshots that askrelay top shows, one line per update into a pipe")
    func statsAndTop() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let stats = "ipc://\(directory.path)/stats.sock"
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory.path + "/data", "--durability", "off",
                "--stats-endpoint", stats,
            ],
            logDirectory: directory.path
        )
        defer { broker.kill9() }
        let endpoint = try broker.readyEndpoint()
        let peer = try RawPeer(context: try ZMQContext(), endpoint: endpoint)
        try peer.register(role: .echo, ["echo/1"])
        let top = try RelayProcess(
            "askrelay",
            ["top", "--stats-endpoint", stats, "--count", "2"],
            logDirectory: directory.path
        )
        defer { top.kill9() }
        let line = try top.waitForLine(startingWith: "broker=")
        #expect(line.contains("sessions=[echo=1]"), "\(line)")
        #expect(try top.wait(timeout: .seconds(20)).code == 0)
        #expect(top.output.filter { $0.hasPrefix("broker=") }.count == 2)
    }

    @Test("askrelay top says clearly when no broker publishes, and exits 69")
    func topWithoutBroker() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let top = try RelayProcess(
            "askrelay",
            ["top", "--stats-endpoint", "ipc://\(directory.path)/nothing.sock", "--timeout", "300ms"],
            logDirectory: directory.path
        )
        #expect(try top.wait(timeout: .seconds(20)).code == 69)
        #expect(try String(contentsOfFile: top.logPath, encoding: .utf8).contains("no statistics"))
    }
}

@Suite("Fuzz regression corpus", .timeLimit(.minutes(1)))
struct FuzzCorpusTests {
    @Test("every input of the seed and regression corpus goes through the parser and decoders without a crash")
    func replayCorpus() throws {
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/corpus").path
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let replay = try RelayProcess("askrelay-fuzz", [corpus], logDirectory: directory.path)
        let line = try replay.waitForLine(startingWith: "replayed")
        #expect(try replay.wait(timeout: .seconds(120)).code == 0)
        let count = Int(line.split(separator: " ")[1]) ?? 0
        #expect(count >= 50, "\(line)")
    }
}

@Suite("CURVE deployment with real processes", .timeLimit(.minutes(1)), .serialized)
struct CurveDeploymentTests {
    @Test("askrelay keys generate, a CURVE broker, and workers that host exactly what their keys allow")
    func keysBrokerWorkers() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let keys = directory.path + "/keys"
        let generate = try RelayProcess(
            "askrelay",
            [
                "keys", "generate", "--out", keys, "--families", "4", "--guardians", "2", "--children", "1",
                "--parent-hosts", "2", "--child-hosts", "2",
            ],
            logDirectory: directory.path
        )
        #expect(try generate.wait(timeout: .seconds(120)).code == 0)
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory.path + "/data", "--durability", "off",
                "--curve-secret-file", keys + "/broker.key", "--principals", keys + "/principals.json",
            ],
            logDirectory: directory.path
        )
        defer { broker.kill9() }
        let endpoint = try broker.readyEndpoint()
        let parent = try RelayProcess(
            "askrelay-parent",
            ["--broker", endpoint, "--curve-key", keys + "/parent-1.key", "--broker-key", keys + "/broker.public"],
            logDirectory: directory.path
        )
        defer { parent.kill9() }
        // parent-1 serves families f1 and f3, two guardians each.
        #expect(try parent.waitForLine(startingWith: "ready") == "ready guardians=4")
        let child = try RelayProcess(
            "askrelay-child",
            [
                "--broker", endpoint, "--curve-key", keys + "/child-2.key", "--broker-key", keys + "/broker.public",
                "--flows", "1", "--stay",
            ],
            logDirectory: directory.path
        )
        defer { child.kill9() }
        #expect(try child.waitForLine(startingWith: "ready") == "ready children=2")
        // A worker whose key does not allow what it claims is refused before it connects (its key file lists
        // what it may serve), exits 64 and never gets ready.
        let impostor = try RelayProcess(
            "askrelay-parent",
            [
                "--broker", endpoint, "--curve-key", keys + "/parent-2.key", "--broker-key", keys + "/broker.public",
                "--guardian", "g5-1@f5",
            ],
            logDirectory: directory.path
        )
        defer { impostor.kill9() }
        #expect(try impostor.wait(timeout: .seconds(10)).code == 64)
        #expect(!impostor.output.contains { $0.hasPrefix("ready") })
        #expect(try String(contentsOfFile: impostor.logPath, encoding: .utf8).contains("not 'guardian/g5-1'"))
    }
}
