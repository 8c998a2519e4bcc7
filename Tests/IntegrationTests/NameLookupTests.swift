import AskAgents
import AskRelayProcesses
import AskTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A name server that never answers: a UDP socket on port 53 of a loopback address of its own, noting the name of
/// each question it is asked. A resolver sent to it waits out its whole timeout, as behind a DNS server that hangs.
final class SilentNameServer: Sendable {
    let address: String
    /// Each question's name (lowercased), as it arrives.
    let asked = EventBoard<String>()
    private let descriptor: Int32
    private let stopping = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)

    /// Binds the first free `127.0.0.<n>:53` of `n` in 100...199 and starts listening.
    /// - Throws: ``ProcessFailure`` when none can be bound (not root, or every one taken).
    init() throws {
        let socketDescriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard socketDescriptor >= 0 else { throw ProcessFailure("socket(): errno \(errno)") }
        var bound: String?
        for host in 100...199 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(53).bigEndian
            address.sin_addr.s_addr = (UInt32(127) << 24 | UInt32(host)).bigEndian
            let status = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if status == 0 {
                bound = "127.0.0.\(host)"
                break
            }
        }
        guard let bound else {
            close(socketDescriptor)
            throw ProcessFailure("no 127.0.0.<100...199>:53 could be bound for a silent name server (errno \(errno))")
        }
        address = bound
        descriptor = socketDescriptor
        let thread = Thread { [self] in listen() }
        thread.name = "silent-dns"
        thread.start()
    }

    /// How many questions for `name` arrived so far.
    func questions(for name: String) -> Int { asked.events.filter { $0 == name.lowercased() }.count }

    /// Stops listening and closes the socket.
    func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        ended.wait()
        close(descriptor)
    }

    private func listen() {
        var buffer = [UInt8](repeating: 0, count: 1500)
        while !stopping.load(ordering: .relaxed) {
            var poll = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard Glibc.poll(&poll, 1, 100) > 0 else { continue }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count > 0, let name = Self.questionName(buffer[..<count]) { asked.append(name.lowercased()) }
        }
        ended.signal()
    }

    /// The name a DNS query asks about: its labels after the 12-byte header.
    static func questionName(_ packet: ArraySlice<UInt8>) -> String? {
        var index = packet.startIndex + 12
        var labels: [String] = []
        while index < packet.endIndex {
            let length = Int(packet[index])
            if length == 0 { return labels.joined(separator: ".") }
            guard index + 1 + length <= packet.endIndex else { return nil }
            labels.append(String(decoding: packet[(index + 1)..<(index + 1 + length)], as: UTF8.self))
            index += 1 + length
        }
        return nil
    }
}

/// A worker's connections to different brokers run on I/O threads of their own (docs/workers.md, "Connections"):
/// libzmq resolves a `tcp://` host name on the connection's I/O thread, blocking, so with one thread a broker whose
/// name does not resolve (a DNS server that stopped answering) would stall the worker's connections to every other
/// broker as well.
@Suite("name lookups: a hanging one stalls only its own connection", .timeLimit(.minutes(3)), .serialized)
struct NameLookupTests {
    static let silentName = "silent.askrelay.test"

    static let unavailableReason: String? = {
        if geteuid() != 0 { return "not root: the test binds port 53 and mounts a resolv.conf of its own" }
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") { return "no /usr/bin/unshare" }
        return nil
    }()

    static let notPossible = Comment(rawValue: "needs root and unshare(1): \(unavailableReason ?? "available")")

    @Test("a DNS question is read for its name, labels after the header")
    func questionNameIsRead() {
        let header = [UInt8](repeating: 0, count: 12)
        let question: [UInt8] = [6] + Array("silent".utf8) + [4] + Array("test".utf8) + [0, 0, 1, 0, 1]
        #expect(SilentNameServer.questionName((header + question)[...]) == "silent.test")
        #expect(SilentNameServer.questionName((header + [9, 65])[...]) == nil, "a label past the end")
    }

    @Test(
        "a parent whose other shard's broker name never resolves answers its own shard's questions during the lookup",
        .enabled(if: unavailableReason == nil, notPossible)
    )
    func hangingLookupStallsOnlyItsConnection() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path
        let dns = try SilentNameServer()
        defer { dns.stop() }
        // 30 s per try, 5 tries, one question at a time: the lookup of b1's name hangs 150 s before it fails (and
        // then starts again), and its first question is alone for 30 s.
        let resolv = path + "/resolv.conf"
        try "nameserver \(dns.address)\noptions timeout:30 attempts:5 single-request\n".write(
            toFile: resolv,
            atomically: true,
            encoding: .utf8
        )

        // b0 serves; b1's name is asked of the silent server. Of b0 and b1, f3's shard is b0, f1's b1 (ShardTests).
        let name = Self.silentName
        let list = "b0=ipc://\(path)/b0.sock,b1=tcp://\(name):5556"
        var processes: [RelayProcess] = []
        defer { for process in processes { process.kill9() } }
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "ipc://\(path)/b0.sock", "--data-dir", path + "/data-b0", "--heartbeat", "200ms",
                "--shard-name", "b0", "--brokers", list,
            ],
            logDirectory: path
        )
        processes.append(broker)
        _ = try broker.readyEndpoint()
        let limits = try RelayProcess(
            "askrelay-limits",
            [
                "--brokers", list, "--shard-name", "b0", "--id", "limits-b0", "--data-dir", path + "/limits-b0",
                "--heartbeat", "200ms",
            ],
            logDirectory: path
        )
        processes.append(limits)
        _ = try limits.waitForLine(startingWith: "ready")

        // The parent hosts f1 (b1's) and f3 (b0's): two connections, b1's resolving its name through the silent
        // server (the parent's own mount namespace has the resolv.conf above).
        let parentPath = Executables.built.appendingPathComponent("askrelay-parent").path
        let parent = try RelayProcess(
            "askrelay-parent",
            [
                "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"", resolv, parentPath,
                "--brokers", list, "--guardian", "g1@f1", "--guardian", "g3@f3", "--policy", "approve",
                "--think", "fixed:10ms", "--heartbeat", "200ms",
            ],
            logDirectory: path,
            executableURL: URL(fileURLWithPath: "/usr/bin/unshare")
        )
        processes.append(parent)
        try #require(
            dns.asked.waitBlocking(timeout: .seconds(20)) { $0.contains(name) },
            "the parent never asked for \(name) (asked: \(dns.asked.events)); its log:\n\(parent.logTail())"
        )

        // b1's connection hears nothing and makes its socket again, twice: each new socket stays on b1's I/O thread
        // (queued behind the hanging lookup), neither asking the name again nor taking b0's thread.
        _ = try ConnectionFailureTests.waitForLog(
            parent,
            "broker silent; reconnecting",
            also: [name],
            lines: 2,
            timeout: .seconds(30)
        )

        // A child of f3 asks through b0 alone; the parent's guardian g3 answers on its b0 connection.
        let records = path + "/flows.jsonl"
        let child = try RelayProcess(
            "askrelay-child",
            [
                "--brokers", list, "--child", "c3@f3", "--flows", "3", "--think", "10ms", "--cancel-probability", "0",
                "--known-ratio", "0", "--records", records, "--heartbeat", "200ms",
            ],
            logDirectory: path
        )
        processes.append(child)
        let done = try child.waitForLine(startingWith: "done", timeout: .seconds(120))
        // The resolver had asked once, so the lookup was still on its first try (the next question comes 30 s
        // later): the answers came while it hung, and the sockets made again asked nothing.
        let queries = dns.questions(for: name)
        #expect(done == "done flows=3")
        let flows = JSONLinesWriter.read(ChildFlowRecord.self, path: records).values
        #expect(flows.map(\.outcome) == [.approved, .approved, .approved], "\(flows.map(\.outcome))")
        #expect(queries == 1, "the resolver asked \(queries) times: the flows waited out a try of the lookup")
        #expect(parent.ready == nil, "the parent never registered at b1, whose name never resolved")
    }
}
