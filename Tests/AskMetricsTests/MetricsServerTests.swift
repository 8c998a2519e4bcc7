import AskLogging
import AskTestKit
import Foundation
import Synchronization
import Testing

@testable import AskMetrics

#if canImport(Glibc)
    import Glibc
#endif

func statusLine(_ response: String) -> String {
    // "\r\n" is one Character: split on the string.
    response.components(separatedBy: "\r\n").first ?? ""
}

func body(_ response: String) -> String {
    guard let range = response.range(of: "\r\n\r\n") else { return "" }
    return String(response[range.upperBound...])
}

@Suite(.timeLimit(.minutes(1))) struct MetricsServerTests {
    let logger = AskLogger(label: "metrics-test", level: .warning)

    func server(_ limits: MetricsServerLimits = MetricsServerLimits(), page: String = "m 1\n") throws
        -> MetricsServer
    {
        try MetricsServer(endpoint: MetricsEndpoint(host: "127.0.0.1", port: 0), limits: limits, logger: logger) {
            page
        }
    }

    @Test func scrape() throws {
        let server = try server(page: "# TYPE m counter\nm 1\n")
        #expect(server.endpoint.port != 0)
        let response = try HTTPClient.request(server.endpoint.port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(statusLine(response) == "HTTP/1.1 200 OK")
        #expect(response.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
        #expect(response.contains("\r\nContent-Length: 21\r\n"))
        #expect(response.contains("\r\nConnection: close\r\n"))
        #expect(body(response) == "# TYPE m counter\nm 1\n")
        let head = try HTTPClient.request(server.endpoint.port, "HEAD /metrics HTTP/1.0\r\n\r\n")
        #expect(statusLine(head) == "HTTP/1.1 200 OK")
        #expect(body(head) == "")
    }

    @Test func statuses() throws {
        let server = try server()
        let port = server.endpoint.port
        #expect(statusLine(try HTTPClient.request(port, "GET / HTTP/1.1\r\n\r\n")) == "HTTP/1.1 404 Not Found")
        #expect(statusLine(try HTTPClient.request(port, "GET /metricsx HTTP/1.1\r\n\r\n")) == "HTTP/1.1 404 Not Found")
        let post = try HTTPClient.request(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        #expect(statusLine(post) == "HTTP/1.1 405 Method Not Allowed")
        #expect(post.contains("\r\nAllow: GET, HEAD\r\n"))
        let bad = try HTTPClient.request(port, "hello there\r\n\r\n")
        #expect(statusLine(bad) == "HTTP/1.1 400 Bad Request")
        #expect(body(bad).contains("METHOD TARGET HTTP/1.x"))
    }

    @Test func oversizedRequestIs431AndTheServerGoesOn() throws {
        var limits = MetricsServerLimits()
        limits.maxRequestBytes = 1024
        let server = try server(limits)
        let client = try HTTPClient(port: server.endpoint.port)
        // 64 KiB of headers that never end: the server answers after 1 KiB and reads the rest away.
        client.send("GET /metrics HTTP/1.1\r\n" + String(repeating: "X-Junk: 0123456789abcdef\r\n", count: 2600))
        let response = client.readAll()
        #expect(statusLine(response) == "HTTP/1.1 431 Request Header Fields Too Large")
        #expect(body(response).contains("at most 1024 bytes"))
        let next = try HTTPClient.request(server.endpoint.port, "GET /metrics HTTP/1.1\r\n\r\n")
        #expect(statusLine(next) == "HTTP/1.1 200 OK")
    }

    @Test func slowClientDoesNotBlockAScrape() throws {
        var limits = MetricsServerLimits()
        // Past the suite's time limit: the slow client cannot be cut while this test runs.
        limits.timeout = .seconds(600)
        let server = try server(limits)
        let slow = try HTTPClient(port: server.endpoint.port)
        slow.send("GET /metrics HTTP/1.1\r\nHost: ")
        let scrape = try HTTPClient.request(server.endpoint.port, "GET /metrics HTTP/1.1\r\n\r\n")
        #expect(statusLine(scrape) == "HTTP/1.1 200 OK", "the scrape waited for the slow client")
        // The scrape was answered while the slow client was still in the middle of its request: it has received
        // nothing yet, and finishing its request now gets it the page, not a 408.
        #expect(slow.hasNothingYet())
        slow.send("x\r\n\r\n")
        #expect(statusLine(slow.readAll()) == "HTTP/1.1 200 OK")
    }

    @Test func slowClientIsCutAtTheTimeout() throws {
        var limits = MetricsServerLimits()
        limits.timeout = .seconds(2)
        let server = try server(limits)
        let slow = try HTTPClient(port: server.endpoint.port)
        let started = ContinuousClock.now
        slow.send("GET /metrics HTTP/1.1\r\nHost: ")
        // The slow client never finishes: it gets 408 and is closed once its time is up (readAll returns at EOF).
        let cut = slow.readAll()
        #expect(statusLine(cut) == "HTTP/1.1 408 Request Timeout")
        #expect(ContinuousClock.now - started >= .seconds(2))
    }

    @Test func connectionsPastTheLimitGet503AndFreedSlotsServeAgain() throws {
        var limits = MetricsServerLimits()
        limits.maxConnections = 4
        limits.timeout = .seconds(30)
        let server = try server(limits)
        let port = server.endpoint.port
        var held: [HTTPClient] = []
        for _ in 0..<4 {
            let client = try HTTPClient(port: port)
            client.send("GET /metrics HTTP/1.1\r\n")
            held.append(client)
        }
        // The kernel queues connections in order, so the server takes the four above in before this one.
        let refused = try HTTPClient.request(port, "GET /metrics HTTP/1.1\r\n\r\n")
        #expect(statusLine(refused) == "HTTP/1.1 503 Service Unavailable")
        // Finishing one held request (and closing, as `Connection: close` asks) frees its slot.
        held[0].send("\r\n")
        #expect(statusLine(held[0].readAll()) == "HTTP/1.1 200 OK")
        held.removeFirst()
        #expect(statusLine(try HTTPClient.request(port, "GET /metrics HTTP/1.1\r\n\r\n")) == "HTTP/1.1 200 OK")
    }

    @Test func manyConnectionsAtOnce() throws {
        let page = String(repeating: "m 1\n", count: 20_000)
        let server = try server(page: page)
        let port = server.endpoint.port
        // All connected and asking before any response is read: the server holds at most 32 and refuses the rest.
        var clients: [HTTPClient] = []
        for _ in 0..<100 {
            let client = try HTTPClient(port: port)
            client.send("GET /metrics HTTP/1.1\r\n\r\n")
            clients.append(client)
        }
        let results = clients.map { $0.readAll() }
        clients.removeAll()
        let ok = results.filter { statusLine($0) == "HTTP/1.1 200 OK" }
        let busy = results.filter { statusLine($0) == "HTTP/1.1 503 Service Unavailable" }
        #expect(ok.count + busy.count == 100, "\(Set(results.map { statusLine($0) }))")
        #expect(ok.count >= 32)
        #expect(ok.allSatisfy { body($0) == page })
        #expect(statusLine(try HTTPClient.request(port, "GET /metrics HTTP/1.1\r\n\r\n")) == "HTTP/1.1 200 OK")
    }

    @Test func endpointInUseIsAClearError() throws {
        let first = try server()
        #expect {
            _ = try MetricsServer(endpoint: first.endpoint, logger: logger) { "" }
        } throws: { error in
            let text = "\(error)"
            return text.contains("metrics endpoint 127.0.0.1:\(first.endpoint.port): bind failed")
                && text.contains("in use")
        }
    }

    @Test func stopClosesTheEndpoint() throws {
        let server = try server()
        let port = server.endpoint.port
        server.stop()
        server.stop()
        #expect(throws: (any Error).self) { _ = try HTTPClient(port: port) }
    }
}
