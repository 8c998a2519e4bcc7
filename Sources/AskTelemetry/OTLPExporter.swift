import AskProtocol
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Sends OTLP/HTTP JSON trace requests to a collector (`POST <endpoint>/v1/traces`, `Content-Type:
/// application/json`): plain HTTP/1.1 over one TCP connection per request, no TLS, no dependency. A collector on the
/// same host or a sidecar is the intended peer (docs/tracing.md, "OpenTelemetry").
public struct OTLPExporter: Sendable {
    public let host: String
    public let port: UInt16
    /// The path requests go to: the endpoint's path, then `/v1/traces`.
    public let path: String

    /// - Parameter endpoint: `http://HOST:PORT` (a path prefix is kept); the OTLP/HTTP default port is 4318.
    /// - Throws: ``OTLPError`` naming the endpoint and what a good one looks like.
    public init(endpoint: String) throws {
        guard let url = URL(string: endpoint), url.scheme == "http", let host = url.host, !host.isEmpty else {
            throw OTLPError(
                "--otlp-endpoint \(endpoint) is not an http://HOST:PORT URL (https is not supported; an OTLP/HTTP "
                    + "collector listens on port 4318 by default)"
            )
        }
        self.host = host
        port = UInt16(url.port ?? 4318)
        let prefix = url.path.hasSuffix("/") ? String(url.path.dropLast()) : url.path
        path = prefix + "/v1/traces"
    }

    /// Posts one request body. - Throws: ``OTLPError`` when the collector cannot be reached or answers non-2xx.
    public func post(_ body: Data) throws {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let address = found else {
            throw OTLPError("the OTLP collector host \(host) does not resolve")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
        guard fd >= 0 else { throw OTLPError("socket(): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else {
            throw OTLPError(
                "nothing accepts connections at http://\(host):\(port) (\(String(cString: strerror(errno)))): start "
                    + "the OTLP collector first, or give --otlp-endpoint its address"
            )
        }
        let head =
            "POST \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        try write(fd, Data(head.utf8) + body)
        var response = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            response.append(contentsOf: buffer[0..<count])
        }
        let statusLine = String(decoding: response.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else {
            throw OTLPError("the OTLP collector at http://\(host):\(port) gave no HTTP status line")
        }
        guard (200..<300).contains(status) else {
            let text = String(decoding: response, as: UTF8.self)
            let bodyText = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...].prefix(300)) } ?? ""
            throw OTLPError("the OTLP collector answered \(statusLine) to POST \(path): \(bodyText)")
        }
    }

    private func write(_ fd: Int32, _ data: Data) throws {
        try data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else {
                    throw OTLPError("sending to the OTLP collector failed: \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
    }
}

/// Why an export failed, said in one line.
public struct OTLPError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
