import AskProtocol
import Foundation
import Testing

/// The hex examples in docs/protocol.md are made here: each is encoded by WireEncoder, parsed back, dumped, and must
/// appear verbatim in the specification.
enum SpecExamples {
    static let questionUUID = "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"
    static let question = MessageID(uuid: UUID(uuidString: questionUUID)!)
    static let sendID = MessageID(hex: "0123456789abcdef0011223344556677")!
    static let deliverID = MessageID(hex: "a1b2c3d4e5f60718293a4b5c6d7e8f90")!

    static var all: [(name: String, message: Multipart)] {
        var examples: [(String, Multipart)] = []
        func add(_ name: String, _ build: (inout Multipart) -> Void) {
            var message = Multipart()
            build(&message)
            examples.append((name, message))
        }
        add("HELLO") {
            let hello = Hello(
                role: .child,
                worker: "askrelay-child[7]",
                endpoints: [.init(address: "child/c1", family: "f1")],
                window: 64,
                heartbeatMs: 1000
            )
            WireEncoder.session(.hello, body: SessionJSON.encode(hello), into: &$0)
        }
        add("WELCOME") {
            let welcome = Welcome(
                session: "3f2a9c01b7e4-0",
                heartbeatMs: 1000,
                liveness: 3,
                window: 64,
                broker: "3f2a9c01b7e4",
                carriedAcks: true
            )
            WireEncoder.session(.welcome, body: SessionJSON.encode(welcome), into: &$0)
        }
        add("HEARTBEAT") { WireEncoder.heartbeat(into: &$0) }
        add("SEND") {
            WireEncoder.message(
                .send,
                id: sendID,
                from: "child/c1",
                to: "broker",
                kind: "send",
                subject: question,
                body: Array(#"{"questionID":"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"}"#.utf8),
                into: &$0
            )
        }
        add("SEND-traced") {
            WireEncoder.message(
                .send,
                id: sendID,
                from: "child/c1",
                to: "broker",
                kind: "cancel",
                subject: question,
                trace: TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
                acks: [deliverID],
                body: Array(#"{"questionID":"6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162"}"#.utf8),
                into: &$0
            )
        }
        add("ACK") { WireEncoder.ack([sendID], into: &$0) }
        add("DELIVER") {
            WireEncoder.message(
                .deliver,
                id: deliverID,
                from: "echo/e1",
                to: "echo/e2",
                kind: "echo",
                subject: nil,
                body: Array(#"{"payload":"ping 000001"}"#.utf8),
                into: &$0
            )
        }
        add("NACK") {
            WireEncoder.nack(
                id: sendID,
                WireError(.alreadySent, "the question was already sent; cannot send"),
                into: &$0
            )
        }
        add("NACK-unregistered") {
            WireEncoder.nack(
                id: nil,
                WireError(.notRegistered, "this connection has no session; send HELLO"),
                into: &$0
            )
        }
        add("BYE") { WireEncoder.bye(reason: "broker shutting down", into: &$0) }
        return examples
    }

    /// One line per frame: index, size, hex (frames up to 24 bytes), and the text when it is printable ASCII.
    /// Longer binary frames (the SEND/DELIVER header) are shown in hex, 16 bytes per line.
    static func dump(_ message: Multipart) -> String {
        (0..<message.count).map { index -> String in
            let frame = Array(message[index])
            let printable = !frame.isEmpty && frame.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }
            var line = "[\(index)] " + "(\(frame.count))".padding(toLength: 6, withPad: " ", startingAt: 0)
            if frame.count <= 24 {
                let hex = frame.map { String(format: "%02x", $0) }.joined(separator: " ")
                line +=
                    printable
                    ? hex.padding(toLength: 72, withPad: " ", startingAt: 0) + "\""
                        + String(decoding: frame, as: UTF8.self) + "\"" : hex
            } else if printable {
                line += String(decoding: frame, as: UTF8.self)
            } else if frame.count <= 256 {
                line += stride(from: 0, to: frame.count, by: 16).map { start in
                    frame[start..<min(start + 16, frame.count)].map { String(format: "%02x", $0) }.joined(
                        separator: " "
                    )
                }.joined(separator: "\n" + String(repeating: " ", count: 10))
            } else {
                line += "<\(frame.count) bytes>"
            }
            return line.replacingOccurrences(of: " +$", with: "", options: .regularExpression)
        }.joined(separator: "\n")
    }
}

@Suite("Specification examples")
struct SpecExampleTests {
    static let specification: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/protocol.md"), encoding: .utf8)) ?? ""
    }()

    @Test("every example parses and appears verbatim in docs/protocol.md", arguments: SpecExamples.all.map(\.name))
    func example(name: String) throws {
        let message = try #require(SpecExamples.all.first { $0.name == name }?.message)
        let parsed = try WireParser.parse(message)
        #expect(parsed.command.description == name.prefix { $0 != "-" }.description)
        let dump = SpecExamples.dump(message)
        #expect(Self.specification.contains(dump), "docs/protocol.md lacks the \(name) example:\n\(dump)")
    }

    /// `ASKRELAY_SPEC_EXAMPLES_OUT=/path swift test --filter SpecExampleTests` writes every dump, to paste into the
    /// specification after a deliberate change.
    @Test("the examples can be written out for the specification")
    func writeOut() throws {
        let all = SpecExamples.all.map { "--- \($0.name)\n\(SpecExamples.dump($0.message))\n" }.joined()
        #expect(all.contains("--- SEND\n[0] (59)  41 53 4b 02 04 01 23 45 67 89 ab cd ef 00 11 22\n"))
        guard let path = ProcessInfo.processInfo.environment["ASKRELAY_SPEC_EXAMPLES_OUT"] else { return }
        try all.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
