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
func send(_ parts: [[UInt8]]) -> [[UInt8]] { [signature, [WireCommand.send.rawValue]] + parts }
func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }
let goodHeaders: [[UInt8]] = [validID, utf8("client/1"), utf8("echo/1"), utf8("echo"), []]

let malformedCases: [MalformedCase] = [
    MalformedCase(name: "empty signature", frames: [[], [WireCommand.heartbeat.rawValue]], code: .badSignature),
    MalformedCase(name: "wrong signature", frames: [utf8("MDPW"), [WireCommand.heartbeat.rawValue]], code: .badSignature),
    MalformedCase(name: "version 2", frames: [[0x41, 0x53, 0x4B, 0x02], [WireCommand.heartbeat.rawValue]], code: .unsupportedVersion),
    MalformedCase(name: "signature only", frames: [signature], code: .missingFrames),
    MalformedCase(name: "empty command frame", frames: [signature, []], code: .unknownCommand),
    MalformedCase(name: "two-byte command", frames: [signature, [4, 4]], code: .unknownCommand),
    MalformedCase(name: "unknown command 0x7f", frames: [signature, [0x7F]], code: .unknownCommand),
    MalformedCase(name: "heartbeat with a body", frames: [signature, [WireCommand.heartbeat.rawValue], [1]], code: .extraFrames),
    MalformedCase(name: "SEND missing body", frames: send(Array(goodHeaders)), code: .missingFrames),
    MalformedCase(name: "SEND with an extra frame", frames: send(goodHeaders + [utf8("{}"), []]), code: .extraFrames),
    MalformedCase(name: "15-byte id", frames: send([Array(validID.prefix(15))] + goodHeaders.dropFirst() + [[]]), code: .badID),
    MalformedCase(name: "17-byte id", frames: send([validID + [0]] + goodHeaders.dropFirst() + [[]]), code: .badID),
    MalformedCase(name: "empty to address", frames: send([validID, utf8("client/1"), [], utf8("echo"), [], []]), code: .badAddress),
    MalformedCase(name: "uppercase role", frames: send([validID, utf8("client/1"), utf8("Echo/1"), utf8("echo"), [], []]), code: .badAddress),
    MalformedCase(name: "space in id", frames: send([validID, utf8("client/1"), utf8("echo/a b"), utf8("echo"), [], []]), code: .badAddress),
    MalformedCase(name: "invalid UTF-8 address", frames: send([validID, utf8("client/1"), [0x65, 0x2F, 0xFF], utf8("echo"), [], []]), code: .badAddress),
    MalformedCase(name: "129-byte address", frames: send([validID, utf8("client/1"), utf8("echo/" + String(repeating: "a", count: 124)), utf8("echo"), [], []]), code: .badAddress),
    MalformedCase(name: "empty kind", frames: send([validID, utf8("client/1"), utf8("echo/1"), [], [], []]), code: .badKind),
    MalformedCase(name: "uppercase kind", frames: send([validID, utf8("client/1"), utf8("echo/1"), utf8("Echo"), [], []]), code: .badKind),
    MalformedCase(name: "3-byte subject", frames: send([validID, utf8("client/1"), utf8("echo/1"), utf8("echo"), [1, 2, 3], []]), code: .badSubject),
    MalformedCase(name: "oversize body", frames: send(goodHeaders + [[UInt8](repeating: 0x20, count: (1 << 16) + 1)]), code: .oversizeFrame),
    MalformedCase(name: "ACK with 17 bytes", frames: [signature, [WireCommand.ack.rawValue], [UInt8](repeating: 1, count: 17)], code: .badID),
    MalformedCase(name: "empty ACK", frames: [signature, [WireCommand.ack.rawValue], []], code: .badID),
    MalformedCase(name: "NACK with a 3-byte id", frames: [signature, [WireCommand.nack.rawValue], [1, 2, 3], utf8("busy"), []], code: .badID),
    MalformedCase(name: "BYE with 4 frames", frames: [signature, [WireCommand.bye.rawValue], [], []], code: .extraFrames),
    MalformedCase(name: "DELIVER sent to the broker", frames: [signature, [WireCommand.deliver.rawValue]] + goodHeaders + [[]], code: .forbidden),
    MalformedCase(name: "HELLO with invalid JSON", frames: [signature, [WireCommand.hello.rawValue], utf8("{not json")], code: .invalidJSON),
    MalformedCase(name: "HELLO with invalid UTF-8", frames: [signature, [WireCommand.hello.rawValue], [0xC3, 0x28]], code: .invalidUTF8),
    MalformedCase(name: "HELLO missing endpoints", frames: [signature, [WireCommand.hello.rawValue], utf8(#"{"version":1,"role":"child","worker":"w"}"#)], code: .invalidJSON),
    MalformedCase(name: "HELLO with no endpoints", frames: [signature, [WireCommand.hello.rawValue], utf8(#"{"version":1,"role":"echo","worker":"w","endpoints":[]}"#)], code: .badHello),
    MalformedCase(name: "HELLO claiming an address twice", frames: [signature, [WireCommand.hello.rawValue], utf8(#"{"version":1,"role":"echo","worker":"w","endpoints":[{"address":"echo/9"},{"address":"echo/9"}]}"#)], code: .badHello),
    MalformedCase(name: "SEND to a role nobody serves", frames: send([validID, utf8("client/1"), utf8("nobody/1"), utf8("echo"), [], []]), code: .noRoute),
    MalformedCase(name: "HELLO with an unknown role", frames: [signature, [WireCommand.hello.rawValue], utf8(#"{"version":1,"role":"king","worker":"w","endpoints":[]}"#)], code: .invalidJSON),
]

@Suite("Malformed input", .timeLimit(.minutes(1)))
struct MalformedInputTests {
    @Test("each malformed message gets a NACK with its code, while a well-behaved client keeps being served", arguments: malformedCases)
    func malformed(_ testCase: MalformedCase) throws {
        let broker = try TestBroker { $0.limits.maxBody = 1 << 16 }
        defer { broker.stop() }
        let context = try Context()
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
        #expect(Set(malformedCases.map(\.code)).count >= 12)
    }
}
