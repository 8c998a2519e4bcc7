import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

// The conformance suite of docs/protocol.md §7: every row of `ErrorTable.conditions` is provoked against a real
// broker by raw peers, and must get exactly its code and the NACK id the row says (the refused message's id, or
// empty). Each provocation runs in a fresh broker.

/// A real broker with the family of `FlowHarness` (child c1, limits l1, guardians g1 and g2 of f1, guardian x1 of f2),
/// a client (client/1), an observer (observer/o1) and a second child of f1 (child/c2).
final class ConformanceWorld {
    let flow: FlowHarness
    let client: RawPeer
    let observer: RawPeer
    let child2: RawPeer
    var broker: TestBroker { flow.broker }
    var child: RawPeer { flow.child }
    var limits: RawPeer { flow.limits }

    init(durability: Durability, configure: (inout BrokerConfiguration) -> Void) throws {
        flow = try FlowHarness(durability: durability, configure: configure)
        do {
            client = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            observer = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            child2 = try RawPeer(context: flow.context, endpoint: flow.broker.endpoint)
            try client.register(role: .client, ["client/1"])
            try observer.register(role: .observer, ["observer/o1"])
            try child2.register(role: .child, ["child/c2"], family: "f1")
        } catch {
            flow.stop()
            throw error
        }
    }

    func stop() { flow.stop() }

    /// A peer connected to the broker, without a session.
    func newPeer() throws -> RawPeer { try RawPeer(context: flow.context, endpoint: flow.broker.endpoint) }

    /// Sends `frames` from `peer` and returns the NACK it gets; `sent` is the id the message carries, if any.
    func refuse(_ peer: RawPeer, _ frames: [[UInt8]], sent: MessageID? = nil) throws -> Refusal {
        try peer.sendFrames(frames)
        return Refusal(nack: try peer.expectNack(), sent: sent)
    }

    /// The NACK `peer` gets for the SEND `id` it just sent (any NACK: the test then checks it carries `id`).
    func refusal(_ peer: RawPeer, _ id: MessageID) throws -> Refusal { Refusal(nack: try peer.expectNack(), sent: id) }

    // The states of a question, reached as the protocol reaches them.

    /// Asked and delivered to the limits worker, which has not answered.
    func admitting(_ question: AnyPermissionQuestion) throws {
        let id = try child.send(AskRequest(question: question), from: "child/c1", to: "limits")
        try child.expectAck(id)
        try limits.ack([try limits.expectDelivery(kind: "ask").id!])
    }

    func refused(_ question: AnyPermissionQuestion) throws {
        try admitting(question)
        let id = try limits.send(
            AskResult(questionID: question.id, outcome: .refused(.notAvailable)),
            from: "limits/l1",
            to: "child/c1"
        )
        try limits.expectAck(id)
        try child.ack([try child.expectDelivery(kind: "ask.result").id!])
    }

    func presented(_ question: AnyPermissionQuestion) throws { try flow.askAndPresent(question) }

    func sent(_ question: AnyPermissionQuestion) throws {
        try flow.askAndPresent(question)
        try flow.sendToGuardians(question)
    }

    func answered(_ question: AnyPermissionQuestion) throws {
        try sent(question)
        try flow.guardian1.expectAck(try answer(flow.guardian1, "guardian/g1", question))
    }

    func cancelled(_ question: AnyPermissionQuestion) throws {
        try presented(question)
        try child.expectAck(try cancel(question))
    }

    // Ledger requests, with the subject every such kind carries.

    func send(_ question: AnyPermissionQuestion, from peer: RawPeer? = nil, address: String = "child/c1") throws
        -> MessageID
    {
        try (peer ?? child).send(SendQuestion(questionID: question.id), from: address, to: "broker")
    }

    func cancel(_ question: AnyPermissionQuestion) throws -> MessageID {
        try child.send(CancelQuestion(questionID: question.id), from: "child/c1", to: "broker")
    }

    func answer(
        _ peer: RawPeer,
        _ address: String,
        _ question: AnyPermissionQuestion,
        choice: String = PermissionChoice.approve.id
    ) throws -> MessageID {
        try peer.send(GuardianAnswer(questionID: question.id, choiceID: choice), from: address, to: "broker")
    }
}

/// What a provocation got: the NACK, and the id of the message it refused (nil when that message had none).
struct Refusal {
    let nack: Received
    let sent: MessageID?
}

/// One way to provoke one row of the error table.
struct Provocation: Sendable, CustomTestStringConvertible {
    let row: String
    let name: String
    let run: @Sendable () throws -> Refusal
    var testDescription: String { "\(row): \(name)" }

    init(_ row: String, _ name: String, _ run: @escaping @Sendable () throws -> Refusal) {
        self.row = row
        self.name = name
        self.run = run
    }
}

/// Runs `body` against a fresh broker and its peers, and stops them whatever happens.
func inWorld(
    durability: Durability = .off,
    configure: (inout BrokerConfiguration) -> Void = { _ in },
    _ body: (ConformanceWorld) throws -> Refusal
) throws -> Refusal {
    let world = try ConformanceWorld(durability: durability, configure: configure)
    defer { world.stop() }
    return try body(world)
}

let command = (
    hello: WireCommand.hello.rawValue, welcome: WireCommand.welcome.rawValue, heartbeat: WireCommand.heartbeat.rawValue,
    send: WireCommand.send.rawValue, deliver: WireCommand.deliver.rawValue, ack: WireCommand.ack.rawValue,
    nack: WireCommand.nack.rawValue, bye: WireCommand.bye.rawValue
)

/// A SEND from client/1 with id `id` (to echo/1, kind echo unless the header says otherwise), carrying `acks` bytes
/// after the kind.
func clientSend(
    _ id: MessageID,
    to: String = "echo/1",
    kind: String = "echo",
    from: String = "client/1",
    acks: [UInt8] = [],
    _ rest: [[UInt8]] = [[]]
) -> [[UInt8]] {
    send(header(id: id.bytes, from: utf8(from), to: utf8(to), kind: utf8(kind), trailing: acks), rest)
}

func helloFrames(_ json: String) -> [[UInt8]] { [lead(.hello), utf8(json)] }

let smallBody: @Sendable (inout BrokerConfiguration) -> Void = { $0.limits.maxBody = 1 << 16 }

let provocations: [Provocation] = [
    // Framing: the parser's verdicts.
    .init("bad-signature", "the lead frame begins with MDPW") {
        try inWorld { w in try w.refuse(w.client, [utf8("MDPW") + [command.heartbeat]]) }
    },
    .init("bad-signature", "one frame that is not a lead (judged before the frame count)") {
        try inWorld { w in try w.refuse(w.client, [utf8("MDPW")]) }
    },
    .init("bad-signature", "frame 0 is empty") {
        try inWorld { w in try w.refuse(w.client, [[], [command.heartbeat]]) }
    },
    .init("unsupported-version.signature", "a version 1 HEARTBEAT (signature and command in two frames)") {
        try inWorld { w in try w.refuse(w.client, [[0x41, 0x53, 0x4B, 0x01], [command.heartbeat]]) }
    },
    .init("unsupported-version.signature", "version byte 3") {
        try inWorld { w in try w.refuse(w.client, [[0x41, 0x53, 0x4B, 0x03, command.heartbeat]]) }
    },
    .init("unsupported-version.hello", "HELLO version 1") {
        try inWorld { w in
            let peer = try w.newPeer()
            try peer.hello(role: .echo, endpoints: [EndpointClaim(address: "echo/9")], version: 1)
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("unknown-command", "command 0x7f") { try inWorld { w in try w.refuse(w.client, [signature + [0x7F]]) } },
    .init("unknown-command", "the signature alone") { try inWorld { w in try w.refuse(w.client, [signature]) } },
    .init("missing-frames", "a SEND without its body") {
        try inWorld { w in try w.refuse(w.client, clientSend(.random(), [])) }
    },
    .init("extra-frames", "a HEARTBEAT with a body") {
        try inWorld { w in try w.refuse(w.client, [lead(.heartbeat), [1]]) }
    },
    .init("extra-frames", "a SEND of three frames") {
        try inWorld { w in try w.refuse(w.client, clientSend(.random(), [utf8("{}"), []])) }
    },
    .init("extra-frames", "a SEND in the version 1 layout after the version 2 signature") {
        try inWorld { w in try w.refuse(w.client, [lead(.send), header(), utf8("{}")]) }
    },
    .init("oversize-frame.hello", "a HELLO body one byte over the limit") {
        try inWorld(configure: smallBody) { w in
            try w.refuse(try w.newPeer(), [lead(.hello), [UInt8](repeating: 0x20, count: (1 << 16) + 1)])
        }
    },
    .init("oversize-frame.body", "a SEND body one byte over the limit") {
        try inWorld(configure: smallBody) { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, [[UInt8](repeating: 0x20, count: (1 << 16) + 1)]), sent: id)
        }
    },
    .init("oversize-frame.carried-acks", "4097 carried ACK ids") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, acks: [UInt8](repeating: 7, count: 4097 * 16)), sent: id)
        }
    },
    .init("oversize-frame.ack", "an ACK of 4097 ids") {
        try inWorld { w in try w.refuse(w.client, [lead(.ack, [UInt8](repeating: 7, count: 4097 * 16))]) }
    },
    .init("oversize-frame.reason", "a NACK reason of 1025 bytes") {
        try inWorld { w in
            try w.refuse(
                w.client,
                [lead(.nack), utf8("busy"), [UInt8](repeating: 0x61, count: 1025)]
            )
        }
    },
    .init("oversize-frame.reason", "a BYE reason of 1025 bytes") {
        try inWorld { w in try w.refuse(w.client, [lead(.bye), [UInt8](repeating: 0x61, count: 1025)]) }
    },
    .init("bad-id.ack", "an ACK of 17 bytes") {
        try inWorld { w in try w.refuse(w.client, [lead(.ack, [UInt8](repeating: 1, count: 17))]) }
    },
    .init("bad-id.ack", "an empty ACK") {
        try inWorld { w in try w.refuse(w.client, [lead(.ack, [])]) }
    },
    .init("bad-id.carried-acks", "17 bytes of carried ACK ids") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, acks: [UInt8](repeating: 1, count: 17)), sent: id)
        }
    },
    .init("bad-id.carried-acks", "one byte after the kind") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, acks: [0]), sent: id)
        }
    },
    .init("bad-id.nack", "a NACK id of 3 bytes") {
        try inWorld { w in try w.refuse(w.client, [lead(.nack, [1, 2, 3]), utf8("busy"), []]) }
    },
    .init("bad-address.header", "an upper-case role in to") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, to: "Echo/1"), sent: id)
        }
    },
    .init("bad-address.header", "an empty from") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, from: ""), sent: id)
        }
    },
    .init("bad-address.header", "a to of 129 bytes") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, to: "echo/" + String(repeating: "a", count: 124)), sent: id)
        }
    },
    .init("bad-address.header", "a DELIVER (sent to the broker) with an upper-case role in to") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(
                w.client,
                [lead(.deliver, header(id: id.bytes, to: utf8("Echo/1"))), []],
                sent: id
            )
        }
    },
    .init("bad-address.ask", "an ask to limits/l1") {
        try inWorld { w in
            let id = try w.child.send(AskRequest(question: FlowHarness.question()), from: "child/c1", to: "limits/l1")
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-address.ask-result", "a result for child/c1's question sent to child/c2") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            let id = try w.limits.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: "limits/l1",
                to: "child/c2"
            )
            return try w.refusal(w.limits, id)
        }
    },
    .init("bad-address.limits-admin", "limits.admin to child/c1") {
        try inWorld { w in
            let id = try w.observer.send(
                LimitsAdminChange(child: "c1", limitsEnabled: false),
                from: "observer/o1",
                to: "child/c1"
            )
            return try w.refusal(w.observer, id)
        }
    },
    .init("bad-kind.header", "an upper-case kind") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, kind: "Echo"), sent: id)
        }
    },
    .init("bad-kind.header", "an empty kind") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, kind: ""), sent: id)
        }
    },
    .init("bad-kind.nack", "an empty NACK code") {
        try inWorld { w in try w.refuse(w.client, [lead(.nack), [], []]) }
    },
    .init("invalid-utf8.hello", "a HELLO body of invalid UTF-8") {
        try inWorld { w in try w.refuse(try w.newPeer(), [lead(.hello), [0xC3, 0x28]]) }
    },
    .init("invalid-utf8.body", "a send body of invalid UTF-8") {
        try inWorld { w in
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "broker",
                kind: "send",
                subject: .random(),
                body: [0xFF]
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("invalid-utf8.reason", "a BYE reason of invalid UTF-8") {
        try inWorld { w in try w.refuse(w.client, [lead(.bye), [0xFF]]) }
    },
    .init("invalid-utf8.reason", "a NACK reason of invalid UTF-8") {
        try inWorld { w in try w.refuse(w.client, [lead(.nack), utf8("busy"), [0xC3, 0x28]]) }
    },
    .init("invalid-json.hello", "a HELLO body that is not JSON") {
        try inWorld { w in try w.refuse(try w.newPeer(), helloFrames("{not json")) }
    },
    .init("invalid-json.hello", "a HELLO with an unknown role") {
        try inWorld { w in
            try w.refuse(
                try w.newPeer(),
                helloFrames(#"{"version":2,"role":"king","worker":"w","endpoints":[{"address":"echo/1"}]}"#)
            )
        }
    },
    .init("invalid-json.clock-advance", "a clock.advance that moves backwards") {
        try inWorld(configure: { $0.clock = DrivenClock() }) { w in
            let body = utf8(#"{"milliseconds":-1}"#)
            let id = try w.observer.sendMessage(from: "observer/o1", to: "broker", kind: ClockAdvance.kind, body: body)
            return try w.refusal(w.observer, id)
        }
    },
    .init("invalid-json.body", "a send body without questionID") {
        try inWorld { w in
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "broker",
                kind: "send",
                subject: .random(),
                body: utf8("{}")
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("invalid-json.body", "an ask body that is not an AskRequest") {
        try inWorld { w in
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "limits",
                kind: "ask",
                subject: .random(),
                body: utf8(#"{"question":1}"#)
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("unknown-kind", "an echo to broker") {
        try inWorld { w in
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "broker",
                kind: "echo",
                body: utf8(#"{"payload":"x"}"#)
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-subject.ask", "an ask whose subject is another id") {
        try inWorld { w in
            let body = try WireJSON.encode(AskRequest(question: FlowHarness.question()))
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "limits",
                kind: "ask",
                subject: .random(),
                body: body
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-subject.ask", "an ask without a subject") {
        try inWorld { w in
            let body = try WireJSON.encode(AskRequest(question: FlowHarness.question()))
            let id = try w.child.sendMessage(from: "child/c1", to: "limits", kind: "ask", subject: nil, body: body)
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-subject.question-id", "a send without a subject") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.presented(question)
            let body = try WireJSON.encode(SendQuestion(questionID: question.id))
            let id = try w.child.sendMessage(from: "child/c1", to: "broker", kind: "send", subject: nil, body: body)
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-subject.question-id", "a cancel whose subject is another question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.presented(question)
            let body = try WireJSON.encode(CancelQuestion(questionID: question.id))
            let id = try w.child.sendMessage(
                from: "child/c1",
                to: "broker",
                kind: "cancel",
                subject: .random(),
                body: body
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("bad-subject.question-id", "an answer without a subject") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.sent(question)
            let body = try WireJSON.encode(
                GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id)
            )
            let id = try w.flow.guardian1.sendMessage(
                from: "guardian/g1",
                to: "broker",
                kind: "answer",
                subject: nil,
                body: body
            )
            return try w.refusal(w.flow.guardian1, id)
        }
    },
    .init("bad-subject.question-id", "an ask.result whose subject is another question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            let body = try WireJSON.encode(AskResult(questionID: question.id, outcome: .presented))
            let id = try w.limits.sendMessage(
                from: "limits/l1",
                to: "child/c1",
                kind: "ask.result",
                subject: .random(),
                body: body
            )
            return try w.refusal(w.limits, id)
        }
    },
    .init("bad-header", "a header of 16 bytes (the id alone)") {
        try inWorld { w in try w.refuse(w.client, send(validID)) }
    },
    .init("bad-header", "header flags 0x04") { try inWorld { w in try w.refuse(w.client, send(header(flags: 4))) } },
    .init("bad-header", "the trace flag without a trace context") {
        try inWorld { w in try w.refuse(w.client, send(header(flags: 2))) }
    },
    .init("bad-header", "a trace context whose parent id is zero") {
        try inWorld { w in
            let trace = MessageID.random().bytes + [UInt8](repeating: 0, count: 8) + [1]
            return try w.refuse(w.client, send(validID + [2] + trace + Array(header().dropFirst(17))))
        }
    },
    .init("bad-header.lead", "a HEARTBEAT with a byte after the command") {
        try inWorld { w in try w.refuse(w.client, [lead(.heartbeat, [0])]) }
    },
    .init("bad-header.lead", "a BYE whose reason is in the lead frame") {
        try inWorld { w in try w.refuse(w.client, [lead(.bye, utf8("bye"))]) }
    },

    // Sessions.
    .init("not-registered.other", "a HEARTBEAT before HELLO") {
        try inWorld { w in try w.refuse(try w.newPeer(), [lead(.heartbeat)]) }
    },
    .init("not-registered.other", "an ACK before HELLO") {
        try inWorld { w in try w.refuse(try w.newPeer(), [lead(.ack, validID)]) }
    },
    .init("not-registered.send", "a SEND before HELLO") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(try w.newPeer(), clientSend(id), sent: id)
        }
    },
    .init("bad-hello.count", "no endpoints") {
        try inWorld { w in
            try w.refuse(try w.newPeer(), helloFrames(#"{"version":2,"role":"echo","worker":"w","endpoints":[]}"#))
        }
    },
    .init("bad-hello.count", "200 001 endpoints (with a body limit that lets them through)") {
        try inWorld(configure: { $0.limits.maxBody = 8 << 20 }) { w in
            let peer = try w.newPeer()
            try peer.hello(role: .echo, endpoints: (0...200_000).map { EndpointClaim(address: "echo/e\($0)") })
            return Refusal(nack: try peer.expectNack(timeout: .seconds(20)), sent: nil)
        }
    },
    .init("bad-hello.claim", "an address claimed twice") {
        try inWorld { w in
            try w.refuse(
                try w.newPeer(),
                helloFrames(
                    #"{"version":2,"role":"echo","worker":"w","endpoints":[{"address":"echo/9"},{"address":"echo/9"}]}"#
                )
            )
        }
    },
    .init("bad-hello.claim", "a claim without an id") {
        try inWorld { w in
            try w.refuse(
                try w.newPeer(),
                helloFrames(#"{"version":2,"role":"echo","worker":"w","endpoints":[{"address":"echo"}]}"#)
            )
        }
    },
    .init("address-taken", "a claim of guardian/g1 while g1's session lives") {
        try inWorld { w in
            let peer = try w.newPeer()
            try peer.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("forbidden.welcome", "a WELCOME sent to the broker") {
        try inWorld { w in try w.refuse(w.client, [lead(.welcome), utf8("{}")]) }
    },
    .init("forbidden.deliver", "a DELIVER sent to the broker") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, [lead(.deliver, header(id: id.bytes)), []], sent: id)
        }
    },
    .init("forbidden.hello-role", "an echo session claiming client/9") {
        try inWorld { w in
            let peer = try w.newPeer()
            try peer.hello(role: .echo, endpoints: [EndpointClaim(address: "client/9")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("wrong-shard", "a sharded broker and a guardian claim of another broker's family") {
        // Of b0 and b1, f0's shard is b0 (the vectors of ShardTests); this broker is b1.
        let sharded: (inout BrokerConfiguration) -> Void = { configuration in
            configuration.shardName = "b1"
            configuration.brokers = try? BrokerList(parsing: "b0=tcp://127.0.0.1:1,b1=tcp://127.0.0.1:2")
        }
        return try inWorld(configure: sharded) { w in
            let peer = try w.newPeer()
            try peer.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g9", family: "f0")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("moved.hello", "a claim of a family that moved to another broker") {
        try inWorld(durability: .batch, configure: movable) { w in
            try w.moveAway("f1")
            let peer = try w.newPeer()
            try peer.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g9", family: "f1")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("moving.hello", "a claim of a family held for a move") {
        try inWorld(durability: .batch, configure: movable) { w in
            try w.hold("f1")
            let peer = try w.newPeer()
            try peer.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g9", family: "f1")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("moving.send", "an ask of a child whose family is held for a move") {
        try inWorld(durability: .batch, configure: movable) { w in
            try w.hold("f1")
            let id = try w.child.send(AskRequest(question: FlowHarness.question()), from: "child/c1", to: "limits")
            return try w.refusal(w.child, id)
        }
    },
    .init("moving.send", "a limits.admin for a child whose limits state is being read for its family's move") {
        try inWorld(durability: .batch, configure: movable) { w in
            try w.hold("f1")
            #expect(try w.reply(AdminRequest(op: "export", epoch: 1, family: "f1")).retry == true)
            let id = try w.observer.send(
                LimitsAdminChange(child: "c1", limitsEnabled: false),
                from: "observer/o1",
                to: "limits"
            )
            return try w.refusal(w.observer, id)
        }
    },
    .init("forbidden.hello-family", "a child claim without a family") {
        try inWorld { w in
            let peer = try w.newPeer()
            try peer.hello(role: .child, endpoints: [EndpointClaim(address: "child/c9", family: nil)])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("forbidden.hello-family", "a guardian claim with a family outside the id grammar") {
        try inWorld { w in
            let peer = try w.newPeer()
            try peer.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g9", family: "f 1")])
            return Refusal(nack: try peer.expectNack(), sent: nil)
        }
    },
    .init("forbidden.hello-principal", "with CURVE, a child key claiming another child's address") {
        let world = try SecureWorld()
        defer { world.stop() }
        let peer = try world.peer(.child)
        try peer.hello(role: .child, endpoints: [EndpointClaim(address: "child/c2", family: "f2")])
        return Refusal(nack: try peer.expectNack(), sent: nil)
    },
    .init("forbidden.from", "a SEND from an address the session did not claim") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, from: "client/2"), sent: id)
        }
    },
    .init("forbidden.broker-only", "a worker sending a question to a guardian") {
        try inWorld { w in
            let id = try w.client.sendMessage(from: "client/1", to: "guardian/g1", kind: "question", body: utf8("{}"))
            return try w.refusal(w.client, id)
        }
    },
    .init("forbidden.ask", "a guardian asking") {
        try inWorld { w in
            let id = try w.flow.guardian1.send(
                AskRequest(question: FlowHarness.question()),
                from: "guardian/g1",
                to: "limits"
            )
            return try w.refusal(w.flow.guardian1, id)
        }
    },
    .init("forbidden.ask-result", "a child admitting its own question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            let id = try w.child.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: "child/c1",
                to: "child/c1"
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("forbidden.ask-result", "a limits worker admitting a question routed to another live one") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            let other = try w.newPeer()
            try other.register(role: .limits, ["limits/l2"])
            let id = try other.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: "limits/l2",
                to: "child/c1"
            )
            return try w.refusal(other, id)
        }
    },
    .init("forbidden.limits-admin", "a child changing limits state") {
        try inWorld { w in
            let id = try w.child.send(
                LimitsAdminChange(child: "c1", limitsEnabled: false),
                from: "child/c1",
                to: "limits"
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("forbidden.limits-state", "a child sending a limits.state to the broker") {
        try inWorld { w in
            let id = try w.child.send(
                LimitsStateReport(child: "c1", state: LimitsState()),
                from: "child/c1",
                to: "broker"
            )
            return try w.refusal(w.child, id)
        }
    },
    .init("forbidden.clock-advance", "an observer advancing the clock of a broker that keeps real time") {
        try inWorld { w in
            let body = utf8(#"{"milliseconds":1000}"#)
            let id = try w.observer.sendMessage(from: "observer/o1", to: "broker", kind: ClockAdvance.kind, body: body)
            return try w.refusal(w.observer, id)
        }
    },
    .init("forbidden.clock-advance", "a child advancing a driven clock") {
        try inWorld(configure: { $0.clock = DrivenClock() }) { w in
            let body = utf8(#"{"milliseconds":1000}"#)
            let id = try w.child.sendMessage(from: "child/c1", to: "broker", kind: ClockAdvance.kind, body: body)
            return try w.refusal(w.child, id)
        }
    },
    .init("forbidden.other-child", "child/c2 sending child/c1's question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.presented(question)
            let id = try w.send(question, from: w.child2, address: "child/c2")
            return try w.refusal(w.child2, id)
        }
    },
    .init("forbidden.answer", "a child answering") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.sent(question)
            let id = try w.answer(w.child, "child/c1", question)
            return try w.refusal(w.child, id)
        }
    },
    .init("no-route", "a SEND to nobody/1") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, to: "nobody/1"), sent: id)
        }
    },
    .init("no-route", "a SEND to the bare role child") {
        try inWorld { w in
            let id = MessageID.random()
            return try w.refuse(w.client, clientSend(id, to: "child"), sent: id)
        }
    },
    .init("busy.address", "a second message for an address holding --max-queue 1, without a journal") {
        try inWorld(configure: { $0.maxQueuedPerAddress = 1 }) { w in
            try w.client.expectAck(try w.client.sendMessage(from: "client/1", to: "echo/away", kind: "echo", body: []))
            let id = try w.client.sendMessage(from: "client/1", to: "echo/away", kind: "echo", body: [])
            return try w.refusal(w.client, id)
        }
    },
    .init("busy.total", "a second message while the broker holds --max-queued-total 1") {
        try inWorld(configure: { $0.maxQueuedTotal = 1 }) { w in
            try w.client.expectAck(try w.client.sendMessage(from: "client/1", to: "echo/a", kind: "echo", body: []))
            let id = try w.client.sendMessage(from: "client/1", to: "echo/b", kind: "echo", body: [])
            return try w.refusal(w.client, id)
        }
    },
    .init("storage-failed", "another connection holds the journal's write lock") {
        try inWorld(durability: .batch) { w in
            // A second SQLite connection opens a write transaction on the broker's journal and keeps it: the broker's
            // next write waits out its busy timeout and fails, as with any other writer holding the file.
            let holder = try Journal(directory: w.broker.directory.path, durability: .batch)
            try holder.addGuardian(family: "lock", guardian: "holder")
            defer { _ = try? holder.commitIfNeeded() }
            let id = try w.client.sendMessage(from: "client/1", to: "echo/away", kind: "echo", body: [])
            return Refusal(nack: try w.client.expectNack(timeout: .seconds(15)), sent: id)
        }
    },

    // The question ledger.
    .init("invalid-question", "an expiry in the past; the reason is the InvalidQuestionReason JSON") {
        try inWorld { w in
            let question = FlowHarness.question(expiresIn: -60)
            let id = try w.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
            let refusal = try w.refusal(w.child, id)
            let reason = try WireJSON.decode(InvalidQuestionReason.self, from: utf8(refusal.nack.reason))
            #expect(reason.field == "expirationDate")
            #expect(reason.code == .inPast)
            #expect(!reason.message.isEmpty)
            return refusal
        }
    },
    .init("duplicate-question", "the same question asked twice") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            let id = try w.child.send(AskRequest(question: question), from: "child/c1", to: "limits")
            return try w.refusal(w.child, id)
        }
    },
    .init("unknown-question", "a send of a question never asked") {
        try inWorld { w in try w.refusal(w.child, try w.send(FlowHarness.question())) }
    },
    .init("unknown-question", "an ask.result for a question never asked") {
        try inWorld { w in
            let id = try w.limits.send(
                AskResult(questionID: UUID(), outcome: .presented),
                from: "limits/l1",
                to: "child/c1"
            )
            return try w.refusal(w.limits, id)
        }
    },
    .init("not-presented.send", "a send while the question is admitting") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            return try w.refusal(w.child, try w.send(question))
        }
    },
    .init("not-presented.send", "a send of a refused question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.refused(question)
            return try w.refusal(w.child, try w.send(question))
        }
    },
    .init("not-presented.refused", "a cancel of a refused question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.refused(question)
            return try w.refusal(w.child, try w.cancel(question))
        }
    },
    .init("not-presented.refused", "an answer to a refused question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.refused(question)
            return try w.refusal(w.flow.guardian1, try w.answer(w.flow.guardian1, "guardian/g1", question))
        }
    },
    .init("not-sent", "an answer while the question is admitting") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.admitting(question)
            return try w.refusal(w.flow.guardian1, try w.answer(w.flow.guardian1, "guardian/g1", question))
        }
    },
    .init("not-sent", "an answer while the question is presented") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.presented(question)
            return try w.refusal(w.flow.guardian1, try w.answer(w.flow.guardian1, "guardian/g1", question))
        }
    },
    .init("already-sent", "a second send with a new id; the retry of the first is acknowledged again") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.presented(question)
            let first = try w.send(question)
            try w.child.expectAck(first)
            let body = try WireJSON.encode(SendQuestion(questionID: question.id))
            try w.child.sendMessage(
                from: "child/c1",
                to: "broker",
                kind: "send",
                subject: MessageID(uuid: question.id),
                body: body,
                id: first
            )
            try w.child.expectAck(first)
            return try w.refusal(w.child, try w.send(question))
        }
    },
    .init("already-sent", "a cancel of a sent question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.sent(question)
            return try w.refusal(w.child, try w.cancel(question))
        }
    },
    .init("already-closed", "a second guardian's answer") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.answered(question)
            return try w.refusal(w.flow.guardian2, try w.answer(w.flow.guardian2, "guardian/g2", question))
        }
    },
    .init("already-closed", "a send of an answered question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.answered(question)
            return try w.refusal(w.child, try w.send(question))
        }
    },
    .init("already-closed", "a cancel of an answered question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.answered(question)
            return try w.refusal(w.child, try w.cancel(question))
        }
    },
    .init("expired", "an answer, a send and a cancel after the guardians were told it expired") {
        try inWorld { w in
            let question = FlowHarness.question(expiresIn: 2)
            try w.sent(question)
            // The broker's own signal that the deadline passed: `closed` (expired) to every guardian.
            let closed = try w.flow.guardian1.expectDelivery(kind: "closed", timeout: .seconds(10))
            #expect(try closed.decode(QuestionClosed.self).reason == .expired)
            let sendID = try w.send(question)
            #expect(try w.child.expectNack(sendID).code == ErrorCode.expired.rawValue)
            let cancelID = try w.cancel(question)
            #expect(try w.child.expectNack(cancelID).code == ErrorCode.expired.rawValue)
            return try w.refusal(w.flow.guardian2, try w.answer(w.flow.guardian2, "guardian/g2", question))
        }
    },
    .init("cancelled", "a send, a cancel and an answer of a cancelled question") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.cancelled(question)
            let sendID = try w.send(question)
            #expect(try w.child.expectNack(sendID).code == ErrorCode.cancelled.rawValue)
            let answerID = try w.answer(w.flow.guardian1, "guardian/g1", question)
            #expect(try w.flow.guardian1.expectNack(answerID).code == ErrorCode.cancelled.rawValue)
            return try w.refusal(w.child, try w.cancel(question))
        }
    },
    .init("not-guardian", "a guardian of another family answering") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.sent(question)
            return try w.refusal(w.flow.stranger, try w.answer(w.flow.stranger, "guardian/x1", question))
        }
    },
    .init("invalid-choice", "an answer naming a choice the question does not have") {
        try inWorld { w in
            let question = FlowHarness.question()
            try w.sent(question)
            return try w.refusal(
                w.flow.guardian1,
                try w.answer(w.flow.guardian1, "guardian/g1", question, choice: "nope")
            )
        }
    },
]

@Suite("Conformance: every row of the error table against a real broker", .timeLimit(.minutes(5)))
struct ConformanceTests {
    @Test("each provocation gets exactly its row's code, and the NACK id the row says", arguments: provocations)
    func row(_ provocation: Provocation) throws {
        let row = try #require(ErrorTable.condition(provocation.row), "no row '\(provocation.row)' in ErrorTable")
        let refusal = try provocation.run()
        #expect(refusal.nack.code == row.code.rawValue, "\(provocation.name): got \(refusal.nack)")
        #expect(!refusal.nack.reason.isEmpty)
        switch row.nackID {
        case .message:
            #expect(refusal.sent != nil, "the provocation must say which id it sent")
            #expect(
                refusal.nack.id == refusal.sent,
                "\(provocation.name): the NACK must carry the refused message's id"
            )
        case .empty:
            #expect(refusal.nack.id == nil, "\(provocation.name): the NACK id must be empty")
        }
    }

    @Test("every row of the table has a provocation, and every provocation names a row")
    func coverage() {
        let rows = Set(ErrorTable.conditions.map(\.id))
        let provoked = Set(provocations.map(\.row))
        #expect(rows.subtracting(provoked).sorted() == [], "rows nobody provokes")
        #expect(provoked.subtracting(rows).sorted() == [], "provocations of rows the table does not have")
    }
}

/// One broker named b0 in a list of its own, with an admin endpoint in its data folder: its families can be held
/// and moved away (docs/scaling.md, "Rebalancing").
func movable(_ configuration: inout BrokerConfiguration) {
    configuration.shardName = "b0"
    configuration.brokers = try? BrokerList(parsing: "b0=tcp://127.0.0.1:1")
    configuration.adminEndpoint = "ipc://\(configuration.dataDirectory)/admin.sock"
}

extension ConformanceWorld {
    @discardableResult
    func admin(_ request: AdminRequest) throws -> AdminReply {
        let reply = try self.reply(request)
        guard reply.ok else { throw TestFailure("\(request.op) refused: \(reply.error ?? "")") }
        return reply
    }

    /// The broker's reply to an admin request, whatever it says.
    func reply(_ request: AdminRequest) throws -> AdminReply {
        let socket = try flow.context.socket(.req)
        try socket.set(.linger, 0)
        try socket.connect("ipc://\(flow.broker.directory.path)/admin.sock")
        _ = try socket.send(Array(try JSONEncoder().encode(request)))
        guard try socket.wait(timeoutMilliseconds: 10_000), let (frame, _) = try socket.receive(.dontWait) else {
            throw TestFailure("the broker did not answer \(request.op)")
        }
        return try JSONDecoder().decode(AdminReply.self, from: Data(frame))
    }

    func hold(_ family: String) throws {
        try admin(AdminRequest(op: "hold", epoch: 1, family: family, destination: "b1=tcp://127.0.0.1:2"))
    }

    /// Holds, exports and releases `family`, as `askrelay rebalance` does (the import is another broker's).
    func moveAway(_ family: String) throws {
        try hold(family)
        try export(family)
        try admin(AdminRequest(op: "release", epoch: 1, family: family))
    }

    /// Exports a held `family`: the broker first reads each child's limits state from the limits worker
    /// (`limits.read`, answered here by the raw limits peer with a `limits.state`), asking to be retried meanwhile.
    func export(_ family: String) throws {
        let request = AdminRequest(op: "export", epoch: 1, family: family)
        for _ in 0..<5 {
            let reply = try reply(request)
            if reply.ok { return }
            guard reply.retry == true else { throw TestFailure("export refused: \(reply.error ?? "")") }
            try answerLimitsRead()
        }
        throw TestFailure("export still waits after five limits reads")
    }

    /// The limits peer answers one `limits.read` of the broker. - Returns: the child it named.
    @discardableResult
    func answerLimitsRead(state: LimitsState = LimitsState()) throws -> String {
        let read = try limits.expectDelivery(kind: MessageKind.limitsRead.rawValue)
        #expect(read.from == "broker")
        try limits.ack([read.id!])
        let child = try read.decode(LimitsStateRead.self).child
        try limits.expectAck(
            try limits.send(LimitsStateReport(child: child, state: state), from: "limits/l1", to: "broker")
        )
        return child
    }
}
