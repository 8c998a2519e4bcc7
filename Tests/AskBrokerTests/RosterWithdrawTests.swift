@testable import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@Suite("withdrawTurn and the family rosters")
struct RosterWithdrawTests {
    @Test("a guardian added in a turn whose commit fails leaves the roster, and is added again by the next turn")
    func guardianWithdrawnThenRetried() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        var configuration = BrokerConfiguration()
        configuration.endpoints = ["tcp://127.0.0.1:*"]
        configuration.dataDirectory = directory.path
        configuration.durability = .batch
        let broker = try Broker(
            configuration: configuration,
            logger: .silent(),
            context: ZMQContext(),
            wake: WakeSignal()
        )
        // A real guardian peer's HELLO, read and handled as the loop would (the loop itself does not run).
        let context = try ZMQContext()
        let guardian = try RawPeer(context: context, endpoint: broker.boundEndpoints[0])
        try guardian.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")])
        var poller = ZMQPoller()
        let index = poller.add(broker.socket)
        _ = try poller.poll(timeoutMilliseconds: 10_000)
        try #require(poller.isReady(index), "no HELLO within 10 s")
        try #require(try broker.socket.receive(into: &broker.input, .dontWait))
        broker.handleInput()
        _ = try guardian.expect { $0.command == .welcome }
        #expect(broker.ledger.rosters["f1"] == ["g1"])

        // The commit fails: SQLite rolled the turn's transaction back, roster row included.
        broker.journal.discardPendingWrites()
        broker.withdrawTurn(WireError(.storageFailed, "test: the commit failed"))
        broker.clearTurn()
        #expect(broker.ledger.rosters["f1"] == nil, "the in-memory roster keeps a guardian the journal does not have")

        // The next turn writes it again (its session is still live), in memory and in the journal.
        broker.finishTurn()
        #expect(broker.ledger.rosters["f1"] == ["g1"])
        #expect(try broker.journal.loadGuardians()["f1"] == ["g1"])
    }
}
