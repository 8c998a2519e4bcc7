import AskProtocol
import Foundation
import Testing

// MARK: - Helpers

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

let signature: [UInt8] = [0x41, 0x53, 0x4B, 0x02]

/// A lead frame: the signature, the command byte, then `rest` (a SEND's header and carried ids, an ACK's ids, a
/// NACK's refused id).
func lead(_ command: UInt8, _ rest: [UInt8] = []) -> [UInt8] { signature + [command] + rest }
/// A ROUTER identity as libzmq generates it (5 bytes, first byte 0).
let routerIdentity: [UInt8] = [0x00, 0x80, 0x00, 0x41, 0xA7]

let idA = MessageID(hex: "0123456789abcdef0011223344556677")!
let idB = MessageID(hex: "6f1c4a3e2b7d4e599a0c1d2e3f405162")!

/// Encodes with `build` after an optional ROUTER identity frame, then parses at the matching base.
func encodeAndParse(base: Int, _ build: (inout Multipart) -> Void) throws(WireError) -> (ParsedFrames, Multipart) {
    var message = Multipart()
    if base == 1 { message.append(routerIdentity) }
    build(&message)
    return (try WireParser.parse(message, base: base), message)
}

// MARK: - Round trips

@Suite("Wire round trips")
struct WireRoundTripTests {
    @Test(
        "SEND and DELIVER keep id, addresses, kind, subject and body",
        arguments: [0, 1],
        [WireCommand.send, .deliver]
    )
    func message(base: Int, command: WireCommand) throws {
        let body = bytes(#"{"questionID":"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"}"#)
        let (parsed, message) = try encodeAndParse(base: base) {
            WireEncoder.message(
                command,
                id: idA,
                from: "child/c-17",
                to: "broker",
                kind: "send",
                subject: idB,
                body: body,
                into: &$0
            )
        }
        #expect(message.count == base + 2)
        #expect(parsed.command == command)
        #expect(parsed.base == base)
        #expect(parsed.id == idA)
        #expect(parsed.subject == idB)
        #expect(message.from(parsed) == "child/c-17")
        #expect(message.to(parsed) == "broker")
        #expect(message.kind(parsed) == "send")
        #expect(message.bytes(parsed.fromRange, equal: "child/c-17"))
        #expect(!message.bytes(parsed.toRange, equal: "brokers"))
        #expect(Array(message[parsed.bodyFrame]) == body)
        // The lead frame: signature, command, then the header: id, flags 1, subject, each field after its length
        // byte; no carried ids.
        let header =
            idA.bytes + [1] + idB.bytes + [10] + bytes("child/c-17") + [6] + bytes("broker") + [4] + bytes("send")
        #expect(Array(message.header(parsed)) == header)
        #expect(Array(message[base]) == lead(command.rawValue, header))
        #expect(parsed.leadFrame == base && parsed.bodyFrame == base + 1)
        #expect(!parsed.carriesAcks && parsed.trace == nil)
        // Field ranges lie inside the header.
        for range in [parsed.fromRange, parsed.toRange, parsed.kindRange] {
            #expect(
                range.lowerBound >= parsed.headerRange.lowerBound && range.upperBound <= parsed.headerRange.upperBound
            )
        }
    }

    @Test(
        "SEND and DELIVER may carry ACK ids after the header, in the lead frame",
        arguments: [0, 1],
        [WireCommand.send, .deliver]
    )
    func messageCarryingAcks(base: Int, command: WireCommand) throws {
        let body = bytes(#"{"ok":true}"#)
        let (parsed, message) = try encodeAndParse(base: base) {
            WireEncoder.message(
                command,
                id: idA,
                from: "echo/e1",
                to: "client/c1",
                kind: "echo",
                subject: nil,
                acks: [idB, idA],
                body: body,
                into: &$0
            )
        }
        #expect(message.count == base + 2)
        #expect(parsed.carriesAcks)
        #expect(parsed.bodyFrame == base + 1)
        #expect(message.ackIDs(parsed) == [idB, idA])
        #expect(Array(message[base].suffix(32)) == idB.bytes + idA.bytes)
        #expect(parsed.ackRange.lowerBound == parsed.headerRange.upperBound)
        #expect(Array(message[parsed.bodyFrame]) == body)
        #expect(message.to(parsed) == "client/c1")
        // Without ACK ids: the lead ends with the kind, and there are no ids.
        let (plain, plainMessage) = try encodeAndParse(base: base) {
            WireEncoder.message(
                command,
                id: idA,
                from: "echo/e1",
                to: "client/c1",
                kind: "echo",
                subject: nil,
                acks: [],
                body: body,
                into: &$0
            )
        }
        #expect(plainMessage.count == base + 2 && !plain.carriesAcks && plainMessage.ackIDs(plain).isEmpty)
        #expect(plainMessage.size(of: base) == message.size(of: base) - 32)
    }

    @Test("SEND without a subject and with an empty body", arguments: [0, 1])
    func messageWithoutSubject(base: Int) throws {
        let (parsed, message) = try encodeAndParse(base: base) {
            WireEncoder.message(
                .send,
                id: idB,
                from: "echo/e1",
                to: "limits",
                kind: "echo",
                subject: nil,
                body: [],
                into: &$0
            )
        }
        #expect(parsed.id == idB)
        #expect(parsed.subject == nil)
        #expect(
            Array(message.header(parsed)) == idB.bytes + [0, 7] + bytes("echo/e1") + [6] + bytes("limits") + [4]
                + bytes("echo")
        )
        #expect(message.size(of: parsed.bodyFrame) == 0)
        #expect(message.to(parsed) == "limits")
    }

    @Test("HELLO and WELCOME carry their JSON body", arguments: [0, 1])
    func session(base: Int) throws {
        let hello = Hello(
            role: .guardian,
            worker: "askrelay-parent[42]",
            endpoints: [.init(address: "guardian/g1", family: "f7")],
            window: 32,
            heartbeatMs: 500
        )
        let (parsedHello, helloMessage) = try encodeAndParse(base: base) {
            WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &$0)
        }
        #expect(parsedHello.command == .hello)
        #expect(parsedHello.bodyFrame == base + 1)
        #expect(Array(helloMessage[base]) == lead(0x01))
        #expect(parsedHello.id == nil)
        let decodedHello = try helloMessage.withFrame(parsedHello.bodyFrame) {
            try SessionJSON.decode(Hello.self, from: $0.bindMemory(to: UInt8.self))
        }
        #expect(decodedHello == hello)

        let welcome = Welcome(session: "abc-1", heartbeatMs: 1000, liveness: 3, window: 32, broker: "abc")
        let (parsedWelcome, welcomeMessage) = try encodeAndParse(base: base) {
            WireEncoder.session(.welcome, body: SessionJSON.encode(welcome), into: &$0)
        }
        #expect(parsedWelcome.command == .welcome)
        #expect(try SessionJSON.decode(Welcome.self, from: welcomeMessage[parsedWelcome.bodyFrame]) == welcome)
    }

    @Test("HEARTBEAT is one frame", arguments: [0, 1])
    func heartbeat(base: Int) throws {
        let (parsed, message) = try encodeAndParse(base: base) { WireEncoder.heartbeat(into: &$0) }
        #expect(parsed.command == .heartbeat)
        #expect(message.count == base + 1)
        #expect(Array(message[base]) == lead(0x03))
        #expect(parsed.id == nil && parsed.subject == nil)
    }

    @Test("ACK keeps every id in order, from 1 to the limit", arguments: [0, 1], [1, 3, 4096])
    func ack(base: Int, count: Int) throws {
        var rng = SeededGenerator(seed: UInt64(count))
        let ids = (0..<count).map { _ in MessageID(high: rng.next(), low: rng.next()) }
        let (parsed, message) = try encodeAndParse(base: base) { WireEncoder.ack(ids, into: &$0) }
        #expect(parsed.command == .ack)
        #expect(message.count == base + 1)
        #expect(message.size(of: base) == 5 + 16 * count)
        #expect(message.ackIDs(parsed) == ids)
    }

    @Test("NACK with and without an id keeps code and reason", arguments: [0, 1], [idA, nil] as [MessageID?])
    func nack(base: Int, id: MessageID?) throws {
        let error = WireError(.busy, "'child/c1' has 100000 messages queued; retry later — é")
        let (parsed, message) = try encodeAndParse(base: base) { WireEncoder.nack(id: id, error, into: &$0) }
        #expect(parsed.command == .nack)
        #expect(parsed.id == id)
        #expect(message.count == base + 3)
        #expect(Array(message[base]) == lead(0x07, id?.bytes ?? []))
        #expect(message.string(parsed.codeFrame) == "busy")
        #expect(ErrorCode(rawValue: message.string(parsed.codeFrame)) == .busy)
        #expect(message.string(parsed.reasonFrame) == error.reason)
    }

    @Test("NACK cuts a long reason to the limit at a character boundary", arguments: ["", "a", "ab", "abc"])
    func nackLongReason(lead: String) throws {
        // 2-, 3- and 4-byte characters, so the limit falls inside one for some leads.
        let long = lead + String(repeating: "é€😀", count: 200)
        let (parsed, message) = try encodeAndParse(base: 0) {
            WireEncoder.nack(id: nil, WireError(.forbidden, long), into: &$0)
        }
        let reason = message.string(parsed.reasonFrame)
        #expect(reason.utf8.count <= Wire.Limits.standard.maxReason)
        #expect(reason.utf8.count > Wire.Limits.standard.maxReason - 4)
        #expect(long.hasPrefix(reason))
    }

    @Test("BYE with and without a reason", arguments: [0, 1], ["", "broker shutting down"])
    func bye(base: Int, reason: String) throws {
        let (parsed, message) = try encodeAndParse(base: base) { WireEncoder.bye(reason: reason, into: &$0) }
        #expect(parsed.command == .bye)
        #expect(message.count == base + (reason.isEmpty ? 1 : 2))
        if !reason.isEmpty { #expect(message.string(parsed.byeReasonFrame) == reason) }
    }

    @Test("values at every limit are accepted")
    func limitsAccepted() throws {
        let limits = Wire.Limits.standard
        let longAddress = String(repeating: "a", count: 128)
        let longID = "child/" + String(repeating: "Z", count: 64)
        let longKind = String(repeating: "k", count: 32)
        let body = [UInt8](repeating: 0x20, count: limits.maxBody)
        var message = Multipart()
        WireEncoder.message(
            .send,
            id: idA,
            from: longID,
            to: longAddress,
            kind: longKind,
            subject: nil,
            body: body,
            into: &message
        )
        let parsed = try WireParser.parse(message)
        #expect(message.from(parsed) == longID)
        #expect(message.to(parsed) == longAddress)
        #expect(message.kind(parsed) == longKind)
        let reason = String(repeating: "r", count: limits.maxReason)
        #expect(
            try WireParser.parse(Multipart([lead(0x07), bytes(longKind), bytes(reason)])).command == .nack
        )
        #expect(try WireParser.parse(Multipart([lead(0x08), bytes(reason)])).command == .bye)
        #expect(try WireParser.parse(Multipart([lead(0x01), body])).command == .hello)
    }

    @Test(
        "a DELIVER made from a SEND's header bytes is the DELIVER the encoder makes",
        arguments: [idB, nil] as [MessageID?]
    )
    func forwardedHeader(subject: MessageID?) throws {
        let body = bytes(#"{"x":1}"#)
        var send = Multipart()
        send.append(routerIdentity)
        WireEncoder.message(
            .send,
            id: idA,
            from: "client/c1",
            to: "echo/e0",
            kind: "echo",
            subject: subject,
            body: body,
            into: &send
        )
        let parsed = try WireParser.parse(send, base: 1)
        var forwarded = Multipart()
        send.withBytes(parsed.headerRange) { header in
            send.withFrame(parsed.bodyFrame) { WireEncoder.deliver(header: header, body: $0, into: &forwarded) }
        }
        var encoded = Multipart()
        WireEncoder.message(
            .deliver,
            id: idA,
            from: "client/c1",
            to: "echo/e0",
            kind: "echo",
            subject: subject,
            body: body,
            into: &encoded
        )
        #expect(forwarded == encoded)
        #expect(
            WireEncoder.headerBytes(id: idA, subject: subject, from: "client/c1", to: "echo/e0", kind: "echo")
                == Array(send.header(parsed))
        )
        let delivered = try WireParser.parse(forwarded)
        #expect(delivered.command == .deliver && delivered.id == idA && delivered.subject == subject)
    }

    @Test("a trace context rides in the header after the subject, and a forwarded header keeps it", arguments: [0, 1])
    func traceContext(base: Int) throws {
        let trace = TraceContext(traceID: idB, parentID: 0x0102_0304_0506_0708, flags: 1)
        let (parsed, message) = try encodeAndParse(base: base) {
            WireEncoder.message(
                .send,
                id: idA,
                from: "child/c1",
                to: "broker",
                kind: "send",
                subject: idB,
                trace: trace,
                acks: [idA],
                body: bytes("{}"),
                into: &$0
            )
        }
        #expect(parsed.trace == trace && parsed.subject == idB && message.ackIDs(parsed) == [idA])
        // id, flags 3, subject, trace id, parent id, trace flags, then the fields.
        #expect(
            Array(message.header(parsed)) == idA.bytes + [3] + idB.bytes + idB.bytes + [1, 2, 3, 4, 5, 6, 7, 8, 1]
                + [8] + bytes("child/c1") + [6] + bytes("broker") + [4] + bytes("send")
        )
        #expect(message.kind(parsed) == "send")
        var forwarded = Multipart()
        message.withBytes(parsed.headerRange) { header in
            message.withFrame(parsed.bodyFrame) { WireEncoder.deliver(header: header, body: $0, into: &forwarded) }
        }
        let delivered = try WireParser.parse(forwarded)
        #expect(delivered.trace == trace && !delivered.carriesAcks && forwarded.kind(delivered) == "send")
    }

    @Test("traceparent text: parsed and written as W3C Trace Context version 00 says")
    func traceparent() throws {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let context = try #require(TraceContext(traceparent: text))
        #expect(context.traceID == MessageID(hex: "4bf92f3577b34da6a3ce929d0e0e4736"))
        #expect(context.parentID == 0x00f0_67aa_0ba9_02b7 && context.flags == 1)
        #expect(context.traceparent == text)
        #expect(TraceContext(traceID: idA, parentID: 1, flags: 0).traceparent == "00-\(idA)-0000000000000001-00")
        let child = context.child(of: idA)
        #expect(child.traceID == context.traceID && child.parentID == TraceContext.spanID(of: idA))
        for bad in [
            "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            #expect(TraceContext(traceparent: bad) == nil, "\(bad)")
        }
    }

    @Test("a field too long for its length byte is refused by the receiver, not trapped by the encoder")
    func overlongField() {
        var message = Multipart()
        WireEncoder.message(
            .send,
            id: idA,
            from: "child/" + String(repeating: "x", count: 300),
            to: "limits",
            kind: "ask",
            subject: nil,
            body: [],
            into: &message
        )
        #expect(throws: WireError(.badAddress, "the 'from' address must be 1-128 bytes, got 255")) {
            try WireParser.parse(message)
        }
    }

    @Test("the parser honours smaller limits")
    func customLimits() throws {
        var limits = Wire.Limits()
        limits.maxBody = 4
        limits.maxAckIDs = 1
        #expect(throws: WireError.self) {
            try WireParser.parse(Multipart([lead(0x01), [1, 2, 3, 4, 5]]), limits: limits)
        }
        #expect(try WireParser.parse(Multipart([lead(0x01), [1, 2, 3, 4]]), limits: limits).command == .hello)
        do {
            _ = try WireParser.parse(Multipart([lead(0x06, idA.bytes + idB.bytes)]), limits: limits)
            Issue.record("two ids accepted with maxAckIDs 1")
        } catch {
            #expect(error.code == .oversizeFrame)
        }
    }
}

// MARK: - The error table

/// One malformed message and the code it must be refused with.
struct BadMessage: Sendable, CustomTestStringConvertible {
    let name: String
    let frames: [[UInt8]]
    let code: ErrorCode
    var testDescription: String { "\(name) → \(code.rawValue)" }

    init(_ name: String, _ frames: [[UInt8]], _ code: ErrorCode) {
        self.name = name
        self.frames = frames
        self.code = code
    }
}

/// A SEND/DELIVER header built by hand (not by the encoder): id, flags, the subject and trace context if given, then
/// each field after a length byte (the byte is the field's size modulo 256, so a 300-byte field lies about its size),
/// then `trailing` (where carried ACK ids go).
func rawHeader(
    id: [UInt8] = idA.bytes,
    flags: UInt8 = 1,
    subject: [UInt8]? = idB.bytes,
    trace: [UInt8]? = nil,
    from: [UInt8] = bytes("child/c1"),
    to: [UInt8] = bytes("limits"),
    kind: [UInt8] = bytes("ask"),
    trailing: [UInt8] = []
) -> [UInt8] {
    var out = id + [flags] + (subject ?? []) + (trace ?? [])
    for field in [from, to, kind] { out += [UInt8(truncatingIfNeeded: field.count)] + field }
    return out + trailing
}

/// A trace context's 25 header bytes: trace id, parent span id, flags.
let traceBytes: [UInt8] = idB.bytes + [1, 2, 3, 4, 5, 6, 7, 8] + [1]

/// A SEND (or another command) whose lead frame holds `header` (and whatever it ends with), and a small body.
func send(header: [UInt8], command: UInt8 = 0x04) -> [[UInt8]] { [lead(command, header), bytes("{}")] }

let validHeader = rawHeader()
let validSend: [[UInt8]] = send(header: validHeader)
let validDeliver: [[UInt8]] = send(header: validHeader, command: 0x05)
let validTracedSend: [[UInt8]] = send(header: rawHeader(flags: 3, trace: traceBytes))
let validNack: [[UInt8]] = [lead(0x07, idA.bytes), bytes("busy"), bytes("retry later")]
let invalidUTF8: [UInt8] = [0x68, 0x69, 0xC3, 0x28]  // "hi" then a broken 2-byte sequence
let limits = Wire.Limits.standard

let badMessages: [BadMessage] = [
    // The lead frame.
    .init("no frames", [], .missingFrames),
    .init("signature ASX", [[0x41, 0x53, 0x58, 0x02, 0x03]], .badSignature),
    .init("lower-case signature", [[0x61, 0x73, 0x6B, 0x02, 0x03]], .badSignature),
    .init("3-byte lead", [[0x41, 0x53, 0x4B]], .badSignature),
    .init("empty lead", [[], bytes("{}")], .badSignature),
    .init("version 1 (a version 1 peer's signature frame)", [[0x41, 0x53, 0x4B, 0x01], [0x03]], .unsupportedVersion),
    .init("version 1 SEND", [[0x41, 0x53, 0x4B, 0x01], [0x04], validHeader, bytes("{}")], .unsupportedVersion),
    .init("version 3", [[0x41, 0x53, 0x4B, 0x03, 0x03]], .unsupportedVersion),
    .init("version 0", [[0x41, 0x53, 0x4B, 0x00, 0x03]], .unsupportedVersion),
    .init("signature only, no command byte", [signature], .unknownCommand),
    .init("signature only, then a command frame", [signature, [0x03]], .unknownCommand),
    .init("command 0x00", [lead(0x00)], .unknownCommand),
    .init("command 0x09", [lead(0x09)], .unknownCommand),
    .init("command 0xFF", [lead(0xFF)], .unknownCommand),
    .init("bad signature wins over unknown command", [[0x41, 0x53, 0x58, 0x02, 0xFF]], .badSignature),
    // Frame counts and bare leads for every command.
    .init("HEARTBEAT with a body", [lead(0x03), []], .extraFrames),
    .init("HEARTBEAT with a byte after the command", [lead(0x03, [0])], .badHeader),
    .init("HELLO without body", [lead(0x01)], .missingFrames),
    .init("HELLO with 3 frames", [lead(0x01), bytes("{}"), []], .extraFrames),
    .init("HELLO with bytes after the command", [lead(0x01, bytes("{}")), bytes("{}")], .badHeader),
    .init("WELCOME without body", [lead(0x02)], .missingFrames),
    .init("WELCOME with 3 frames", [lead(0x02), bytes("{}"), []], .extraFrames),
    .init("SEND without body", Array(validSend.dropLast()), .missingFrames),
    .init("SEND with 3 frames", validSend + [[]], .extraFrames),
    .init("SEND in the version 1 layout", [lead(0x04), validHeader, bytes("{}")], .extraFrames),
    .init("SEND whose header is in a frame of its own", [lead(0x04), validHeader], .badHeader),
    .init("SEND with 17 bytes of ACK ids", send(header: rawHeader(trailing: idA.bytes + [0])), .badID),
    .init("SEND with one trailing byte", send(header: rawHeader(trailing: [0])), .badID),
    .init(
        "SEND carrying 4097 ACK ids",
        send(header: rawHeader(trailing: Array(repeating: 7, count: 16 * 4097))),
        .oversizeFrame
    ),
    .init("DELIVER without body", Array(validDeliver.dropLast()), .missingFrames),
    .init("DELIVER with 3 frames", validDeliver + [[]], .extraFrames),
    .init(
        "DELIVER with 15 bytes of ACK ids",
        send(header: rawHeader(trailing: Array(idA.bytes.prefix(15))), command: 0x05),
        .badID
    ),
    .init("ACK with 2 frames", [lead(0x06, idA.bytes), idB.bytes], .extraFrames),
    .init("NACK with 2 frames", Array(validNack.dropLast()), .missingFrames),
    .init("NACK with 4 frames", validNack + [[]], .extraFrames),
    .init("BYE with 3 frames", [lead(0x08), bytes("bye"), []], .extraFrames),
    .init("BYE with its reason in the lead", [lead(0x08, bytes("bye"))], .badHeader),
    // The header's structure.
    .init("empty header", send(header: []), .badHeader),
    .init("header of 16 bytes (id only)", send(header: idA.bytes), .badHeader),
    .init("header of 19 bytes (one byte short of the minimum)", send(header: idA.bytes + [0, 0, 0]), .badHeader),
    .init(
        "minimal header, zero-length fields, is read (then the address is bad)",
        send(header: idA.bytes + [0, 0, 0, 0]),
        .badAddress
    ),
    .init(
        "15-byte id (the flags byte is read from the lengths)",
        send(header: rawHeader(id: Array(idA.bytes.prefix(15)))),
        .badHeader
    ),
    .init("17-byte id", send(header: rawHeader(id: idA.bytes + [0])), .badHeader),
    .init("flags 0x04", send(header: rawHeader(flags: 0x04, subject: nil)), .badHeader),
    .init("flags 0x07", send(header: rawHeader(flags: 0x07, trace: traceBytes)), .badHeader),
    .init("flags 0x80", send(header: rawHeader(flags: 0x80, subject: nil)), .badHeader),
    .init("flags 0xFF", send(header: rawHeader(flags: 0xFF)), .badHeader),
    .init("subject flag without a subject", send(header: rawHeader(flags: 1, subject: nil)), .badHeader),
    .init(
        "subject flag, header ends inside the subject",
        send(header: idA.bytes + [1] + Array(idB.bytes.prefix(10))),
        .badHeader
    ),
    .init("no subject flag but a subject", send(header: rawHeader(flags: 0)), .badHeader),
    .init("trace flag without a trace context", send(header: rawHeader(flags: 3)), .badHeader),
    .init(
        "trace flag, header ends inside the trace context",
        send(header: idA.bytes + [2] + Array(traceBytes.prefix(20))),
        .badHeader
    ),
    .init(
        "trace context with an all-zero trace id",
        send(header: rawHeader(flags: 3, trace: [UInt8](repeating: 0, count: 16) + Array(traceBytes.suffix(9)))),
        .badHeader
    ),
    .init(
        "trace context with a zero parent id",
        send(header: rawHeader(flags: 3, trace: idB.bytes + [UInt8](repeating: 0, count: 8) + [1])),
        .badHeader
    ),
    .init("from length past the end", send(header: idA.bytes + [0, 9] + bytes("child/c1")), .badHeader),
    .init(
        "from length 255",
        send(header: idA.bytes + [0, 255] + bytes("child/c1") + [6] + bytes("limits") + [3] + bytes("ask")),
        .badHeader
    ),
    .init(
        "to length past the end",
        send(header: idA.bytes + [0, 8] + bytes("child/c1") + [200] + bytes("limits") + [3] + bytes("ask")),
        .badHeader
    ),
    .init("kind length past the end", send(header: Array(rawHeader().dropLast())), .badHeader),
    .init(
        "header ends before the kind length",
        send(header: idA.bytes + [0, 8] + bytes("child/c1") + [6] + bytes("limits")),
        .badHeader
    ),
    .init("header ends before the to length", send(header: idA.bytes + [0, 8] + bytes("child/c1")), .badHeader),
    .init("DELIVER with flags 0x04", send(header: rawHeader(flags: 0x04, subject: nil), command: 0x05), .badHeader),
    .init("bad header wins over a bad address", send(header: rawHeader(flags: 0x08, from: [])), .badHeader),
    .init(
        "bad flags win over a bad kind",
        send(header: rawHeader(flags: 0x10, subject: nil, kind: bytes("ASK"))),
        .badHeader
    ),
    // Addresses inside the header.
    .init("empty from", send(header: rawHeader(from: [])), .badAddress),
    .init("empty to", send(header: rawHeader(to: [])), .badAddress),
    .init("upper-case role", send(header: rawHeader(from: bytes("Child/c1"))), .badAddress),
    .init("no id after '/'", send(header: rawHeader(from: bytes("child/"))), .badAddress),
    .init("no role before '/'", send(header: rawHeader(to: bytes("/c1"))), .badAddress),
    .init("id with a space", send(header: rawHeader(to: bytes("child/c 1"))), .badAddress),
    .init("id with a second '/'", send(header: rawHeader(to: bytes("child/c1/x"))), .badAddress),
    .init("digit in role", send(header: rawHeader(to: bytes("child2/c1"))), .badAddress),
    .init(
        "65-byte id",
        send(header: rawHeader(from: bytes("child/" + String(repeating: "x", count: 65)))),
        .badAddress
    ),
    .init("129-byte address", send(header: rawHeader(to: bytes(String(repeating: "a", count: 129)))), .badAddress),
    .init("255-byte address", send(header: rawHeader(to: bytes(String(repeating: "a", count: 255)))), .badAddress),
    .init("non-ASCII id", send(header: rawHeader(from: bytes("child/é"))), .badAddress),
    .init("NUL in an address", send(header: rawHeader(to: bytes("child/c") + [0])), .badAddress),
    .init(
        "bad from wins over bad kind",
        send(header: rawHeader(from: bytes("Child/c1"), kind: bytes("ASK"))),
        .badAddress
    ),
    .init("bad address wins over bad carried ids", send(header: rawHeader(from: [], trailing: [1])), .badAddress),
    .init("DELIVER with an empty to", send(header: rawHeader(to: []), command: 0x05), .badAddress),
    // Kinds inside the header.
    .init("upper-case kind", send(header: rawHeader(kind: bytes("Ask"))), .badKind),
    .init("empty kind", send(header: rawHeader(kind: [])), .badKind),
    .init("33-byte kind", send(header: rawHeader(kind: bytes(String(repeating: "k", count: 33)))), .badKind),
    .init("kind with '_'", send(header: rawHeader(kind: bytes("ask_result"))), .badKind),
    .init("kind with '/'", send(header: rawHeader(kind: bytes("ask/result"))), .badKind),
    .init("DELIVER with a bad kind", send(header: rawHeader(kind: bytes("a b")), command: 0x05), .badKind),
    // Sizes.
    .init(
        "SEND body limit+1",
        [lead(0x04, validHeader), [UInt8](repeating: 0x20, count: limits.maxBody + 1)],
        .oversizeFrame
    ),
    .init(
        "bad carried ids win over an oversize body",
        [lead(0x04, rawHeader(trailing: [0])), [UInt8](repeating: 0x20, count: limits.maxBody + 1)],
        .badID
    ),
    .init(
        "HELLO body limit+1",
        [lead(0x01), [UInt8](repeating: 0x20, count: limits.maxBody + 1)],
        .oversizeFrame
    ),
    // ACK.
    .init("ACK with 0 ids", [lead(0x06)], .badID),
    .init("ACK with 15 bytes", [lead(0x06, Array(idA.bytes.prefix(15)))], .badID),
    .init("ACK with 17 bytes", [lead(0x06, idA.bytes + [0])], .badID),
    .init("ACK with 33 bytes", [lead(0x06, idA.bytes + idB.bytes + [0])], .badID),
    .init(
        "ACK with limit+1 ids",
        [lead(0x06, [UInt8](repeating: 7, count: 16 * (limits.maxAckIDs + 1)))],
        .oversizeFrame
    ),
    // NACK.
    .init("NACK 15-byte id", [lead(0x07, Array(idA.bytes.prefix(15))), bytes("busy"), []], .badID),
    .init("NACK 17-byte id", [lead(0x07, idA.bytes + [0]), bytes("busy"), []], .badID),
    .init("NACK empty code", [lead(0x07), [], bytes("why")], .badKind),
    .init("NACK 33-byte code", [lead(0x07), bytes(String(repeating: "c", count: 33)), []], .badKind),
    .init("NACK non-UTF-8 reason", [lead(0x07), bytes("busy"), invalidUTF8], .invalidUTF8),
    .init(
        "NACK reason limit+1",
        [lead(0x07), bytes("busy"), [UInt8](repeating: 0x72, count: limits.maxReason + 1)],
        .oversizeFrame
    ),
    // BYE.
    .init("BYE non-UTF-8 reason", [lead(0x08), invalidUTF8], .invalidUTF8),
    .init("BYE lone continuation byte", [lead(0x08), [0x80]], .invalidUTF8),
    .init(
        "BYE reason limit+1",
        [lead(0x08), [UInt8](repeating: 0x72, count: limits.maxReason + 1)],
        .oversizeFrame
    ),
]

@Suite("Wire error table")
struct WireErrorTableTests {
    @Test("a malformed message is refused with its exact code", arguments: badMessages, [0, 1])
    func refused(row: BadMessage, base: Int) {
        var message = Multipart()
        if base == 1 { message.append(routerIdentity) }
        for frame in row.frames { message.append(frame) }
        do {
            let parsed = try WireParser.parse(message, base: base)
            Issue.record("accepted as \(parsed.command)")
        } catch {
            #expect(error.code == row.code, "reason: \(error.reason)")
            #expect(!error.reason.isEmpty)
        }
    }

    @Test("the table covers at least 70 rows and every framing code the parser can give")
    func coverage() {
        #expect(badMessages.count >= 70)
        let framing: Set<ErrorCode> = [
            .badSignature, .unsupportedVersion, .unknownCommand, .missingFrames, .extraFrames, .oversizeFrame, .badID,
            .badAddress, .badKind, .invalidUTF8, .badHeader,
        ]
        #expect(Set(badMessages.map(\.code)) == framing)
    }

    @Test("the valid bases of the table parse", arguments: [validSend, validDeliver, validTracedSend, validNack])
    func validBases(frames: [[UInt8]]) throws {
        _ = try WireParser.parse(Multipart(frames))
    }

    @Test("a ROUTER message with no frames after the identity is missing frames")
    func identityOnly() {
        let error = #expect(throws: WireError.self) { try WireParser.parse(Multipart([routerIdentity]), base: 1) }
        #expect(error?.code == .missingFrames)
        #expect(throws: WireError.self) { try WireParser.parse(Multipart(), base: 1) }
    }

    @Test("every ErrorCode token is distinct and fits a NACK code frame (a-z 0-9 -, at most 32 bytes)")
    func tokens() {
        let tokens = ErrorCode.allCases.map(\.rawValue)
        #expect(Set(tokens).count == tokens.count)
        for token in tokens {
            let charset = token.utf8.allSatisfy {
                ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D
            }
            #expect(charset && token.utf8.count <= Wire.Limits.standard.maxKind, "\(token)")
        }
    }
}

// MARK: - Fuzz

@Suite("Wire fuzz")
struct WireFuzzTests {
    static let validMessages: [[[UInt8]]] = [
        validSend, validDeliver, validTracedSend, validNack,
        send(header: rawHeader(trailing: idA.bytes + idB.bytes)),
        [lead(0x01), bytes(#"{"version":2}"#)],
        [lead(0x02), bytes("{}")],
        [lead(0x03)],
        [lead(0x06, idA.bytes + idB.bytes)],
        [lead(0x07), bytes("not-registered"), bytes("send HELLO")],
        [lead(0x08)],
        [lead(0x08), bytes("bye")],
    ]

    static let framingCodes: Set<ErrorCode> = [
        .badSignature, .unsupportedVersion, .unknownCommand, .missingFrames, .extraFrames, .oversizeFrame, .badID,
        .badAddress, .badKind, .invalidUTF8, .badHeader,
    ]

    static func randomFrame(_ rng: inout SeededGenerator) -> [UInt8] {
        let size: Int
        switch rng.next() % 10 {
        case 0: size = 0
        case 1: size = 16
        case 2: size = 4
        case 3: size = 1
        default: size = Int(rng.next() % 40)
        }
        // Mostly address-like bytes so deep checks are reached, sometimes anything.
        let alphabet = bytes("abcz/AZ09._- ")
        return (0..<size).map { _ in
            rng.next() % 3 == 0
                ? UInt8(truncatingIfNeeded: rng.next()) : alphabet[Int(rng.next() % UInt64(alphabet.count))]
        }
    }

    static func mutate(_ frames: [[UInt8]], _ rng: inout SeededGenerator) -> [[UInt8]] {
        var frames = frames
        for _ in 0...(rng.next() % 3) {
            let index = frames.isEmpty ? 0 : Int(rng.next() % UInt64(frames.count))
            switch rng.next() % 7 {
            case 0 where !frames.isEmpty && !frames[index].isEmpty:  // flip a byte
                let at = Int(rng.next() % UInt64(frames[index].count))
                frames[index][at] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            case 1 where !frames.isEmpty: frames.remove(at: index)
            case 2: frames.insert(randomFrame(&rng), at: min(index, frames.count))
            case 3 where !frames.isEmpty && !frames[index].isEmpty: frames[index].removeLast()
            case 4 where !frames.isEmpty: frames[index].append(UInt8(truncatingIfNeeded: rng.next()))
            case 5 where !frames.isEmpty: frames[index] = randomFrame(&rng)
            default: frames.append([])
            }
        }
        return frames
    }

    @Test(
        "parse never traps: it succeeds consistently or throws a framing code",
        arguments: [0x5EED as UInt64, 42, 7_777_777]
    )
    func fuzz(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var succeeded = 0
        var codes: Set<ErrorCode> = []
        for round in 0..<4000 {
            var frames: [[UInt8]]
            if round % 4 == 0 {
                frames = (0..<Int(rng.next() % 10)).map { _ in Self.randomFrame(&rng) }
                if rng.next() % 2 == 0, !frames.isEmpty { frames[0] = lead(UInt8(rng.next() % 10), frames[0]) }
            } else {
                frames = Self.mutate(Self.validMessages[Int(rng.next() % UInt64(Self.validMessages.count))], &rng)
            }
            let base = Int(rng.next() % 2)
            var message = Multipart()
            if base == 1 { message.append(routerIdentity) }
            for frame in frames { message.append(frame) }
            do {
                let parsed = try WireParser.parse(message, base: base)
                succeeded += 1
                // A success must describe the message it came from.
                #expect(Array(message[base].prefix(5)) == lead(parsed.command.rawValue))
                if parsed.command == .send || parsed.command == .deliver {
                    #expect(message.count == base + 2)
                    #expect(parsed.ackRange.count % 16 == 0)
                    #expect(parsed.ackRange.upperBound == message.range(of: base).upperBound)
                    #expect(parsed.id.map { $0.bytes == Array(message[base].dropFirst(5).prefix(16)) } == true)
                    #expect(
                        parsed.headerRange.lowerBound == message.range(of: base).lowerBound + 5
                            && parsed.fromRange.lowerBound > parsed.headerRange.lowerBound
                            && parsed.kindRange.upperBound == parsed.headerRange.upperBound
                            && parsed.headerRange.upperBound == parsed.ackRange.lowerBound
                    )
                }
            } catch {
                codes.insert(error.code)
                #expect(Self.framingCodes.contains(error.code), "\(error)")
            }
        }
        // The generator must reach both outcomes and most of the checks, or it tests nothing.
        #expect(succeeded > 200, "only \(succeeded) of 4000 parsed")
        #expect(codes.count >= 8, "codes reached: \(codes.map(\.rawValue).sorted())")
    }
}

// MARK: - MessageID

@Suite("MessageID")
struct MessageIDTests {
    @Test("bytes, hex and UUID round trips")
    func roundTrips() throws {
        var rng = SeededGenerator(seed: 99)
        for _ in 0..<1000 {
            let id = MessageID(high: rng.next(), low: rng.next())
            #expect(MessageID(bytes: id.bytes) == id)
            var appended: [UInt8] = []
            id.append(to: &appended)
            #expect(appended == id.bytes)
            #expect(id.description.utf8.count == 32)
            #expect(id.description == id.description.lowercased())
            #expect(MessageID(hex: id.description) == id)
            #expect(MessageID(hex: id.description.uppercased()) == id)
            #expect(MessageID(uuid: id.uuid) == id)
        }
    }

    @Test("known values: big-endian bytes, zero-padded hex, the UUID's bytes")
    func knownValues() throws {
        let id = MessageID(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)
        #expect(id.bytes == Array(1...16))
        #expect(id.description == "0102030405060708090a0b0c0d0e0f10")
        #expect(MessageID(high: 0, low: 1).description == "00000000000000000000000000000001")
        let uuid = try #require(UUID(uuidString: "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"))
        #expect(MessageID(uuid: uuid).description == "6f1c4a3e2b7d4e599a0c1d2e3f405162")
        #expect(MessageID(uuid: uuid).uuid == uuid)
    }

    @Test(
        "malformed bytes and hex are refused",
        arguments: [
            "", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
            "0123456789abcdeg0123456789abcdef",
            "+123456789abcdef0123456789abcdef", "-000000000000000+000000000000000", "0x23456789abcdef0123456789abcdef",
            " 123456789abcdef0123456789abcdef",
        ]
    )
    func malformedHex(text: String) {
        #expect(MessageID(hex: text) == nil)
    }

    @Test("only 16 bytes make an id", arguments: [0, 1, 15, 17, 32])
    func malformedBytes(count: Int) {
        #expect(MessageID(bytes: [UInt8](repeating: 1, count: count)) == nil)
    }

    @Test("order is the order of the wire bytes")
    func ordering() {
        #expect(MessageID(high: 0, low: .max) < MessageID(high: 1, low: 0))
        #expect(!(MessageID(high: 1, low: 0) < MessageID(high: 1, low: 0)))
        var rng = SeededGenerator(seed: 5)
        for _ in 0..<2000 {
            // Small values so equal halves happen often.
            let a = MessageID(high: rng.next() % 4, low: rng.next() % 4)
            let b = MessageID(high: rng.next() % 4, low: rng.next() % 4)
            #expect((a < b) == a.bytes.lexicographicallyPrecedes(b.bytes))
        }
    }

    @Test("10 000 random ids are distinct")
    func uniqueness() {
        let ids = (0..<10_000).map { _ in MessageID.random() }
        #expect(Set(ids).count == ids.count)
        #expect(Set(ids.map(\.high)).count == ids.count)
    }

    @Test("JSON form is the hex string")
    func json() throws {
        let data = try JSONEncoder().encode([idA])
        #expect(String(decoding: data, as: UTF8.self) == #"["0123456789abcdef0011223344556677"]"#)
        #expect(try JSONDecoder().decode([MessageID].self, from: data) == [idA])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([MessageID].self, from: Data(#"["xyz"]"#.utf8)) }
    }
}

// MARK: - Session JSON

@Suite("Session JSON")
struct SessionJSONTests {
    @Test("HELLO encodes with sorted keys and decodes back")
    func hello() throws {
        let hello = Hello(
            role: .child,
            worker: "askrelay-child[7]",
            endpoints: [.init(address: "child/c1", family: "f1")],
            window: 64,
            heartbeatMs: 1000
        )
        let encoded = SessionJSON.encode(hello)
        #expect(
            String(decoding: encoded, as: UTF8.self)
                == #"{"endpoints":[{"address":"child/c1","family":"f1"}],"heartbeatMs":1000,"role":"child","version":2,"window":64,"worker":"askrelay-child[7]"}"#
        )
        #expect(try SessionJSON.decode(Hello.self, from: encoded) == hello)
        let minimal = Hello(role: .limits, worker: "l", endpoints: [.init(address: "limits/l1")])
        #expect(
            String(decoding: SessionJSON.encode(minimal), as: UTF8.self)
                == #"{"endpoints":[{"address":"limits/l1"}],"role":"limits","version":2,"worker":"l"}"#
        )
        #expect(try SessionJSON.decode(Hello.self, from: SessionJSON.encode(minimal)) == minimal)
    }

    @Test("WELCOME encodes with sorted keys and decodes back")
    func welcome() throws {
        let welcome = Welcome(
            session: "3f2a9c01b7e4-0",
            heartbeatMs: 1000,
            liveness: 3,
            window: 64,
            broker: "3f2a9c01b7e4"
        )
        let encoded = SessionJSON.encode(welcome)
        #expect(
            String(decoding: encoded, as: UTF8.self)
                == #"{"broker":"3f2a9c01b7e4","heartbeatMs":1000,"liveness":3,"session":"3f2a9c01b7e4-0","window":64}"#
        )
        #expect(try SessionJSON.decode(Welcome.self, from: encoded) == welcome)
    }

    @Test("invalid UTF-8 is invalid-utf8, before any JSON parsing")
    func invalidUTF8Body() {
        #expect(throws: WireError(.invalidUTF8, "the body is not valid UTF-8")) {
            try SessionJSON.decode(Hello.self, from: [0x7B, 0xFF, 0x7D] as [UInt8])
        }
    }

    @Test(
        "bad JSON is invalid-json with a readable field path",
        arguments: [
            (#"{"#, "malformed JSON"),
            (#"{"version":1}"#, "missing field 'role'"),
            (#"{"version":"1","role":"child","worker":"w","endpoints":[]}"#, "wrong type at 'version'"),
            (#"{"version":1,"role":"parent","worker":"w","endpoints":[]}"#, "bad value at 'role'"),
            (
                #"{"version":1,"role":"child","worker":"w","endpoints":[{"family":"f"}]}"#,
                "missing field 'endpoints[0].address'"
            ),
            (
                #"{"version":1,"role":"child","worker":"w","endpoints":[{"address":"child/a"},{"address":7}]}"#,
                "wrong type at 'endpoints[1].address'"
            ),
        ]
    )
    func invalidJSONBody(json: String, expected: String) {
        do {
            _ = try SessionJSON.decode(Hello.self, from: bytes(json))
            Issue.record("decoded")
        } catch {
            #expect(error.code == .invalidJSON)
            #expect(error.reason.hasPrefix("the Hello body is not valid: "), "\(error.reason)")
            #expect(error.reason.contains(expected), "\(error.reason)")
        }
    }
}
