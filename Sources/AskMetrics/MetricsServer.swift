import AskBasics
import AskLogging
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A failed system call of the metrics server: the call, the endpoint and errno's text.
public struct MetricsServerError: Error, CustomStringConvertible, Sendable {
    public let call: String
    public let errno: Int32
    public let endpoint: MetricsEndpoint

    public var description: String {
        "metrics endpoint \(endpoint): \(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// What a metrics server allows each client.
public struct MetricsServerLimits: Sendable {
    /// Connections served at once; one more is answered `503` and closed at once.
    public var maxConnections = 32
    /// The request line and headers, at most; more is answered `431`.
    public var maxRequestBytes = 8192
    /// A connection has this long to send its request and read the response, then it is closed (`408` if its
    /// request was not complete).
    public var timeout: Duration = .seconds(5)

    public init() {}
}

/// A small HTTP/1.1 server for `GET /metrics`, on a thread of its own.
///
/// One thread polls every connection without blocking, so a client that sends slowly or never reads cannot hold up
/// another scrape, and nothing it does reaches the thread that owns the numbers: each scrape calls `page`, which
/// reads a published snapshot. Every response closes its connection. `GET` or `HEAD` on `/metrics` (any query) is
/// `200`; another path `404`; another method `405`; a request line that is not HTTP/1.x `400`.
public final class MetricsServer: Sendable {
    /// The bound endpoint (with the port the OS picked when asked for 0).
    public let endpoint: MetricsEndpoint
    private let wakeWrite: Int32
    private let finished = DispatchSemaphore(value: 0)
    private let stopped = Mutex(false)

    /// Binds and starts serving.
    /// - Parameter page: the body of `/metrics`, called on the server's thread for each scrape.
    /// - Throws: ``MetricsServerError`` when the endpoint cannot be bound (in use, not an address of this host).
    public init(
        endpoint: MetricsEndpoint,
        limits: MetricsServerLimits = MetricsServerLimits(),
        logger: AskLogger,
        page: @escaping @Sendable () -> String
    ) throws {
        let listener = try Self.listen(endpoint)
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else {
            let error = MetricsServerError(call: "pipe", errno: errno, endpoint: endpoint)
            close(listener.fd)
            throw error
        }
        for fd in pipeFDs { Self.makeNonBlocking(fd) }
        self.endpoint = listener.bound
        wakeWrite = pipeFDs[1]
        let wakeRead = pipeFDs[0]
        let finished = self.finished
        let bound = listener.bound
        startThread(name: "askrelay-metrics") {
            let loop = MetricsServerLoop(
                listenFD: listener.fd,
                wakeFD: wakeRead,
                limits: limits,
                logger: logger,
                page: page
            )
            loop.run()
            logger.debug("metrics endpoint closed", metadata: ["endpoint": "\(bound)"])
            finished.signal()
        }
    }

    deinit { stop() }

    /// Stops serving and waits for the thread to end: open connections are closed. Safe to call again.
    public func stop() {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        finished.wait()
        close(wakeWrite)
    }

    /// O_NONBLOCK and FD_CLOEXEC (the GNU calls that set them at creation are not visible from Swift).
    static func makeNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC)
    }

    private static func listen(_ endpoint: MetricsEndpoint) throws -> (fd: Int32, bound: MetricsEndpoint) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw MetricsServerError(call: "socket", errno: errno, endpoint: endpoint) }
        func fail(_ call: String) -> MetricsServerError {
            let error = MetricsServerError(call: call, errno: errno, endpoint: endpoint)
            close(fd)
            return error
        }
        var yes: Int32 = 1
        guard setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw fail("setsockopt(SO_REUSEADDR)")
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = endpoint.port.bigEndian
        guard inet_pton(AF_INET, endpoint.host, &address.sin_addr) == 1 else {
            errno = EINVAL
            throw fail("inet_pton")
        }
        let size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let boundOK = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) == 0 }
        }
        guard boundOK else { throw fail("bind") }
        guard Glibc.listen(fd, 128) == 0 else { throw fail("listen") }
        var actual = sockaddr_in()
        var length = size
        let named = withUnsafeMutablePointer(to: &actual) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard named else { throw fail("getsockname") }
        return (fd, MetricsEndpoint(host: endpoint.host, port: UInt16(bigEndian: actual.sin_port)))
    }
}

/// The server thread's state: the listening socket, the wake pipe and the open connections. Lives and dies on
/// that thread.
final class MetricsServerLoop {
    enum Phase {
        /// Reading the request line and headers.
        case reading
        /// Writing the response.
        case writing
        /// Response written and our side shut: reading what the client still sends (so closing does not reset the
        /// connection before it read the response), until it closes, for ``MetricsServerLoop/drainTime`` at most.
        case draining
    }

    struct Connection {
        let fd: Int32
        var deadline: ContinuousClock.Instant
        var phase = Phase.reading
        var request: [UInt8] = []
        var response: [UInt8] = []
        var written = 0
    }

    /// How long a connection whose response is written may stay open for the client to read it and close.
    static let drainTime: Duration = .seconds(1)

    let listenFD: Int32
    let wakeFD: Int32
    let limits: MetricsServerLimits
    let logger: AskLogger
    let page: @Sendable () -> String
    var connections: [Connection] = []
    var scratch = [UInt8](repeating: 0, count: 4096)

    init(
        listenFD: Int32,
        wakeFD: Int32,
        limits: MetricsServerLimits,
        logger: AskLogger,
        page: @escaping @Sendable () -> String
    ) {
        self.listenFD = listenFD
        self.wakeFD = wakeFD
        self.limits = limits
        self.logger = logger
        self.page = page
    }

    func run() {
        var fds: [pollfd] = []
        defer {
            for connection in connections { close(connection.fd) }
            close(listenFD)
            close(wakeFD)
        }
        while true {
            fds.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            fds.append(pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0))
            for connection in connections {
                let events = connection.phase == .writing ? POLLOUT : POLLIN
                fds.append(pollfd(fd: connection.fd, events: Int16(events), revents: 0))
            }
            var timeout: Int32 = -1
            if let next = connections.map(\.deadline).min() {
                let left = next - ContinuousClock.now
                timeout = left <= .zero ? 0 : Int32(min(left / .milliseconds(1), 60_000).rounded(.up))
            }
            if poll(&fds, nfds_t(fds.count), timeout) < 0 {
                if errno == EINTR { continue }
                logger.error("metrics endpoint poll failed", metadata: ["errno": "\(errno)"])
                return
            }
            if fds[0].revents != 0 { return }
            let now = ContinuousClock.now
            var kept = 0
            for index in connections.indices {
                var connection = connections[index]
                let events = fds[index + 2].revents
                var open = true
                if events != 0 { open = step(&connection, events: events) }
                if open && now >= connection.deadline {
                    if connection.phase == .reading {
                        // Best effort: a client that never finished its request learns why it is cut.
                        let response = Self.response(status: "408 Request Timeout", body: "request not complete\n")
                        _ = response.withUnsafeBytes {
                            send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                        }
                    }
                    open = false
                }
                if open {
                    connections[kept] = connection
                    kept += 1
                } else {
                    close(connection.fd)
                }
            }
            connections.removeLast(connections.count - kept)
            if fds[1].revents & Int16(POLLIN) != 0 { acceptAll(now: now) }
        }
    }

    func acceptAll(now: ContinuousClock.Instant) {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno != EAGAIN && errno != EWOULDBLOCK {
                    logger.warning("metrics endpoint accept failed", metadata: ["errno": "\(errno)"])
                }
                return
            }
            MetricsServer.makeNonBlocking(fd)
            if connections.count >= limits.maxConnections {
                let response = Self.response(status: "503 Service Unavailable", body: "too many connections\n")
                _ = response.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                close(fd)
                continue
            }
            connections.append(Connection(fd: fd, deadline: now + limits.timeout))
        }
    }

    /// Reads or writes what the socket allows. - Returns: `false` when the connection is done.
    func step(_ connection: inout Connection, events: Int16) -> Bool {
        switch connection.phase {
        case .reading:
            let count = recv(connection.fd, &scratch, scratch.count, 0)
            if count == 0 { return false }
            if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR }
            let room = limits.maxRequestBytes - connection.request.count
            connection.request.append(contentsOf: scratch[0..<min(count, room)])
            if let headEnd = HTTPRequestHead.end(of: connection.request) {
                connection.response = respond(to: Array(connection.request[..<headEnd]))
            } else if count > room || connection.request.count >= limits.maxRequestBytes {
                connection.response = Self.response(
                    status: "431 Request Header Fields Too Large",
                    body: "the request line and headers may be at most \(limits.maxRequestBytes) bytes\n"
                )
            } else {
                return true
            }
            connection.request = []
            connection.phase = .writing
            return write(&connection)
        case .writing:
            return write(&connection)
        case .draining:
            let count = recv(connection.fd, &scratch, scratch.count, 0)
            if count == 0 { return false }
            return count > 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
        }
    }

    func write(_ connection: inout Connection) -> Bool {
        while connection.written < connection.response.count {
            let count = connection.response.withUnsafeBytes { bytes in
                send(
                    connection.fd,
                    bytes.baseAddress! + connection.written,
                    bytes.count - connection.written,
                    Int32(MSG_NOSIGNAL)
                )
            }
            if count < 0 {
                if errno == EINTR { continue }
                return errno == EAGAIN || errno == EWOULDBLOCK
            }
            connection.written += count
        }
        shutdown(connection.fd, Int32(SHUT_WR))
        connection.response = []
        connection.phase = .draining
        connection.deadline = min(connection.deadline, .now + Self.drainTime)
        return true
    }

    func respond(to head: [UInt8]) -> [UInt8] {
        switch HTTPRequestHead.parse(head) {
        case .failure(let problem):
            return Self.response(status: "400 Bad Request", body: "\(problem)\n")
        case .success(let request):
            guard request.method == "GET" || request.method == "HEAD" else {
                return Self.response(
                    status: "405 Method Not Allowed",
                    body: "only GET and HEAD\n",
                    extraHeaders: "Allow: GET, HEAD\r\n"
                )
            }
            guard request.path == "/metrics" else {
                return Self.response(status: "404 Not Found", body: "not found; metrics are at /metrics\n")
            }
            return Self.response(
                status: "200 OK",
                body: page(),
                contentType: ExpositionText.contentType,
                headOnly: request.method == "HEAD"
            )
        }
    }

    static func response(
        status: String,
        body: String,
        contentType: String = "text/plain; charset=utf-8",
        extraHeaders: String = "",
        headOnly: Bool = false
    ) -> [UInt8] {
        let body = Array(body.utf8)
        let head =
            "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\n"
            + "\(extraHeaders)Connection: close\r\n\r\n"
        return Array(head.utf8) + (headOnly ? [] : body)
    }
}

/// The request line of an HTTP/1.x request, and where its head ends.
struct HTTPRequestHead: Equatable {
    let method: String
    /// The target without its query.
    let path: String

    /// The length of the head including the blank line that ends it (CRLF CRLF, or a bare LF LF), or `nil`.
    static func end(of bytes: [UInt8]) -> Int? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0A {
                if index + 1 < bytes.count, bytes[index + 1] == 0x0A { return index + 2 }
                if index + 2 < bytes.count, bytes[index + 1] == 0x0D, bytes[index + 2] == 0x0A { return index + 3 }
            }
            index += 1
        }
        return nil
    }

    /// Parses the request line, `METHOD SP TARGET SP HTTP/1.x`; the headers are not needed and not read.
    static func parse(_ head: [UInt8]) -> Result<HTTPRequestHead, HTTPRequestProblem> {
        let lineEnd = head.firstIndex(of: 0x0A) ?? head.count
        var line = head[..<lineEnd]
        if line.last == 0x0D { line = line.dropLast() }
        guard line.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            return .failure(HTTPRequestProblem("the request line has bytes that are not printable ASCII"))
        }
        let parts = line.split(separator: 0x20, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
        guard parts.count == 3 else {
            return .failure(HTTPRequestProblem("the request line must be METHOD TARGET HTTP/1.x"))
        }
        let method = parts[0]
        guard !method.isEmpty, method.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) else {
            return .failure(HTTPRequestProblem("'\(method)' is not a method"))
        }
        guard parts[1].hasPrefix("/") else {
            return .failure(HTTPRequestProblem("the target must be a path starting with /"))
        }
        guard parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0" else {
            return .failure(HTTPRequestProblem("'\(parts[2])' is not HTTP/1.0 or HTTP/1.1"))
        }
        let path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        return .success(HTTPRequestHead(method: method, path: String(path)))
    }
}

/// Why a request is `400`.
struct HTTPRequestProblem: Error, Equatable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
