import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@Suite("the broker's log cannot be forged or flooded by a peer", .timeLimit(.minutes(2)), .serialized)
struct LogInjectionTests {
    static let forged = "2020-01-01T00:00:00.000Z error askrelay-broker: forged"

    /// A HELLO with any worker name and claims, as a hostile peer would send it.
    static func hello(worker: String, addresses: [String]) -> Multipart {
        let hello = Hello(
            role: .guardian,
            worker: worker,
            endpoints: addresses.map { EndpointClaim(address: $0, family: "f1") },
            window: nil,
            carriedAcks: nil
        )
        var out = Multipart()
        WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &out)
        return out
    }

    @Test("newlines, ANSI escapes and 1 MB names stay inside one bounded line each; repeated refusals are capped")
    func hostilePeers() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory.path + "/data", "--durability", "off",
                "--log-level", "info",
            ],
            logDirectory: directory.path
        )
        defer { broker.kill9() }
        let endpoint = try broker.readyEndpoint()
        let context = try ZMQContext()

        // A worker name and an address that try to end the line, start a forged one and drive the terminal.
        let injector = try RawPeer(context: context, endpoint: endpoint)
        let evil = "x\n\(Self.forged)\r\n\u{1B}[2J\u{1B}[31mred\\\"q\u{202E}"
        try injector.send(Self.hello(worker: evil, addresses: ["guardian/\(evil)"]))
        _ = try injector.expectNack()
        try injector.send(Self.hello(worker: evil, addresses: ["guardian/g-evil"]))
        _ = try injector.expect { $0.command == .welcome }

        // A name of a megabyte (the HELLO body limit is 1 MiB), registered, then said goodbye.
        let big = try RawPeer(context: context, endpoint: endpoint)
        try big.send(Self.hello(worker: String(repeating: "n", count: 1_000_000), addresses: ["guardian/g-big"]))
        _ = try big.expect { $0.command == .welcome }
        try big.bye()

        // One peer repeating bad input 500 times: each is refused, but only a few are logged.
        let flooder = try RawPeer(context: context, endpoint: endpoint)
        let floodStarted = ContinuousClock.now
        for _ in 0..<500 { try flooder.sendFrames([Wire.signature + [0x42]]) }
        var refusals = 0
        while refusals < 500 {
            guard let reply = try flooder.next(timeout: .seconds(10)) else { break }
            if reply.command == .nack { refusals += 1 }
        }
        #expect(refusals == 500, "every bad frame is still refused")
        // At most 10 lines in each 10-second window (one window unless this machine is very slow).
        let windows = Int((ContinuousClock.now - floodStarted).components.seconds / 10) + 1

        broker.signal(SIGTERM)
        #expect(try broker.wait(timeout: .seconds(20)).code == 0)
        let log = try Data(contentsOf: URL(fileURLWithPath: broker.logPath))
        #expect(!log.contains(0x1B), "an ESC byte reached the log")
        let lines = String(decoding: log, as: UTF8.self)
            .split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        let shape = try Regex(
            #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (trace|debug|info|notice|warning|error|critical) askrelay-broker: "#
        )
        for line in lines {
            #expect(line.prefixMatch(of: shape) != nil, "not a log line: \(line.prefix(200))")
            #expect(!line.hasPrefix(Self.forged), "a forged line: \(line.prefix(200))")
            #expect(!line.contains("\r"), "a carriage return in: \(line.prefix(200))")
            #expect(line.utf8.count <= 8192, "a line of \(line.utf8.count) bytes: \(line.prefix(200))")
        }
        // The injected text is there, escaped, in the lines about the injector.
        let escaped = #"x\n2020-01-01T00:00:00.000Z error askrelay-broker: forged\r\n\u{1B}[2J"#
        #expect(lines.contains { $0.contains(escaped) })
        let unknownCommand = lines.filter { $0.contains("refused input") && $0.contains("code=unknown-command") }
        #expect(
            !unknownCommand.isEmpty && unknownCommand.count <= 10 * windows,
            "\(unknownCommand.count) refusal lines for one peer in \(windows) window(s)"
        )
    }
}
