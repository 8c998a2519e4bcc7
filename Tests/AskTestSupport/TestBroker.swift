import AskBroker
import AskLogging
import Foundation

/// A broker running in-process on an OS-chosen loopback port. `stop()` stops it, and removes its data folder when
/// the broker made that folder itself (tests that restart a broker on the same journal pass their own).
public final class TestBroker: @unchecked Sendable {  // @unchecked: immutable after init; stop() is called once.
    public let service: BrokerService
    public let directory: TempDirectory
    private let ownsDirectory: Bool
    /// Everything the broker logged at `logLevel` or above, for assertions.
    public let logs = MemorySink()
    public var endpoint: String { service.endpoints[0] }

    public init(
        durability: Durability = .off,
        directory: TempDirectory? = nil,
        logLevel: AskLogger.Level = .debug,
        configure: (inout BrokerConfiguration) -> Void = { _ in }
    ) throws {
        ownsDirectory = directory == nil
        let directory = directory ?? TempDirectory()
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["tcp://127.0.0.1:*"]
        configuration.dataDirectory = directory.path
        configuration.durability = durability
        // 200 ms × 10: a dead peer is noticed within 2 s, and a busy test machine does not kill live raw peers.
        configuration.heartbeatInterval = .milliseconds(200)
        configuration.liveness = 10
        configure(&configuration)
        self.directory = directory
        service = try BrokerService(
            configuration: configuration,
            logger: AskLogger(label: "test-broker", level: logLevel, sink: logs)
        )
    }

    public func stop() {
        service.stop()
        try? service.wait()
        if ownsDirectory { directory.cleanup() }
    }
}
