import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// A broker running in-process on an OS-chosen loopback port, stopped by `stop()`.
final class TestBroker {
    let service: BrokerService
    let directory: TempDirectory
    let logs = MemorySink()
    var endpoint: String { service.endpoints[0] }

    init(durability: Durability = .off, directory: TempDirectory = TempDirectory(), configure: (inout BrokerConfiguration) -> Void = { _ in }) throws {
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["tcp://127.0.0.1:*"]
        configuration.dataDirectory = directory.path
        configuration.durability = durability
        configuration.heartbeatInterval = .milliseconds(200)
        configure(&configuration)
        self.directory = directory
        service = try BrokerService(configuration: configuration, logger: Logger(label: "test-broker", level: .debug, sink: logs))
    }

    func stop() {
        service.stop()
        try? service.wait()
    }
}

