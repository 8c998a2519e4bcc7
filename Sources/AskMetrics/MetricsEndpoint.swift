/// Where a metrics server listens: `HOST:PORT`, HOST an IPv4 address (`0.0.0.0` for every interface) or
/// `localhost`, PORT 0-65535 (0: one the OS picks, reported by ``MetricsServer/endpoint``).
public struct MetricsEndpoint: Sendable, Equatable, CustomStringConvertible {
    /// The IPv4 address in dotted form (`localhost` is stored as `127.0.0.1`).
    public let host: String
    public let port: UInt16

    public var description: String { "\(host):\(port)" }

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`. - Returns: `nil` (with ``problem(_:)`` saying why) for anything else.
    public init?(parsing text: String) {
        guard Self.problem(text) == nil, let colon = text.lastIndex(of: ":") else { return nil }
        let host = String(text[..<colon])
        self.host = host == "localhost" ? "127.0.0.1" : host
        port = UInt16(text[text.index(after: colon)...])!
    }

    /// What is wrong with `text` as an endpoint, or `nil` when it is one.
    public static func problem(_ text: String) -> String? {
        let example = "give HOST:PORT, for example 127.0.0.1:9464 (port 0: one the OS picks)"
        guard let colon = text.lastIndex(of: ":") else { return "'\(text)' has no port; \(example)" }
        let host = text[..<colon]
        let port = text[text.index(after: colon)...]
        if text.contains("://") { return "'\(text)' is a URL; \(example)" }
        guard host == "localhost" || isIPv4(host) else {
            return "'\(host)' is not an IPv4 address or localhost; \(example)"
        }
        guard !port.isEmpty, port.allSatisfy(\.isASCII), port.allSatisfy(\.isNumber), port.count <= 5,
            let number = Int(port), number <= 65535
        else { return "'\(port)' is not a port (0-65535); \(example)" }
        return nil
    }

    static func isIPv4(_ text: Substring) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4
            && parts.allSatisfy { part in
                !part.isEmpty && part.count <= 3 && part.allSatisfy { $0.isASCII && $0.isNumber }
                    && Int(part)! <= 255
            }
    }
}
