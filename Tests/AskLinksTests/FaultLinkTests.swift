import AskLinks
import AskTestKit
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The relay alone, with plain blocking sockets on both sides: a "broker" that listens, a "process" that connects
/// to the link.
@Suite("FaultLink with plain sockets", .serialized, .timeLimit(.minutes(1)))
struct FaultLinkTests {
    @Test("without a fault every byte passes, in order, both ways; counters add up", arguments: ["tcp", "ipc"])
    func bytesAndOrder(_ transport: String) async throws {
        let broker = try Listener(ipc: transport == "ipc")
        defer { broker.close() }
        let link = try FaultLink(name: "plain", upstream: broker.endpoint)
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }

        let toBroker = pattern(1 << 20, seed: 7)
        let fromBroker = pattern(300_000, seed: 11)
        // Both ways at once: a writer thread each, so neither side blocks on a full buffer.
        let writers = [
            Thread { process.write(toBroker) },
            Thread { upstream.write(fromBroker) },
        ]
        for writer in writers { writer.start() }
        let (got, back) = try await blocking {
            (try upstream.read(count: toBroker.count), try process.read(count: fromBroker.count))
        }
        #expect(got == toBroker)
        #expect(back == fromBroker)
        #expect(await link.wait { $0.bytesToBroker == toBroker.count && $0.bytesFromBroker == fromBroker.count })
        let counters = link.counters
        #expect(counters.accepted == 1 && counters.open == 1 && counters.resets == 0, "\(counters)")
        #expect(counters.heldToBroker == 0 && counters.heldFromBroker == 0)
        // A FIN passes too: the broker reads the end of the stream.
        process.shutdownWrite()
        #expect(try await blocking { try upstream.read(count: 1, allowingEnd: true) }.isEmpty)
    }

    @Test("a one-way partition holds that way's bytes, the other way flows; heal releases them in order")
    func oneWayHoldAndRelease() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let lines = Mutex<[String]>([])
        let link = try FaultLink(name: "oneway", upstream: broker.endpoint) { line in lines.withLock { $0.append(line) }
        }
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }

        link.partition(.toBroker)
        process.write(Array("held-1 ".utf8))
        process.write(Array("held-2".utf8))
        // Positive evidence: the link has read the bytes and delivered none; the other way still flows.
        #expect(await link.wait { $0.readToBroker == 13 })
        upstream.write(Array("free".utf8))
        #expect(try await blocking { try process.read(count: 4) } == Array("free".utf8))
        #expect(link.counters.bytesToBroker == 0)
        #expect(!upstream.hasInput())
        link.heal()
        #expect(try await blocking { try upstream.read(count: 13) } == Array("held-1 held-2".utf8))

        // The same from the broker.
        link.partition(.fromBroker)
        upstream.write(Array("late".utf8))
        #expect(await link.wait { $0.readFromBroker == 8 })  // "free", then "late"
        process.write(Array("ping".utf8))
        #expect(try await blocking { try upstream.read(count: 4) } == Array("ping".utf8))
        #expect(link.counters.bytesFromBroker == 4)  // only "free"
        #expect(!process.hasInput())
        link.heal()
        #expect(try await blocking { try process.read(count: 4) } == Array("late".utf8))
        #expect(
            lines.withLock { $0 } == [
                "link oneway: partition toBroker starts until healed", "link oneway: partition toBroker ends (healed)",
                "link oneway: partition fromBroker starts until healed",
                "link oneway: partition fromBroker ends (healed)",
            ]
        )
    }

    @Test("bytes in the link when a partition starts are held too: a delayed chunk that falls due is not let through")
    func inFlightBytesAreHeld() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "inflight", upstream: broker.endpoint)
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }

        link.delay(.seconds(60), direction: .toBroker)
        process.write(Array("in flight".utf8))
        #expect(await link.wait { $0.readToBroker == 9 })
        link.partition(.toBroker)
        link.heal(.delay(.seconds(60), .toBroker))  // the chunk is due now, but the partition holds it
        #expect(link.faults == [.partition(.toBroker)])
        // Positive evidence that the link's thread went round after the heal: a byte from the broker passed.
        upstream.write([1])
        #expect(try await blocking { try process.read(count: 1) } == [1])
        #expect(link.counters.bytesToBroker == 0)
        #expect(!upstream.hasInput())
        link.heal()
        #expect(try await blocking { try upstream.read(count: 9) } == Array("in flight".utf8))
    }

    @Test("a delay holds every chunk at least that long, with jitter, and keeps their order")
    func delayLowerBound() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "delay", upstream: broker.endpoint)
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }

        link.delay(.milliseconds(100), jitter: .milliseconds(30), direction: .both)
        let sent = ContinuousClock.now
        for index in 0..<20 { process.write([UInt8(index)]) }
        let got = try await blocking { try upstream.read(count: 20) }
        let toBroker = ContinuousClock.now - sent
        #expect(got == (0..<20).map { UInt8($0) })
        #expect(toBroker >= .milliseconds(100), "\(toBroker)")

        let back = ContinuousClock.now
        upstream.write(Array("pong".utf8))
        #expect(try await blocking { try process.read(count: 4) } == Array("pong".utf8))
        let fromBroker = ContinuousClock.now - back
        #expect(fromBroker >= .milliseconds(100), "\(fromBroker)")

        // For a duration: the fault ends by itself.
        link.heal()
        link.delay(.milliseconds(50), for: .milliseconds(200))
        #expect(link.faults.count == 1)
        #expect(await link.wait { _ in link.faults.isEmpty })
    }

    @Test("reset sends RST to both peers (ECONNRESET) and the link accepts new connections at once")
    func resetGivesECONNRESET() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "reset", upstream: broker.endpoint)
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }
        process.write([42])
        #expect(try await blocking { try upstream.read(count: 1) } == [42])

        #expect(link.reset() == 1)
        #expect(try await blocking { process.readError() } == ECONNRESET)
        #expect(try await blocking { upstream.readError() } == ECONNRESET)
        #expect(link.counters.resets == 1 && link.counters.open == 0)

        let again = try Peer(connectingTo: link.endpoint)
        defer { again.close() }
        let second = try broker.accept()
        defer { second.close() }
        again.write([7])
        #expect(try await blocking { try second.read(count: 1) } == [7])
        #expect(link.counters.accepted == 2)
    }

    @Test("a partition both ways: a new connection gets no upstream until healed; its bytes then arrive")
    func partitionDefersTheUpstream() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "both", upstream: broker.endpoint)
        defer { link.stop() }
        link.partition()
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        process.write(Array("hello".utf8))
        // The link accepted it and read its bytes; the broker has no connection waiting.
        #expect(await link.wait { $0.accepted == 1 && $0.readToBroker == 5 })
        #expect(!broker.hasPending())
        link.heal()
        let upstream = try broker.accept()
        defer { upstream.close() }
        #expect(try await blocking { try upstream.read(count: 5) } == Array("hello".utf8))
    }

    @Test("a stall reads nothing and delivers nothing, still accepts connections; heal lets everything through")
    func stall() async throws {
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "stall", upstream: broker.endpoint)
        defer { link.stop() }
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }

        link.stall()
        process.write(Array("stuck".utf8))
        upstream.write(Array("also".utf8))
        // Positive evidence that the link's thread runs: it accepts a second connection and connects it upstream.
        let other = try Peer(connectingTo: link.endpoint)
        defer { other.close() }
        let otherUpstream = try broker.accept()
        defer { otherUpstream.close() }
        #expect(await link.wait { $0.accepted == 2 })
        #expect(link.counters.readToBroker == 0 && link.counters.readFromBroker == 0)
        #expect(!upstream.hasInput() && !process.hasInput())
        link.heal()
        #expect(try await blocking { try upstream.read(count: 5) } == Array("stuck".utf8))
        #expect(try await blocking { try process.read(count: 4) } == Array("also".utf8))
    }

    @Test("a broker that is down: the process's connection is reset, counted as refused; stop closes the link")
    func refusedAndStopped() async throws {
        let broker = try Listener()
        let endpoint = broker.endpoint
        broker.close()
        let link = try FaultLink(name: "refused", upstream: endpoint)
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        #expect(try await blocking { process.readError() } == ECONNRESET)
        // The link publishes its counters after it reset the connection: wait, not read.
        #expect(await link.wait { $0.refused == 1 })
        link.stop()
        #expect(throws: (any Error).self) { try Peer(connectingTo: link.endpoint) }
    }
}

/// Deterministic bytes.
func pattern(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed &* 6_364_136_223_846_793_005 &+ 1
    return (0..<count).map { _ in
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return UInt8(truncatingIfNeeded: state >> 33)
    }
}

/// A listening socket standing in for the broker (blocking accept, with a deadline).
final class Listener: Sendable {
    let fd: Int32
    let endpoint: String
    let path: String?
    /// The folder of an ipc listener's socket file, removed with it.
    let folder: TempDirectory?

    init(ipc: Bool = false) throws {
        if ipc {
            let folder = TempDirectory(prefix: "askrelay-link")
            self.folder = folder
            let path = folder.appending("listener.ipc")
            self.path = path
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            self.fd = fd
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let bytes = Array(path.utf8)
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard bound == 0, listen(fd, 16) == 0 else { throw TestFailure("ipc listen: \(errno)") }
            endpoint = "ipc://\(path)"
        } else {
            path = nil
            folder = nil
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            self.fd = fd
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
                }
            }
            guard bound else { throw TestFailure("tcp listen: \(errno)") }
            endpoint = "tcp://127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
        }
    }

    /// Whether a connection waits to be accepted (poll, no wait).
    func hasPending() -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) > 0
    }

    func accept(timeout: Duration = .seconds(10)) throws -> Peer {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, millis(timeout)) > 0 else {
            throw TestFailure("no connection within \(timeout)")
        }
        let peer = Glibc.accept(fd, nil, nil)
        guard peer >= 0 else { throw TestFailure("accept: \(errno)") }
        return Peer(fd: peer)
    }

    func close() {
        Glibc.close(fd)
        if let path { unlink(path) }
        folder?.cleanup()
    }
}

/// One end of a connection, blocking, with deadlines on reads.
final class Peer: Sendable {
    let fd: Int32

    init(fd: Int32) { self.fd = fd }

    init(connectingTo endpoint: String) throws {
        guard endpoint.hasPrefix("tcp://"), let colon = endpoint.lastIndex(of: ":"),
            let port = UInt16(endpoint[endpoint.index(after: colon)...])
        else { throw TestFailure("not a tcp endpoint: \(endpoint)") }
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let code = errno
            Glibc.close(fd)
            throw TestFailure("connect \(endpoint): errno \(code)")
        }
    }

    func write(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if count <= 0 { return }
            offset += count
        }
    }

    /// Exactly `count` bytes (fewer only at the end of the stream with `allowingEnd`), within `timeout`.
    func read(count: Int, allowingEnd: Bool = false, timeout: Duration = .seconds(10)) throws -> [UInt8] {
        var result: [UInt8] = []
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while result.count < count {
            let left = deadline - ContinuousClock.now
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard left > .zero, poll(&entry, 1, max(1, millis(left))) > 0 else {
                throw TestFailure("read \(result.count) of \(count) bytes within \(timeout)")
            }
            let got = Glibc.read(fd, &buffer, min(buffer.count, count - result.count))
            if got == 0 {
                if allowingEnd { return result }
                throw TestFailure("end of stream after \(result.count) of \(count) bytes")
            }
            if got < 0 { throw TestFailure("read: errno \(errno)") }
            result += buffer[0..<got]
        }
        return result
    }

    /// The errno of the first read that fails (0 when the stream ended cleanly), within 10 s.
    func readError() -> Int32 {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 1000) > 0 else { continue }
            let got = Glibc.read(fd, &buffer, buffer.count)
            if got < 0 { return errno }
            if got == 0 { return 0 }
        }
        return -1
    }

    /// Whether bytes wait to be read (poll, no wait).
    func hasInput() -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) > 0
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    func close() { Glibc.close(fd) }
}

/// Whole milliseconds of `duration`, for poll.
func millis(_ duration: Duration) -> Int32 {
    let (seconds, attoseconds) = duration.components
    return Int32(seconds * 1000 + attoseconds / 1_000_000_000_000_000)
}
