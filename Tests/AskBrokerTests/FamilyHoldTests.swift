import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing

/// A family held for a move, at one real broker (docs/scaling.md, "Rebalancing"): what the hold refuses, and that
/// `unhold` gives everything back.
@Suite("A held family, and its hold undone")
struct FamilyHoldTests {
    @Test(
        "unhold after an export that read limits state: the family's SENDs and its children's limits.admin pass again"
    )
    func unholdGivesTheFamilyBack() throws {
        let world = try ConformanceWorld(durability: .batch, configure: movable)
        defer { world.stop() }
        try world.hold("f1")
        // The export asks the limits worker for c1's and c2's state; until both came back it says retry.
        let first = try world.reply(AdminRequest(op: "export", epoch: 1, family: "f1"))
        #expect(first.retry == true, "\(first)")
        let change = LimitsAdminChange(child: "c1", limitsEnabled: false)
        let refused = try world.observer.send(change, from: "observer/o1", to: "limits")
        #expect(try world.observer.expectNack(refused).code == ErrorCode.moving.rawValue)
        let ask = try world.child.send(AskRequest(question: FlowHarness.question()), from: "child/c1", to: "limits")
        #expect(try world.child.expectNack(ask).code == ErrorCode.moving.rawValue)

        try world.admin(AdminRequest(op: "unhold", epoch: 1, family: "f1"))
        let status = try world.admin(AdminRequest(op: "status"))
        #expect(status.moves?.isEmpty != false, "no move left: \(status)")
        try world.observer.expectAck(try world.observer.send(change, from: "observer/o1", to: "limits"))
        let question = FlowHarness.question()
        try world.child.expectAck(try world.child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        // The limits worker gets the reads (the broker's own, still delivered), the change and the ask.
        var kinds: [String] = []
        while !kinds.contains(MessageKind.ask.rawValue) {
            let delivery = try world.limits.expectDelivery()
            try world.limits.ack([delivery.id!])
            kinds.append(delivery.kind)
        }
        #expect(kinds.filter { $0 == MessageKind.limitsRead.rawValue }.count == 2, "\(kinds)")
        #expect(kinds.contains(MessageKind.limitsAdmin.rawValue), "\(kinds)")
    }
}

@Suite("An export whose limits worker refuses limits.read")
struct LimitsReadRefusedTests {
    @Test(
        "a limits worker that refuses limits.read (one older than the kind) ends the export's wait with the reason; a rerun asks again"
    )
    func refusedReadEndsTheWait() throws {
        let world = try ConformanceWorld(durability: .batch, configure: movable)
        defer { world.stop() }
        try world.hold("f1")
        let first = try world.reply(AdminRequest(op: "export", epoch: 1, family: "f1"))
        #expect(first.retry == true, "\(first)")
        // c1's read is refused as an old limits worker refuses it; c2's is still unanswered.
        let read = try world.limits.expectDelivery(kind: MessageKind.limitsRead.rawValue)
        let child = try read.decode(LimitsStateRead.self).child
        var out = Multipart()
        WireEncoder.nack(
            id: read.id,
            WireError(.unknownKind, "the limits service handles ask, not 'limits.read'"),
            into: &out
        )
        try world.limits.send(out)
        // The NACK and the export travel on two connections: a probe's answer shows the broker read the NACK.
        _ = try world.limits.receivesNothing { _ in false }
        let refused = try world.reply(AdminRequest(op: "export", epoch: 1, family: "f1"))
        #expect(!refused.ok && refused.retry != true, "\(refused)")
        let error = refused.error ?? ""
        #expect(error.contains("child \(child)"), "\(error)")
        #expect(error.contains("unknown-kind: the limits service handles ask"), "\(error)")
        #expect(error.contains("upgrade it and run the move again"), "\(error)")
        // The family stays held; the next export (the mover run again) asks for c1's state again.
        let again = try world.reply(AdminRequest(op: "export", epoch: 1, family: "f1"))
        #expect(again.retry == true, "\(again)")
        var asked: [String] = []
        while !asked.contains(child) {
            let delivery = try world.limits.expectDelivery(kind: MessageKind.limitsRead.rawValue)
            asked.append(try delivery.decode(LimitsStateRead.self).child)
        }
    }
}

@Suite("A family's children known across sessions")
struct RecordedChildrenTests {
    @Test("the export reads the limits state of a child that once registered in the family and is gone now")
    func goneChildIsRead() throws {
        let world = try ConformanceWorld(durability: .batch, configure: movable)
        defer { world.stop() }
        let gone = try RawPeer(context: world.flow.context, endpoint: world.broker.endpoint)
        try gone.register(role: .child, ["child/c9"], family: "f1")
        try gone.bye()
        // A probe on the same connection, answered after the BYE was read: the session has ended.
        #expect(try gone.receivesNothing { _ in false })
        try world.hold("f1")
        let first = try world.reply(AdminRequest(op: "export", epoch: 1, family: "f1"))
        #expect(first.retry == true, "\(first)")
        var read: Set<String> = []
        for _ in 0..<3 {
            let delivery = try world.limits.expectDelivery(kind: MessageKind.limitsRead.rawValue)
            read.insert(try delivery.decode(LimitsStateRead.self).child)
        }
        #expect(read == ["c1", "c2", "c9"])
    }

    @Test("a family imported with its children's limits state reads them again at its next move")
    func importedChildrenAreRead() throws {
        let world = try ConformanceWorld(durability: .batch, configure: movable)
        defer { world.stop() }
        let state = FamilyState(family: "f5", guardians: [], questions: [], messages: [], limits: ["c7": LimitsState()])
        try world.admin(
            AdminRequest(op: "import", epoch: 1, family: "f5", source: "b1=tcp://127.0.0.1:2", state: state)
        )
        #expect(
            try world.limits.expectDelivery(kind: MessageKind.limitsWrite.rawValue).decode(LimitsStateWrite.self).child
                == "c7"
        )
        try world.admin(AdminRequest(op: "hold", epoch: 2, family: "f5", destination: "b1=tcp://127.0.0.1:2"))
        let first = try world.reply(AdminRequest(op: "export", epoch: 2, family: "f5"))
        #expect(first.retry == true, "\(first)")
        let read = try world.limits.expectDelivery(kind: MessageKind.limitsRead.rawValue)
        #expect(try read.decode(LimitsStateRead.self).child == "c7")
    }
}
