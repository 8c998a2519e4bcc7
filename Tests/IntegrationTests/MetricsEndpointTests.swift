import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// Scrapes until `done` holds for the page (the broker publishes every 250 ms), or fails after `timeout`.
func scrape(_ port: UInt16, until done: (String) -> Bool, timeout: Duration = .seconds(15)) throws -> String {
    let deadline = ContinuousClock.now + timeout
    var page = ""
    repeat {
        page = try scrape(port)
        if done(page) { return page }
    } while ContinuousClock.now < deadline
    throw TestFailure("the page never showed what was expected; last page:\n\(page)")
}

/// The port of `metrics=HOST:PORT` in a ready line.
func metricsPort(_ line: String) throws -> UInt16 {
    guard let metrics = ReadyLine(parsing: line)?.metrics,
        let port = metrics.split(separator: ":").last.flatMap({ UInt16($0) })
    else { throw TestFailure("no metrics=HOST:PORT in '\(line)'") }
    return port
}

@Suite(.serialized, .timeLimit(.minutes(3)))
struct MetricsEndpointTests {
    @Test("broker, limits, parent and child serve /metrics; askrelay top still reads the stats endpoint")
    func everyProcessServesMetrics() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let stats = "ipc://\(directory.path)/stats.sock"
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory.path + "/broker", "--stats-endpoint", stats,
                "--metrics-endpoint", "127.0.0.1:0",
            ],
            logDirectory: directory.path
        )
        defer { broker.stop(grace: .seconds(10)) }
        let ready = try broker.waitForLine(startingWith: "ready")
        let brokerPort = try metricsPort(ready)
        let endpoint = try broker.readyEndpoint()
        // Default heartbeats (1 s, 3 missed): a loaded machine does not make the child reconnect.
        let common = ["--broker", endpoint, "--metrics-endpoint", "127.0.0.1:0"]
        let limits = try RelayProcess(
            "askrelay-limits",
            common + ["--data-dir", directory.path + "/limits"],
            logDirectory: directory.path
        )
        defer { limits.stop(grace: .seconds(10)) }
        let limitsPort = try metricsPort(try limits.waitForLine(startingWith: "ready"))
        let parent = try RelayProcess(
            "askrelay-parent",
            common + ["--guardian", "g1@f1", "--policy", "approve", "--think", "fixed:10ms"],
            logDirectory: directory.path
        )
        defer { parent.stop(grace: .seconds(10)) }
        let parentPort = try metricsPort(try parent.waitForLine(startingWith: "ready"))
        let child = try RelayProcess(
            "askrelay-child",
            common + [
                "--families", "1", "--flows", "4", "--think", "10ms", "--cancel-probability", "0", "--known-ratio", "0",
                "--stay",
            ],
            logDirectory: directory.path
        )
        defer { child.stop(grace: .seconds(10)) }
        let childPort = try metricsPort(try child.waitForLine(startingWith: "ready children=1"))
        _ = try child.waitForLine(startingWith: "done flows=4", timeout: .seconds(60))

        let childPage = try scrape(childPort)
        #expect(sample(childPage, #"askrelay_child_flows_total{outcome="approved"}"#) == 4, "\(childPage)")
        #expect(sample(childPage, #"askrelay_child_flow_seconds_bucket{le="+Inf"}"#) == 4)
        #expect(sample(childPage, "askrelay_child_flow_seconds_count") == 4)
        #expect(sample(childPage, "askrelay_child_ask_admitted_seconds_count") == 4)
        #expect(sample(childPage, "askrelay_child_send_response_seconds_count") == 4)
        #expect((sample(childPage, "askrelay_worker_sends_acknowledged_total") ?? 0) >= 8)
        #expect(sample(childPage, "askrelay_worker_registrations_total") == 1)
        #expect(sample(childPage, "askrelay_worker_reconnects_total") == 0)

        // The child is done once its 4th response arrived; the parent may read the broker's ACK of that answer, and
        // the limits worker the approval notice, a moment later: wait for the pages to show them.
        let parentPage = try scrape(parentPort) { page in
            (sample(page, "askrelay_worker_sends_acknowledged_total") ?? 0) >= 4
        }
        #expect((sample(parentPage, "askrelay_worker_deliveries_total") ?? 0) >= 4, "\(parentPage)")
        let limitsPage = try scrape(limitsPort) { page in (sample(page, "askrelay_worker_deliveries_total") ?? 0) >= 4 }
        #expect(sample(limitsPage, "askrelay_worker_registrations_total") == 1, "\(limitsPage)")

        let brokerPage = try scrape(brokerPort) { page in
            (sample(page, #"askrelay_broker_ledger_entries{state="answered"}"#) ?? 0) >= 4
        }
        #expect((sample(brokerPage, #"askrelay_broker_messages_routed_total{kind="ask"}"#) ?? 0) >= 4, "\(brokerPage)")
        #expect(sample(brokerPage, #"askrelay_broker_sessions{role="child"}"#) == 1)
        #expect(sample(brokerPage, #"askrelay_broker_sessions{role="guardian"}"#) == 1)
        #expect((sample(brokerPage, "askrelay_broker_sessions_opened_total") ?? 0) >= 3)
        #expect((sample(brokerPage, "askrelay_broker_routing_latency_seconds_count") ?? 0) >= 8)
        #expect((sample(brokerPage, "askrelay_broker_journal_commit_seconds_count") ?? 0) >= 4)
        #expect(
            sample(brokerPage, #"askrelay_broker_routing_latency_seconds_bucket{le="+Inf"}"#)
                == sample(brokerPage, "askrelay_broker_routing_latency_seconds_count")
        )

        let top = try RelayProcess(
            "askrelay",
            ["top", "--stats-endpoint", stats, "--count", "1"],
            logDirectory: directory.path
        )
        defer { top.kill9() }
        #expect(try top.wait(timeout: .seconds(20)).code == 0)
        #expect(top.output.contains { $0.contains("sessions") }, "\(top.output)")

        // A session that ends (the child's BYE) leaves the sessions gauge; the others stay.
        #expect(child.stop(grace: .seconds(10)) == .exited(0))
        let afterChild = try scrape(brokerPort) { page in
            sample(page, #"askrelay_broker_sessions{role="child"}"#) == 0
        }
        #expect(sample(afterChild, #"askrelay_broker_sessions{role="guardian"}"#) == 1, "\(afterChild)")
        #expect(sample(afterChild, #"askrelay_broker_sessions{role="limits"}"#) == 1)
    }

    @Test("slow and idle HTTP clients hold up neither a scrape nor the broker's routing")
    func slowClientsStallNothing() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--durability", "off", "--data-dir", directory.path + "/broker",
                "--metrics-endpoint", "127.0.0.1:0",
            ],
            logDirectory: directory.path
        )
        defer { broker.stop(grace: .seconds(10)) }
        let port = try metricsPort(try broker.waitForLine(startingWith: "ready"))
        let endpoint = try broker.readyEndpoint()
        let context = try ZMQContext()
        // The broker cuts a held client 5 s after it connected (408). An attempt shows something only when every
        // held client is still held, unanswered, after the message below was routed: then the scrape, the refusal
        // and the routing all happened while they held their slots. An attempt that a loaded machine made too slow
        // for that is made again; a broker whose routing waits for them never shows it, and the suite's time limit
        // fails the test.
        var attempts = 0
        var shown = false
        while !shown && !Task.isCancelled {
            attempts += 1
            // 16 clients that stop in the middle of their request line and 15 that connect and send nothing: one
            // slot of 32 is left, and a scrape takes it.
            var held: [HTTPClient] = []
            for index in 0..<31 {
                let client = try HTTPClient(port: port)
                if index < 16 { client.send("GET /metr") }
                held.append(client)
            }
            let scraped = try scrape(port)
            // With every slot held, a scrape is refused rather than left waiting.
            held.append(try HTTPClient(port: port))
            let refused = try HTTPClient.request(port, "GET /metrics HTTP/1.1\r\n\r\n")
            let owner = try RawPeer(context: context, endpoint: endpoint)
            try owner.register(role: .guardian, ["guardian/g\(attempts)"], family: "f1")
            let client = try RawPeer(context: context, endpoint: endpoint)
            try client.register(role: .client, ["client/\(attempts)"])
            let id = try client.sendMessage(
                from: "client/\(attempts)",
                to: "guardian/g\(attempts)",
                kind: "echo",
                body: [1]
            )
            try client.expectAck(id)
            let delivery = try owner.expectDelivery(kind: "echo")
            guard held.allSatisfy({ $0.hasNothingYet() }) else { continue }
            shown = true
            #expect(scraped.contains("askrelay_broker_sessions"))
            #expect(refused.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"), "\(refused.prefix(100))")
            #expect(delivery.id == id)
        }
        #expect(shown, "no attempt routed while the clients held every slot (\(attempts) attempts)")
        let page = try scrape(port) { page in
            (sample(page, #"askrelay_broker_messages_routed_total{kind="echo"}"#) ?? 0) >= Double(attempts)
        }
        #expect(sample(page, "askrelay_broker_routing_latency_seconds_count") == Double(attempts), "\(page)")
    }

    @Test("a bad --metrics-endpoint is bad usage; one in use stops the process before it serves")
    func badEndpoints() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        for (executable, extra) in [
            ("askrelay-broker", ["--data-dir", directory.path + "/b", "--endpoint", "tcp://127.0.0.1:*"]),
            ("askrelay-limits", ["--data-dir", directory.path + "/l"]), ("askrelay-parent", ["--guardian", "g1@f1"]),
            ("askrelay-child", ["--child", "c1@f1"]),
        ] {
            let bad = try RelayProcess(
                executable,
                extra + ["--metrics-endpoint", "http://127.0.0.1:9464"],
                logDirectory: directory.path
            )
            defer { bad.kill9() }
            #expect(try bad.wait(timeout: .seconds(20)).code == 64, "\(executable)")
            let log = try String(contentsOfFile: bad.logPath, encoding: .utf8)
            #expect(log.contains("option '--metrics-endpoint': 'http://127.0.0.1:9464' is a URL"), "\(log)")
        }
        // A port in use: the first broker holds it.
        let first = try RelayProcess(
            "askrelay-broker",
            ["--endpoint", "tcp://127.0.0.1:*", "--durability", "off", "--metrics-endpoint", "127.0.0.1:0"],
            logDirectory: directory.path
        )
        defer { first.stop(grace: .seconds(10)) }
        let port = try metricsPort(try first.waitForLine(startingWith: "ready"))
        for (executable, extra) in [
            ("askrelay-broker", ["--endpoint", "tcp://127.0.0.1:*", "--durability", "off"]),
            ("askrelay-parent", ["--guardian", "g1@f1"]),
        ] {
            let second = try RelayProcess(
                executable,
                extra + ["--metrics-endpoint", "127.0.0.1:\(port)"],
                logDirectory: directory.path
            )
            defer { second.kill9() }
            #expect(try second.wait(timeout: .seconds(20)).code == 69, "\(executable)")
            let log = try String(contentsOfFile: second.logPath, encoding: .utf8)
            #expect(log.contains("metrics endpoint 127.0.0.1:\(port): bind failed: Address already in use"), "\(log)")
            #expect(!second.output.contains { $0.hasPrefix("ready") })
        }
    }
}
