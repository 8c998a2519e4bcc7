import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Why a link could not start, or an endpoint it was given cannot be used.
public struct LinkError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }

    static func system(_ call: String, _ detail: String = "") -> LinkError {
        let code = errno
        let text = String(cString: strerror(code))
        return LinkError("\(call)\(detail.isEmpty ? "" : " \(detail)"): \(text) (errno \(code))")
    }
}

/// A socket address a link listens on or connects to: `tcp://HOST:PORT` or `ipc://PATH` (a unix socket).
enum LinkAddress: Sendable, Equatable {
    case tcp(host: String, port: UInt16)
    case ipc(path: String)

    init(_ endpoint: String) throws {
        if endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            guard !path.isEmpty, path.utf8.count < 108 else {
                throw LinkError("'\(endpoint)': an ipc path must be 1-107 bytes")
            }
            self = .ipc(path: path)
        } else if endpoint.hasPrefix("tcp://") {
            let rest = endpoint.dropFirst("tcp://".count)
            guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]) else {
                throw LinkError("'\(endpoint)': expected tcp://HOST:PORT")
            }
            var host = String(rest[..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty else { throw LinkError("'\(endpoint)': no host") }
            self = .tcp(host: host, port: port)
        } else {
            throw LinkError("'\(endpoint)': a link speaks tcp://HOST:PORT or ipc://PATH")
        }
    }
}

/// Plain POSIX socket calls, every descriptor close-on-exec (a process the test starts inherits none).
enum LinkSockets {
    /// A non-blocking listening socket on `address`; for tcp port 0 the OS picks one. - Returns: the descriptor
    /// and the endpoint it listens on (`tcp://127.0.0.1:<port>`, `ipc://PATH`).
    static func listen(_ address: LinkAddress) throws -> (Int32, String) {
        switch address {
        case .tcp(let host, let port):
            guard host == "127.0.0.1" else { throw LinkError("a link listens on 127.0.0.1 only, not \(host)") }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw LinkError.system("socket") }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            sin.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &sin) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0, Glibc.listen(fd, 128) == 0 else {
                let error = LinkError.system("bind/listen", "127.0.0.1:\(port)")
                close(fd)
                throw error
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &sin) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            try setNonBlocking(fd)
            return (fd, "tcp://127.0.0.1:\(UInt16(bigEndian: sin.sin_port))")
        case .ipc(let path):
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw LinkError.system("socket") }
            unlink(path)
            var sun = unixAddress(path)
            let bound = withUnsafePointer(to: &sun) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard bound == 0, Glibc.listen(fd, 128) == 0 else {
                let error = LinkError.system("bind/listen", path)
                close(fd)
                throw error
            }
            try setNonBlocking(fd)
            return (fd, "ipc://\(path)")
        }
    }

    /// Starts a non-blocking connect to `address`. - Returns: the descriptor and whether it is connected already
    /// (else wait for POLLOUT and read ``pendingError(_:)``).
    static func connect(_ address: LinkAddress) throws -> (Int32, Bool) {
        switch address {
        case .tcp(let host, let port):
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            hints.ai_family = AF_UNSPEC
            var list: UnsafeMutablePointer<addrinfo>?
            let found = getaddrinfo(host, "\(port)", &hints, &list)
            guard found == 0, let first = list else {
                throw LinkError("cannot resolve \(host): \(String(cString: gai_strerror(found)))")
            }
            defer { freeaddrinfo(list) }
            let fd = socket(
                first.pointee.ai_family,
                Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                0
            )
            guard fd >= 0 else { throw LinkError.system("socket") }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 { return (fd, true) }
            if errno == EINPROGRESS { return (fd, false) }
            let error = LinkError.system("connect", "\(host):\(port)")
            close(fd)
            throw error
        case .ipc(let path):
            let fd = socket(
                AF_UNIX,
                Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                0
            )
            guard fd >= 0 else { throw LinkError.system("socket") }
            var sun = unixAddress(path)
            let result = withUnsafePointer(to: &sun) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if result == 0 { return (fd, true) }
            if errno == EINPROGRESS { return (fd, false) }
            let error = LinkError.system("connect", path)
            close(fd)
            throw error
        }
    }

    /// The result of a non-blocking connect once the socket is writable: 0, or the errno it failed with.
    static func pendingError(_ fd: Int32) -> Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) == 0 else { return errno }
        return code
    }

    /// Accepts one connection, non-blocking and close-on-exec; `nil` when none waits.
    static func accept(_ listener: Int32) -> Int32? {
        // No accept4 in Glibc's Swift overlay: the flags are set right after (this thread starts no process).
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { return nil }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = try? setNonBlocking(fd)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// Closes `fd` abruptly: SO_LINGER 0 makes the kernel send RST (not FIN) and drop what was unsent, as the
    /// socket of a crashed peer or a middlebox that forgot the connection does.
    static func reset(_ fd: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(fd)
    }

    static func setNonBlocking(_ fd: Int32) throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw LinkError.system("fcntl") }
    }

    static func unixAddress(_ path: String) -> sockaddr_un {
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &sun.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return sun
    }
}
