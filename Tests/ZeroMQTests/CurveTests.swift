import CZeroMQ
import Foundation
import Testing
import ZeroMQ

@Suite("CURVE and Z85", .timeLimit(.minutes(1)))
struct CurveTests {
    @Test("libzmq is built with CURVE")
    func hasCurve() {
        #expect(ZMQ.has("curve"))
        #expect(ZMQ.has("no-such-capability") == false)
    }

    @Test("Z85 matches the RFC 32 test vector and round-trips")
    func z85RoundTrip() throws {
        let vector: [UInt8] = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]
        #expect(try Z85.encode(vector) == "HelloWorld")
        #expect(try Z85.decode("HelloWorld") == vector)

        let key = payload(count: 32)
        let text = try Z85.encode(key)
        #expect(text.utf8.count == 40)
        #expect(try Z85.decode(text) == key)

        #expect(try Z85.encode([]) == "")
        #expect(try Z85.decode("") == [])
    }

    @Test(
        "Z85 rejects bad lengths, characters and out-of-range groups",
        arguments: ["abcd", "HelloWorl", "Hello Worl", "Hello\"orld", "#####"]
    )
    func z85RejectsBadText(text: String) throws {
        let error = try #require(throws: ZMQError.self) { try Z85.decode(text) }
        #expect(error.code == EINVAL)
        #expect(error.call == "zmq_z85_decode")
    }

    @Test("Z85 encoding needs a multiple of 4 bytes")
    func z85RejectsBadLength() throws {
        let error = try #require(throws: ZMQError.self) { try Z85.encode([1, 2, 3]) }
        #expect(error.code == EINVAL)
        #expect(error.call == "zmq_z85_encode")
    }

    @Test("Generated key pairs are 40-character Z85 and the public key derives from the secret one")
    func keyPairs() throws {
        let keys = try CurveKeyPair.generate()
        #expect(keys.publicKey.utf8.count == 40)
        #expect(keys.secretKey.utf8.count == 40)
        #expect(try Z85.decode(keys.publicKey).count == 32)
        #expect(try Z85.decode(keys.secretKey).count == 32)
        #expect(try CurveKeyPair(secretKey: keys.secretKey) == keys)
        #expect(try CurveKeyPair.generate() != keys)

        let error = try #require(throws: ZMQError.self) { try CurveKeyPair(secretKey: "too short") }
        #expect(error.code == EINVAL)
    }

    @Test("CURVE keys set on a socket read back, as Z85 text and as 32 bytes")
    func keysReadBack() throws {
        let context = try ZMQContext()
        let keys = try CurveKeyPair.generate()
        let server = try makeSocket(context, .router)
        try server.makeCurveServer(keys)
        #expect(try server.get(.curveServer))
        #expect(try server.get(.mechanism) == ZMQ_CURVE)
        #expect(try server.get(.curveSecretKey) == keys.secretKey)
        #expect(try server.get(.curveSecretKeyBinary) == Z85.decode(keys.secretKey))

        let client = try makeSocket(context, .dealer)
        try client.makeCurveClient(try CurveKeyPair.generate(), serverKey: keys.publicKey)
        #expect(try client.get(.curveServerKey) == keys.publicKey)
        #expect(try client.get(.curveServerKeyBinary) == Z85.decode(keys.publicKey))
    }

    @Test("A client with the right server key completes the handshake and its message is delivered")
    func handshakeSucceeds() throws {
        let context = try ZMQContext()
        let serverKeys = try CurveKeyPair.generate()
        let server = try makeSocket(context, .pull)
        try server.makeCurveServer(serverKeys)
        let serverEvents = try server.monitor([.handshakeSucceeded, .handshakeFailed])
        let endpoint = try server.bind("tcp://127.0.0.1:*")

        let client = try makeSocket(context, .push)
        try client.makeCurveClient(try CurveKeyPair.generate(), serverKey: serverKeys.publicKey)
        let clientEvents = try client.monitor([.handshakeSucceeded, .handshakeFailed])
        try client.connect(endpoint)
        #expect(try client.send("over curve"))

        #expect(try server.receive()?.bytes == bytes("over curve"))
        let serverSide = try serverEvents.waitFor([.handshakeSucceeded, .handshakeFailed], timeoutMilliseconds: 5_000)
        #expect(serverSide?.event == .handshakeSucceeded)
        let clientSide = try clientEvents.waitFor([.handshakeSucceeded, .handshakeFailed], timeoutMilliseconds: 5_000)
        #expect(clientSide?.event == .handshakeSucceeded)
    }

    @Test("A client with the wrong server key fails the handshake and nothing is delivered")
    func handshakeFailsWithWrongServerKey() throws {
        let context = try ZMQContext()
        let serverKeys = try CurveKeyPair.generate()
        let server = try makeSocket(context, .pull)
        try server.makeCurveServer(serverKeys)
        let serverEvents = try server.monitor([.handshakeSucceeded, .handshakeFailed])
        let endpoint = try server.bind("tcp://127.0.0.1:*")

        let client = try makeSocket(context, .push)
        let impostorKey = try CurveKeyPair.generate().publicKey
        try client.makeCurveClient(try CurveKeyPair.generate(), serverKey: impostorKey)
        let clientEvents = try client.monitor(.handshakeSucceeded)
        try client.connect(endpoint)
        #expect(try client.send("should not arrive"))

        let serverSide = try serverEvents.waitFor([.handshakeSucceeded, .handshakeFailed], timeoutMilliseconds: 5_000)
        let failed = serverSide.map { MonitorEvents.handshakeFailed.contains($0.event) } ?? false
        #expect(failed, "server saw \(String(describing: serverSide))")
        #expect(try clientEvents.waitFor(.handshakeSucceeded, timeoutMilliseconds: 300) == nil)
        #expect(try server.wait(timeoutMilliseconds: 300) == false)
        #expect(try server.receive(.dontWait) == nil)
    }
}
