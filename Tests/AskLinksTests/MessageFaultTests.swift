import AskLinks
import AskRelayTesting
import AskTestKit
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Message faults and the bandwidth limit with plain sockets on both sides, speaking ZMTP 3 by hand: the bytes a
/// libzmq peer would send (greeting, READY, frames), with AskRelay messages made by AskProtocol's `WireEncoder`.
@Suite("message faults and bandwidth with plain sockets", .serialized, .timeLimit(.minutes(1)))
struct MessageFaultTests {
    @Test("LinkMessageCommand's bytes are the protocol's command bytes")
    func commandBytes() {
        #expect(LinkMessageCommand.allCases.map(\.rawValue) == WireCommand.allCases.map(\.rawValue))
        #expect(LinkMessageCommand.allCases.map(\.description) == WireCommand.allCases.map(\.description))
    }

    @Test(
        "the first answer is dropped whole, in 1-byte and odd chunks: the stream stays valid ZMTP and the rest passes"
    )
    func dropFirstAnswer() async throws {
        let fault = LinkMessageFault(.drop, .toBroker, command: .send, kind: "answer", count: 1)
        #expect(fault.description == "drop SEND answer toBroker first 1")
        let answer1 = ask(.send, kind: "answer", id: 1, body: 300)
        let answer2 = ask(.send, kind: "answer", id: 2)
        let other = ask(.send, kind: "send", id: 3)
        let marker = ask(.send, kind: "cancel", id: 4)
        let handshake = greeting() + ready()
        // A PING command between the frames of the dropped answer (before its 300-byte body, a LONG frame):
        // commands stand alone and pass.
        let dropped = zmtp(answer1)
        let split = dropped.count - (1 + 8 + 300)
        let sent =
            handshake + zmtp(other) + Array(dropped[..<split]) + ping() + Array(dropped[split...])
            + zmtp(answer2) + zmtp(marker)
        let expected = handshake + zmtp(other) + ping() + zmtp(answer2) + zmtp(marker)

        for chunking in [1, 7, 4096] {
            let (link, process, upstream, close) = try connected("drop-\(chunking)")
            defer { close() }
            link.apply(fault)
            write(sent, to: process, chunk: chunking)
            // Positive evidence: everything after the dropped answer arrives, the marker last.
            #expect(try await blocking { try upstream.read(count: expected.count) } == expected)
            #expect(await link.wait { $0.bytesToBroker == expected.count })
            let counters = link.counters
            #expect(
                counters[fault]
                    == {
                        var c = LinkMessageCounters()
                        c.matched = 2
                        c.dropped = 1
                        return c
                    }()
            )
            #expect(counters.droppedToBroker == dropped.count && counters.heldToBroker == 0, "\(counters)")
            #expect(!upstream.hasInput())
        }
    }

    @Test("a duplicated DELIVER of a response comes twice, byte for byte; other kinds once")
    func duplicateResponse() async throws {
        let (link, process, upstream, close) = try connected("dup")
        defer { close() }
        let fault = LinkMessageFault(.duplicate, .fromBroker, command: .deliver, kind: "response")
        link.apply(fault)
        let response = zmtp(ask(.deliver, kind: "response", id: 9, body: 70_000))  // a long frame
        let question = zmtp(ask(.deliver, kind: "question", id: 10))
        let handshake = greeting(server: true) + ready()
        upstream.write(handshake + question + response + question)
        let expected = handshake + question + response + response + question
        #expect(try await blocking { try process.read(count: expected.count) } == expected)
        #expect(await link.wait { $0.heldFromBroker == 0 })
        let counters = link.counters
        #expect(counters[fault].matched == 1 && counters[fault].duplicated == 1, "\(counters)")
        #expect(counters.duplicatedFromBroker == response.count)
        #expect(counters.bytesFromBroker == counters.readFromBroker + response.count)
    }

    @Test(
        "drop with a probability and a count: it takes `count` of the matching messages, then none; same seed, same ones"
    )
    func probabilityAndCount() async throws {
        func run(_ name: String) async throws -> [UInt8] {
            let (link, process, upstream, close) = try connected(name)
            defer { close() }
            let fault = LinkMessageFault(.drop, .toBroker, kind: "answer", probability: 0.3, count: 3, seed: 42)
            link.apply(fault)
            var sent = greeting() + ready()
            for id in 1...40 { sent += zmtp(ask(.send, kind: "answer", id: UInt8(id))) }
            sent += zmtp(ask(.send, kind: "cancel", id: 99))
            process.write(sent)
            // The marker after the 40 answers arrives: positive evidence that the rest passed.
            let kept = sent.count - 3 * zmtp(ask(.send, kind: "answer", id: 1)).count
            let got = try await blocking { try upstream.read(count: kept) }
            #expect(
                Array(got.suffix(zmtp(ask(.send, kind: "cancel", id: 99)).count))
                    == zmtp(ask(.send, kind: "cancel", id: 99))
            )
            #expect(await link.wait { $0.bytesToBroker == kept })
            #expect(link.counters[fault].matched == 40 && link.counters[fault].dropped == 3, "\(link.counters)")
            #expect(!upstream.hasInput())
            // Which answers passed: the id's last byte sits at a fixed place in each message.
            let size = zmtp(ask(.send, kind: "answer", id: 1)).count
            let start = (greeting() + ready()).count
            return (0..<37).map { got[start + $0 * size + idOffset] }
        }
        let first = try await run("p-1")
        let second = try await run("p-2")
        #expect(first == second)
        let missing = Set(1...40).subtracting(first.map(Int.init))
        #expect(missing.count == 3, "\(missing)")
        print("links: probability 0.3, count 3, seed 42 dropped answers \(missing.sorted())")
    }

    @Test("a delayed message is held at least its delay and a later message overtakes it; a heal lets it go at once")
    func delayOvertaken() async throws {
        let (link, process, upstream, close) = try connected("mdelay")
        defer { close() }
        let fault = LinkMessageFault(.delay(.milliseconds(200)), .toBroker, kind: "answer")
        link.apply(fault)
        let handshake = greeting() + ready()
        let answer = zmtp(ask(.send, kind: "answer", id: 1))
        let next = zmtp(ask(.send, kind: "send", id: 2))
        let start = ContinuousClock.now
        process.write(handshake + answer + next)
        #expect(try await blocking { try upstream.read(count: handshake.count + next.count) } == handshake + next)
        #expect(try await blocking { try upstream.read(count: answer.count) } == answer)
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        #expect(await link.wait { $0.bytesToBroker == handshake.count + next.count + answer.count })
        #expect(link.counters[fault].delayed == 1 && link.counters.heldToBroker == 0)

        // Healed, a message still held by a delay is due at once.
        link.heal()
        let long = LinkMessageFault(.delay(.seconds(60)), .toBroker, kind: "answer")
        link.apply(long)
        let again = zmtp(ask(.send, kind: "answer", id: 3))
        process.write(again)
        #expect(await link.wait { $0[long].delayed == 1 })
        #expect(!upstream.hasInput())
        link.heal(.message(long))
        #expect(try await blocking { try upstream.read(count: again.count) } == again)
    }

    @Test("a CURVE greeting: the link cannot read it, says so once per fault and connection, and passes every byte")
    func curveRefused() async throws {
        let lines = Mutex<[String]>([])
        let broker = try Listener()
        defer { broker.close() }
        let link = try FaultLink(name: "curve", upstream: broker.endpoint) { line in
            lines.withLock { $0.append(line) }
        }
        defer { link.stop() }
        let fault = LinkFault.message(LinkMessageFault(.drop, .toBroker, kind: "answer"))
        // Before anything starts, the supervisor can ask.
        #expect(fault.refusal(curve: true)?.hasPrefix("message fault refused: CURVE") == true)
        #expect(fault.refusal(curve: false) == nil)
        #expect(LinkFault.partition(.both).refusal(curve: true) == nil)
        #expect(LinkFault.bandwidth(bytesPerSecond: 1000, .both).refusal(curve: true) == nil)

        link.apply(fault)
        let process = try Peer(connectingTo: link.endpoint)
        defer { process.close() }
        let upstream = try broker.accept()
        defer { upstream.close() }
        #expect(link.refusal(of: fault) == nil)  // no greeting seen yet
        // Were this NULL, the answer would be dropped; under CURVE it passes as it is (opaque bytes).
        let sent = greeting(mechanism: "CURVE") + zmtp(ask(.send, kind: "answer", id: 1))
        process.write(sent)
        #expect(try await blocking { try upstream.read(count: sent.count) } == sent)
        #expect(await link.wait { $0.messages.refused == 1 && $0.unreadable == 1 })
        #expect(link.counters.messages.matched == 0 && link.counters.messages.dropped == 0)
        #expect(link.refusal(of: fault) != nil)
        #expect(lines.withLock { $0 }.contains { $0.contains("link curve: message fault refused: CURVE") })
        // A second message fault applied now is refused at once on the open connection.
        let second = LinkMessageFault(.duplicate, .both)
        link.apply(second)
        #expect(link.counters[second].refused == 1)
    }

    @Test("bandwidth: N bytes at R B/s take at least N/R, in order, none lost; the other way is not limited")
    func bandwidthLowerBound() async throws {
        let (link, process, upstream, close) = try connected("bandwidth")
        defer { close() }
        link.bandwidth(50_000, direction: .toBroker)
        #expect(link.faults.map(\.description) == ["bandwidth 50000 B/s toBroker"])
        let data = pattern(30_000, seed: 3)
        let start = ContinuousClock.now
        process.write(data)
        upstream.write([1, 2, 3])
        #expect(try await blocking { try process.read(count: 3) } == [1, 2, 3])
        let back = ContinuousClock.now - start
        #expect(try await blocking { try upstream.read(count: data.count) } == data)
        let took = ContinuousClock.now - start
        print("links: 30000 B at 50000 B/s took \(took); 3 B the other way \(back)")
        #expect(took >= .milliseconds(600), "\(took)")
        #expect(await link.wait { $0.bytesToBroker == data.count })
        link.heal()
        // Healed: unlimited again.
        process.write([9])
        #expect(try await blocking { try upstream.read(count: 1) } == [9])
    }
}

/// Where a message's id's last byte is in `zmtp(ask(...))` of a short SEND: after the lead frame's 2-byte head, the
/// signature and the command (4 + 1), byte 15 of the 16-byte id.
let idOffset = 2 + 5 + 15

/// A link, a process connected to it and the broker's end of it; `close` closes all three.
func connected(_ name: String) throws -> (FaultLink, Peer, Peer, () -> Void) {
    let broker = try Listener()
    let link = try FaultLink(name: name, upstream: broker.endpoint)
    let process = try Peer(connectingTo: link.endpoint)
    let upstream = try broker.accept()
    return (
        link, process, upstream,
        {
            process.close()
            upstream.close()
            link.stop()
            broker.close()
        }
    )
}

/// Writes `bytes` in chunks of `chunk` bytes (each a write of its own; TCP_NODELAY on the link's side).
func write(_ bytes: [UInt8], to peer: Peer, chunk: Int) {
    var offset = 0
    while offset < bytes.count {
        let end = min(bytes.count, offset + chunk)
        peer.write(Array(bytes[offset..<end]))
        offset = end
    }
}

/// A ZMTP 3.1 greeting: signature, version 3.1, the mechanism padded to 20 bytes, as-server, filler.
func greeting(mechanism: String = "NULL", server: Bool = false) -> [UInt8] {
    var bytes: [UInt8] = [0xFF] + [UInt8](repeating: 0, count: 8) + [0x7F, 3, 1]
    bytes += Array(mechanism.utf8) + [UInt8](repeating: 0, count: 20 - mechanism.utf8.count)
    bytes += [server ? 1 : 0] + [UInt8](repeating: 0, count: 31)
    return bytes
}

/// A command frame (flags 0x04): the name's length, the name, the data.
func command(_ name: String, _ data: [UInt8] = []) -> [UInt8] {
    let body = [UInt8(name.utf8.count)] + Array(name.utf8) + data
    return [0x04, UInt8(body.count)] + body
}

/// READY with the socket type DEALER, as libzmq sends it.
func ready() -> [UInt8] {
    let property = [11] + Array("Socket-Type".utf8) + [0, 0, 0, 6] + Array("DEALER".utf8)
    return command("READY", property)
}

func ping() -> [UInt8] { command("PING", [0, 0]) }

/// The ZMTP frames of one message: MORE on every frame but the last, LONG sizes over 255 bytes.
func zmtp(_ frames: [[UInt8]]) -> [UInt8] {
    var bytes: [UInt8] = []
    for (index, frame) in frames.enumerated() {
        let more: UInt8 = index < frames.count - 1 ? 0x01 : 0
        if frame.count > 255 {
            bytes.append(more | 0x02)
            withUnsafeBytes(of: UInt64(frame.count).bigEndian) { bytes += $0 }
        } else {
            bytes += [more, UInt8(frame.count)]
        }
        bytes += frame
    }
    return bytes
}

/// The frames of an AskRelay SEND or DELIVER (WireEncoder), with an id ending in `id` and a body of `body` bytes.
func ask(_ command: WireCommand, kind: String, id: UInt8, body: Int = 20) -> [[UInt8]] {
    var out = Multipart()
    var idBytes = [UInt8](repeating: 0xA0, count: 16)
    idBytes[15] = id
    WireEncoder.message(
        command,
        id: MessageID(bytes: idBytes)!,
        from: command == .send ? "guardian/g1-1" : "broker",
        to: command == .send ? "broker" : "child/c1-1",
        kind: kind,
        subject: nil,
        body: [UInt8](repeating: UInt8(ascii: "x"), count: body),
        into: &out
    )
    return out.frames
}
