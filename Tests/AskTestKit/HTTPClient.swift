import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking TCP client on 127.0.0.1 with send and receive timeouts, so that a server that never answers fails the
/// test, not hangs it. The connection closes when the client goes.
public final class HTTPClient {
    public let fd: Int32

    /// Connects to 127.0.0.1:`port`.
    /// - Throws: ``TestFailure`` when the connection is refused.
    public init(port: UInt16, receiveTimeout: Duration = .seconds(10)) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: Int(receiveTimeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            close(fd)
            throw TestFailure("cannot connect to 127.0.0.1:\(port)")
        }
    }

    deinit { close(fd) }

    /// - Returns: whether every byte went out (a server that closed early may refuse the rest).
    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if count <= 0 { return false }
            offset += count
        }
        return true
    }

    /// Whether nothing has come from the server, not even its close, right now (without waiting): a held connection
    /// the server has neither answered nor cut.
    public func hasNothingYet() -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }

    /// Reads until the server closes (or the receive timeout, which returns what came).
    public func readAll() -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received += buffer[0..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// One request over a fresh connection: the whole response.
    public static func request(_ port: UInt16, _ text: String) throws -> String {
        let client = try HTTPClient(port: port)
        client.send(text)
        return client.readAll()
    }
}

/// The page of `GET /metrics`, or a failure naming the status.
public func scrape(_ port: UInt16) throws -> String {
    let response = try HTTPClient.request(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    guard response.hasPrefix("HTTP/1.1 200 OK\r\n"), let end = response.range(of: "\r\n\r\n") else {
        throw TestFailure("scrape failed: \(response.prefix(200))")
    }
    return String(response[end.upperBound...])
}

/// The value of one sample line (`name{labels} value`), exactly as named, or `nil`.
public func sample(_ page: String, _ series: String) -> Double? {
    for line in page.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}
