import AskBroker
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// BrokerService hands its thread's outcome back: the bound endpoints, the error that stopped the start, the error
/// that ended the loop.
@Suite("BrokerService start and stop")
struct BrokerServiceTests {
    @Test("an endpoint already bound makes start throw the bind error; a started broker stops without an error")
    func startFailureAndCleanStop() throws {
        let first = try TestBroker()
        defer { first.stop() }
        #expect(first.endpoint.hasPrefix("tcp://127.0.0.1:"))
        #expect(!first.endpoint.hasSuffix(":*"))

        let taken = first.endpoint
        #expect(throws: ZMQError.self) {
            let second = try TestBroker(configure: { $0.endpoints = [taken] })
            second.stop()
        }

        first.service.stop()
        try first.service.wait()
    }
}
