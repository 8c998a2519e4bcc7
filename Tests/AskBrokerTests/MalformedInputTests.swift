import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// One malformed message and the code the broker must answer it with.
struct MalformedCase: CustomTestStringConvertible, Sendable {
    let name: String
    let frames: [[UInt8]]
    let code: ErrorCode
    var testDescription: String { name }
}

let signature: [UInt8] = Wire.signature
let validID = MessageID.random().bytes
func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }

/// A SEND/DELIVER header built by hand: id, flags (subject present iff a subject is given, unless `flags` says
/// otherwise), then from, to and kind each after a length byte, then `trailing`.
func header(
    id: [UInt8] = validID,
    flags: UInt8? = nil,
    subject: [UInt8]? = nil,
    from: [UInt8] = utf8("client/1"),
    to: [UInt8] = utf8("echo/1"),
    kind: [UInt8] = utf8("echo"),
    trailing: [UInt8] = []
) -> [UInt8] {
    var out = id + [flags ?? (subject == nil ? 0 : 1)] + (subject ?? [])
    for field in [from, to, kind] { out += [UInt8(truncatingIfNeeded: field.count)] + field }
    return out + trailing
}

/// A lead frame: the signature, the command byte, then `rest`.
func lead(_ command: WireCommand, _ rest: [UInt8] = []) -> [UInt8] { signature + [command.rawValue] + rest }

/// SEND: the lead frame (signature, command, header and whatever it ends with), then the body (and any further
/// frames given).
func send(_ header: [UInt8], _ rest: [[UInt8]] = [[]]) -> [[UInt8]] {
    [lead(.send, header)] + rest
}

let malformedCases: [MalformedCase] = [
    MalformedCase(name: "empty signature", frames: [[], [WireCommand.heartbeat.rawValue]], code: .badSignature),
    MalformedCase(
        name: "wrong signature",
        frames: [utf8("MDPW") + [WireCommand.heartbeat.rawValue]],
        code: .badSignature
    ),
    MalformedCase(
        name: "version 1",
        frames: [[0x41, 0x53, 0x4B, 0x01], [WireCommand.heartbeat.rawValue]],
        code: .unsupportedVersion
    ),
    MalformedCase(name: "signature only", frames: [signature], code: .unknownCommand),
    MalformedCase(name: "command in a frame of its own", frames: [signature, [4]], code: .unknownCommand),
    MalformedCase(name: "unknown command 0x7f", frames: [signature + [0x7F]], code: .unknownCommand),
    MalformedCase(
        name: "heartbeat with a body",
        frames: [lead(.heartbeat), [1]],
        code: .extraFrames
    ),
    MalformedCase(name: "SEND missing body", frames: send(header(), []), code: .missingFrames),
    MalformedCase(name: "SEND with three frames", frames: send(header(), [utf8("{}"), []]), code: .extraFrames),
    MalformedCase(
        name: "SEND in the version 1 layout",
        frames: [lead(.send), header(), utf8("{}")],
        code: .extraFrames
    ),
    MalformedCase(name: "header of 16 bytes (id only)", frames: send(validID), code: .badHeader),
    MalformedCase(name: "15-byte id", frames: send(header(id: Array(validID.prefix(15)))), code: .badHeader),
    MalformedCase(name: "header flags 0x04", frames: send(header(flags: 4)), code: .badHeader),
    MalformedCase(name: "subject flag without a subject", frames: send(header(flags: 1)), code: .badHeader),
    MalformedCase(name: "trace flag without a trace context", frames: send(header(flags: 2)), code: .badHeader),
    MalformedCase(
        name: "to length past the end",
        frames: send(validID + [0, 8] + utf8("client/1") + [7] + utf8("echo/1") + [4] + utf8("echo")),
        code: .badHeader
    ),
    MalformedCase(name: "a trailing byte after the kind", frames: send(header(trailing: [0])), code: .badID),
    MalformedCase(name: "empty to address", frames: send(header(to: [])), code: .badAddress),
    MalformedCase(name: "uppercase role", frames: send(header(to: utf8("Echo/1"))), code: .badAddress),
    MalformedCase(name: "space in id", frames: send(header(to: utf8("echo/a b"))), code: .badAddress),
    MalformedCase(name: "invalid UTF-8 address", frames: send(header(to: [0x65, 0x2F, 0xFF])), code: .badAddress),
    MalformedCase(
        name: "129-byte address",
        frames: send(header(to: utf8("echo/" + String(repeating: "a", count: 124)))),
        code: .badAddress
    ),
    MalformedCase(name: "empty kind", frames: send(header(kind: [])), code: .badKind),
    MalformedCase(name: "uppercase kind", frames: send(header(kind: utf8("Echo"))), code: .badKind),
    MalformedCase(
        name: "oversize body",
        frames: send(header(), [[UInt8](repeating: 0x20, count: (1 << 16) + 1)]),
        code: .oversizeFrame
    ),
    MalformedCase(
        name: "ACK with 17 bytes",
        frames: [lead(.ack, [UInt8](repeating: 1, count: 17))],
        code: .badID
    ),
    MalformedCase(name: "empty ACK", frames: [lead(.ack)], code: .badID),
    MalformedCase(
        name: "NACK with a 3-byte id",
        frames: [lead(.nack, [1, 2, 3]), utf8("busy"), []],
        code: .badID
    ),
    MalformedCase(
        name: "BYE with 3 frames",
        frames: [lead(.bye), [], []],
        code: .extraFrames
    ),
    MalformedCase(
        name: "DELIVER sent to the broker",
        frames: [lead(.deliver, header()), []],
        code: .forbidden
    ),
    MalformedCase(
        name: "SEND from an address the session does not serve",
        frames: send(header(from: utf8("client/2"))),
        code: .forbidden
    ),
    MalformedCase(
        name: "HELLO with invalid JSON",
        frames: [lead(.hello), utf8("{not json")],
        code: .invalidJSON
    ),
    MalformedCase(
        name: "HELLO with invalid UTF-8",
        frames: [lead(.hello), [0xC3, 0x28]],
        code: .invalidUTF8
    ),
    MalformedCase(
        name: "HELLO missing endpoints",
        frames: [lead(.hello), utf8(#"{"version":2,"role":"child","worker":"w"}"#)],
        code: .invalidJSON
    ),
    MalformedCase(
        name: "HELLO with no endpoints",
        frames: [
            lead(.hello), utf8(#"{"version":2,"role":"echo","worker":"w","endpoints":[]}"#),
        ],
        code: .badHello
    ),
    MalformedCase(
        name: "HELLO claiming an address twice",
        frames: [
            lead(.hello),
            utf8(#"{"version":2,"role":"echo","worker":"w","endpoints":[{"address":"echo/9"},{"address":"echo/9"}]}"#),
        ],
        code: .badHello
    ),
    MalformedCase(name: "SEND to a role nobody serves", frames: send(header(to: utf8("nobody/1"))), code: .noRoute),
    MalformedCase(
        name: "SEND to broker of a kind not for it",
        frames: send(header(to: utf8("broker"), kind: utf8("echo"))),
        code: .unknownKind
    ),
    MalformedCase(
        name: "HELLO with an unknown role",
        frames: [
            lead(.hello), utf8(#"{"version":2,"role":"king","worker":"w","endpoints":[]}"#),
        ],
        code: .invalidJSON
    ),
]

@Suite("Malformed input", .timeLimit(.minutes(1)))
struct MalformedInputTests {
    @Test(
        "each malformed message gets a NACK with its code, while a well-behaved client keeps being served",
        arguments: malformedCases
    )
    func malformed(_ testCase: MalformedCase) throws {
        let broker = try TestBroker { $0.limits.maxBody = 1 << 16 }
        defer { broker.stop() }
        let context = try ZMQContext()
        // The attacker registers first, so that frames after registration are judged on their own.
        let attacker = try RawPeer(context: context, endpoint: broker.endpoint)
        try attacker.register(role: .client, ["client/1"])
        let client = try RawPeer(context: context, endpoint: broker.endpoint)
        let echo = try RawPeer(context: context, endpoint: broker.endpoint)
        try client.register(role: .client, ["client/2"])
        try echo.register(role: .echo, ["echo/1"])

        try attacker.sendFrames(testCase.frames)
        let nack = try attacker.expectNack()
        #expect(nack.code == testCase.code.rawValue, "\(testCase.name): \(nack.reason)")
        #expect(!nack.reason.isEmpty)

        let id = try client.sendMessage(from: "client/2", to: "echo/1", kind: "echo", body: utf8("still here"))
        try client.expectAck(id)
        #expect(try echo.expectDelivery().id == id)
        // The attacker's session is intact too: bad input changed nothing.
        let own = try attacker.sendMessage(from: "client/1", to: "echo/1", kind: "echo", body: [])
        try attacker.expectAck(own)
    }

    @Test("the table covers at least 20 distinct malformations")
    func tableSize() {
        #expect(malformedCases.count >= 20)
        // Every code the table had before the header was packed, except bad-subject (a subject can no longer be
        // the wrong size; the ledger's bad-subject is tested below), plus bad-header.
        let codes: Set<ErrorCode> = [
            .badSignature, .unsupportedVersion, .missingFrames, .unknownCommand, .extraFrames, .badHeader, .badAddress,
            .badKind, .oversizeFrame, .badID, .forbidden, .invalidJSON, .invalidUTF8, .badHello, .noRoute,
        ]
        #expect(codes.isSubset(of: Set(malformedCases.map(\.code))))
    }

    @Test("an ask whose subject is not the question's id is refused with bad-subject")
    func askSubjectMismatch() throws {
        let flow = try FlowHarness()
        defer { flow.stop() }
        let question = FlowHarness.question()
        let id = try flow.child.sendMessage(
            from: "child/c1",
            to: "limits",
            kind: "ask",
            subject: .random(),
            body: try WireJSON.encode(AskRequest(question: question))
        )
        #expect(try flow.child.expectNack(id).code == ErrorCode.badSubject.rawValue)
    }
}
