import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP request over a fresh blocking socket with a 10 s receive timeout; the whole response.
public func httpRequest(port: UInt16, _ request: String) throws -> String {
    let fd = try openHTTPConnection(port: port)
    defer { close(fd) }
    let bytes = Array(request.utf8)
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count <= 0 { break }
        received += buffer[0..<count]
    }
    return String(decoding: received, as: UTF8.self)
}

public func openHTTPConnection(port: UInt16) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
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
    return fd
}

/// Whether nothing has come on `fd` from the server, not even its close, right now (without waiting): a held
/// connection the server has neither answered nor cut.
public func receivedNothingYet(_ fd: Int32) -> Bool {
    var byte: UInt8 = 0
    return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
}

/// The page of `GET /metrics`, or a failure naming the status.
public func scrape(_ port: UInt16) throws -> String {
    let response = try httpRequest(port: port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
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
