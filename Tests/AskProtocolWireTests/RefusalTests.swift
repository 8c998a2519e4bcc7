import AskProtocol
import Foundation
import Testing

@Suite("Refusals: the ids and reasons a NACK carries")
struct RefusalTests {
    @Test(
        "a refused SEND whose header was readable gives its id back; an unreadable one gives none",
        arguments: [0, 1]
    )
    func idOfRefused(base: Int) throws {
        let id = MessageID.random()
        func message(_ frames: [[UInt8]]) -> Multipart {
            var out = Multipart()
            if base == 1 { out.append(routerIdentity) }
            for frame in frames { out.append(frame) }
            return out
        }
        func sendFrames(to: String = "echo/1", kind: String = "echo", acks: [UInt8] = [], _ rest: [[UInt8]] = [[]])
            -> [[UInt8]]
        {
            [
                Wire.signature + [WireCommand.send.rawValue]
                    + WireEncoder.headerBytes(id: id, subject: nil, from: "client/1", to: to, kind: kind) + acks
            ] + rest
        }
        let readable: [(String, [[UInt8]], ErrorCode)] = [
            ("bad address", sendFrames(to: "Echo/1"), .badAddress),
            ("bad kind", sendFrames(kind: "ECHO"), .badKind),
            (
                "oversize body", sendFrames([[UInt8](repeating: 1, count: Wire.Limits.standard.maxBody + 1)]),
                .oversizeFrame
            ),
            ("carried ACK ids of 17 bytes", sendFrames(acks: [UInt8](repeating: 1, count: 17)), .badID),
            ("4097 carried ACK ids", sendFrames(acks: [UInt8](repeating: 1, count: 4097 * 16)), .oversizeFrame),
        ]
        for (name, frames, code) in readable {
            let refused = message(frames)
            #expect(throws: WireError.self, "\(name)") { try WireParser.parse(refused, base: base) }
            do { _ = try WireParser.parse(refused, base: base) } catch { #expect(error.code == code, "\(name)") }
            #expect(WireParser.idOfRefused(refused, base: base) == id, "\(name)")
        }
        let header = WireEncoder.headerBytes(id: id, subject: nil, from: "client/1", to: "echo/1", kind: "echo")
        let lead = Wire.signature + [WireCommand.send.rawValue]
        let unreadable: [(String, [[UInt8]])] = [
            ("a kind length past the end", [lead + header.dropLast(), []]),
            ("the id alone", [lead + id.bytes, []]),
            ("three frames", sendFrames([[], []])),
            ("one frame", sendFrames([])),
            ("the version 1 layout", [Wire.signature, [WireCommand.send.rawValue], header, []]),
            ("another signature", [Array("MDPW".utf8) + [WireCommand.send.rawValue] + header, []]),
            ("an ACK", [Wire.signature + [WireCommand.ack.rawValue] + id.bytes, []]),
        ]
        for (name, frames) in unreadable {
            #expect(WireParser.idOfRefused(message(frames), base: base) == nil, "\(name)")
        }
    }

    @Test("an invalid-question refusal carries the reason's JSON, within the reason limit, and reads back")
    func invalidQuestionReason() throws {
        let reason = InvalidQuestionReason(
            field: "topic.personInformation[1].handle.value",
            code: .notEmail,
            message: "not an e-mail address"
        )
        let error = WireError.invalidQuestion(reason)
        #expect(error.code == .invalidQuestion)
        let json =
            #"{"code":"not-email","field":"topic.personInformation[1].handle.value","#
            + #""message":"not an e-mail address"}"#
        #expect(error.reason == json)
        #expect(error.invalidQuestionReason == reason)
        // A message too long for the frame is shortened at a character, never cut inside the JSON.
        let long = InvalidQuestionReason(
            field: "expirationDate",
            code: .inPast,
            message: String(repeating: "é", count: 2000)
        )
        let shortened = WireError.invalidQuestion(long)
        #expect(shortened.reason.utf8.count <= Wire.Limits.standard.maxReason)
        let decoded = try #require(shortened.invalidQuestionReason)
        #expect(decoded.field == long.field && decoded.code == long.code)
        #expect(long.message.hasPrefix(decoded.message) && !decoded.message.isEmpty)
        // Only invalid-question reasons are structured.
        #expect(WireError(.busy, error.reason).invalidQuestionReason == nil)
        #expect(WireError(.invalidQuestion, "free text").invalidQuestionReason == nil)
    }
}
