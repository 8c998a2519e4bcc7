import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@Suite("Durability across broker restarts (in-process)", .timeLimit(.minutes(1)))
struct DurabilityTests {
    /// The trace context of the messages these tests send (every other one carries it).
    static let trace = TraceContext(traceID: MessageID(high: 0x4bf9_2f35, low: 0x77b3_4da6), parentID: 0x00f0_67aa)

    @Test(
        "acknowledged messages for an offline address survive a restart, in order, with their trace context",
        arguments: [Durability.batch, .strict]
    )
    func messagesSurviveRestart(_ durability: Durability) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        var ids: [MessageID] = []
        do {
            let broker = try TestBroker(durability: durability, directory: directory)
            let client = try RawPeer(context: try ZMQContext(), endpoint: broker.endpoint)
            try client.register(role: .client, ["client/1"])
            for index in 0..<5 {
                let id = try client.sendMessage(
                    from: "client/1",
                    to: "echo/offline",
                    kind: "echo",
                    trace: index % 2 == 0 ? Self.trace : nil,
                    body: [UInt8(index)]
                )
                try client.expectAck(id)
                ids.append(id)
            }
            broker.stop()
        }
        let restarted = try TestBroker(durability: durability, directory: directory)
        defer { restarted.stop() }
        let echo = try RawPeer(context: try ZMQContext(), endpoint: restarted.endpoint)
        try echo.register(role: .echo, ["echo/offline"])
        var received: [MessageID] = []
        for index in 0..<5 {
            let delivery = try echo.expectDelivery()
            received.append(delivery.id!)
            #expect(delivery.trace == (index % 2 == 0 ? Self.trace : nil), "message \(index)")
            try echo.ack([delivery.id!])
        }
        #expect(received == ids)
    }

    @Test("a turn that only reads ACKs writes nothing: the copies leave the journal with the next commit, or at stop")
    func ackOnlyTurnsDoNotCommit() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let broker = try TestBroker(durability: .batch, directory: directory) { $0.ackedDeleteDelay = .seconds(3600) }
        var stopped = false
        defer { if !stopped { broker.stop() } }
        let context = try ZMQContext()
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/1"])
        try echo.register(role: .echo, ["echo/1"])
        let journal = try Journal(directory: directory.path, durability: .batch)
        try client.expectAck(try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1]))
        // Refused input writes nothing, and frames from one connection are handled in order: once the second
        // refusal arrives, the turn that read the ACK has ended.
        func settle() throws {
            for _ in 0..<2 {
                _ = try echo.expectNack(try echo.sendMessage(from: "echo/1", to: "broker", kind: "echo", body: [0]))
            }
        }
        try echo.ack([try echo.expectDelivery().id!])
        try settle()
        #expect(try journal.messageCount() == 1, "the ACK-only turn committed a delete of its own")
        // The next turn that writes anyway takes the delete along.
        try client.expectAck(try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [2]))
        #expect(try journal.messageCount() == 1)
        try echo.ack([try echo.expectDelivery().id!])
        try settle()
        #expect(try journal.messageCount() == 1)
        broker.stop()
        stopped = true
        // Stopping deletes what waited.
        #expect(try journal.messageCount() == 0)
    }

    @Test("acked deliveries are gone after a restart; unacked ones come back")
    func ackedAreDeleted() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        var unacked: MessageID?
        do {
            let broker = try TestBroker(durability: .batch, directory: directory)
            let context = try ZMQContext()
            let client = try RawPeer(context: context, endpoint: broker.endpoint)
            let echo = try RawPeer(context: context, endpoint: broker.endpoint)
            try client.register(role: .client, ["client/1"])
            try echo.register(role: .echo, ["echo/1"])
            let first = try client.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [1])
            let second = try client.sendMessage(
                from: "client/1",
                to: "echo/1",
                kind: "echo",
                trace: Self.trace,
                body: [2]
            )
            try client.expectAck(first)
            try client.expectAck(second)
            #expect(try echo.expectDelivery().id == first)
            #expect(try echo.expectDelivery().id == second)
            try echo.ack([first])
            // Frames from one connection are handled in order: once this SEND is acknowledged, the ACK before it
            // has been applied and committed.
            try echo.expectAck(try echo.sendMessage(from: "echo/1", to: "client/1", kind: "echo", body: [3]))
            unacked = second
            broker.stop()
        }
        let restarted = try TestBroker(durability: .batch, directory: directory)
        defer { restarted.stop() }
        let echo = try RawPeer(context: try ZMQContext(), endpoint: restarted.endpoint)
        try echo.register(role: .echo, ["echo/1"])
        let delivery = try echo.expectDelivery()
        #expect(delivery.id == unacked)
        #expect(delivery.trace == Self.trace, "the copy kept in the message log came back without its trace context")
        try echo.ack([delivery.id!])
        #expect(try echo.receivesNothing { $0.command == .deliver })
    }

    /// `child/c1` asks `question`, `limits/l1` presents it, the child sends it: each acknowledged, the messages in
    /// `trace` when given (the limits worker's reply in its delivery's), the `send` with the id `sendID`.
    static func askPresentAndSend(
        _ question: AnyPermissionQuestion,
        child: RawPeer,
        limits: RawPeer,
        trace: TraceContext? = nil,
        sendID: MessageID = .random()
    ) throws {
        try child.expectAck(
            try child.send(AskRequest(question: question), from: "child/c1", to: "limits", trace: trace)
        )
        let ask = try limits.expectDelivery(kind: "ask")
        try limits.ack([ask.id!])
        try limits.expectAck(
            try limits.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: "limits/l1",
                to: "child/c1",
                trace: ask.trace?.child(of: ask.id!)
            )
        )
        try child.ack([try child.expectDelivery(kind: "ask.result").id!])
        try child.expectAck(
            try child.send(
                SendQuestion(questionID: question.id),
                from: "child/c1",
                to: "broker",
                trace: trace,
                id: sendID
            )
        )
    }

    @Test("an open question, its roster and its deadline survive a restart: the answer still reaches the child")
    func ledgerSurvivesRestart() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let question = FlowHarness.question()
        do {
            let broker = try TestBroker(durability: .batch, directory: directory)
            let context = try ZMQContext()
            let child = try RawPeer(context: context, endpoint: broker.endpoint)
            let limits = try RawPeer(context: context, endpoint: broker.endpoint)
            let guardian = try RawPeer(context: context, endpoint: broker.endpoint)
            try child.register(role: .child, ["child/c1"], family: "f1")
            try limits.register(role: .limits, ["limits/l1"])
            try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
            try Self.askPresentAndSend(question, child: child, limits: limits)
            broker.stop()
        }
        let restarted = try TestBroker(durability: .batch, directory: directory)
        defer { restarted.stop() }
        let context = try ZMQContext()
        let guardian = try RawPeer(context: context, endpoint: restarted.endpoint)
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        let delivered = try guardian.expectDelivery(kind: "question")
        #expect(try delivered.decode(GuardianQuestion.self).question.id == question.id)
        try guardian.ack([delivered.id!])
        try guardian.expectAck(
            try guardian.send(
                GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id),
                from: "guardian/g1",
                to: "broker"
            )
        )
        let child = try RawPeer(context: context, endpoint: restarted.endpoint)
        try child.register(role: .child, ["child/c1"], family: "f1")
        let response = try child.expectDelivery(kind: "response")
        #expect(try response.decode(AnyPermissionResponse.self).choice == .approve)
    }

    @Test("a question sent while its family had no guardian reaches the first one, after a restart, in its trace")
    func questionTraceSurvivesRestart() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let question = FlowHarness.question()
        let sendID = MessageID.random()
        do {
            let broker = try TestBroker(durability: .batch, directory: directory)
            let context = try ZMQContext()
            let child = try RawPeer(context: context, endpoint: broker.endpoint)
            let limits = try RawPeer(context: context, endpoint: broker.endpoint)
            try child.register(role: .child, ["child/c1"], family: "f1")
            try limits.register(role: .limits, ["limits/l1"])
            // No guardian of f1 yet: the question waits for one, in the broker's memory and its journal.
            try Self.askPresentAndSend(question, child: child, limits: limits, trace: Self.trace, sendID: sendID)
            broker.stop()
        }
        let restarted = try TestBroker(durability: .batch, directory: directory)
        defer { restarted.stop() }
        let guardian = try RawPeer(context: try ZMQContext(), endpoint: restarted.endpoint)
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        let delivered = try guardian.expectDelivery(kind: "question")
        #expect(try delivered.decode(GuardianQuestion.self).question.id == question.id)
        #expect(delivered.trace == Self.trace.child(of: sendID), "the question left its flow's trace at the restart")
    }
}
