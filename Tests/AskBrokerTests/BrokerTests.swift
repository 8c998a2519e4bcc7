import AskBroker
import Testing

/// `BrokerConfiguration`: the defaults docs/broker.md documents, and the problems it reports for a library caller
/// that builds one directly (the executable's flags are checked earlier, by AskCLI).
@Suite("broker configuration")
struct BrokerConfigurationTests {
    @Test("the defaults are the documented ones")
    func defaults() {
        let configuration = BrokerConfiguration()
        #expect(configuration.endpoints == ["tcp://127.0.0.1:5555"])
        #expect(configuration.dataDirectory == "./askrelay-data")
        #expect(configuration.durability == .batch)
        #expect(configuration.heartbeatInterval == .seconds(1))
        #expect(configuration.liveness == 3)
        #expect(configuration.window == 64)
        #expect(configuration.ackTimeout == .seconds(10))
        #expect(configuration.pendingWindow == .seconds(48 * 3600))
        #expect(configuration.closedRetention == .seconds(600))
        #expect(configuration.problems().isEmpty)
    }

    @Test("something that is not an endpoint is said to be so, not 'not loopback'")
    func notAnEndpoint() {
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["foo://bar"]
        #expect(configuration.problems() == ["'foo://bar' is not an endpoint: give tcp://HOST:PORT or ipc://PATH"])
        configuration.endpoints = ["tcp://10.0.0.1:5555"]
        #expect(configuration.problems().first?.contains("is not loopback") == true)
        configuration.endpoints = ["ipc:///tmp/a.sock", "inproc://x", "tcp://[::1]:1"]
        #expect(configuration.problems().isEmpty)
    }
}
