import Foundation
import Synchronization
import Testing
@testable import ZeroMQ
import CZeroMQ

/// What a CURVE client's monitor reports for each way its connection can fail, and how ``HandshakeFailure`` reads it.
@Suite("handshake failures a client can tell apart", .serialized, .timeLimit(.minutes(1)))
struct HandshakeFailureTests {
    /// A CURVE ROUTER with a ZAP handler (on its own thread) that admits only `allowed`.
    // @unchecked: the sockets are used by the ZAP thread only after init.
    final class CurveServer: @unchecked Sendable {
        let context: ZMQContext
        let keys: CurveKeyPair
        let endpoint: String
        let router: ZMQSocket
        let zap: ZMQSocket
        let stopping = Atomic<Bool>(false)
        let finished = DispatchSemaphore(value: 0)

        init(allowed: Set<String>) throws {
            context = try ZMQContext()
            keys = try CurveKeyPair.generate()
            zap = try makeSocket(context, .rep, receiveTimeout: 50)
            _ = try zap.bind(ZAP.endpoint)
            router = try makeSocket(context, .router)
            try router.makeCurveServer(keys)
            try router.set(.zapDomain, "test")
            endpoint = try router.bind("tcp://127.0.0.1:*")
            Thread { [self] in
                while !stopping.load(ordering: .relaxed) {
                    guard let frames = try? zap.receiveMultipart(.wait), let request = ZAP.Request(frames: frames)
                    else { continue }
                    let ok = request.curvePublicKey.map(allowed.contains) ?? false
                    _ = try? zap.send(multipart: ZAP.reply(to: request, status: ok ? 200 : 400, text: ok ? "OK" : "no"))
                }
                finished.signal()
            }.start()
        }

        func stop() {
            stopping.store(true, ordering: .relaxed)
            finished.wait()
        }
    }

    /// Connects a DEALER (CURVE when `keys` is given) and returns the failures the monitor explains, in order:
    /// the first three, or what came within a second of the first (and within 5 s).
    func failures(endpoint: String, context: ZMQContext, keys: CurveKeyPair?, serverKey: String?) throws
        -> [HandshakeFailure.Kind]
    {
        let dealer = try makeSocket(context, .dealer)
        try dealer.set(.reconnectInterval, 50)
        let monitor = try dealer.monitor(HandshakeDiagnosis.events)
        if let keys, let serverKey { try dealer.makeCurveClient(keys, serverKey: serverKey) }
        try dealer.connect(endpoint)
        _ = try dealer.send([1], .dontWait)
        var reader = HandshakeDiagnosis()
        var found: [HandshakeFailure.Kind] = []
        var deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline && found.count < 3 {
            guard let event = try monitor.next(timeoutMilliseconds: 100) else { continue }
            guard let failure = reader.read(event) else { continue }
            if found.isEmpty { deadline = min(deadline, ContinuousClock.now + .seconds(1)) }
            found.append(failure.kind)
        }
        return found
    }

    /// The failures seen, which must all be `kind` (a consequence is never reported as a second cause).
    func expectOnly(_ kind: HandshakeFailure.Kind, _ found: [HandshakeFailure.Kind]) {
        #expect(!found.isEmpty, "no failure reported")
        #expect(found.allSatisfy { $0 == kind }, "\(found)")
    }

    @Test("a key the server refuses is an authentication failure")
    func refusedKey() throws {
        let server = try CurveServer(allowed: [])
        defer { server.stop() }
        expectOnly(
            .keyRefused,
            try failures(
                endpoint: server.endpoint,
                context: server.context,
                keys: try .generate(),
                serverKey: server.keys.publicKey
            )
        )
    }

    @Test("a wrong server public key is told apart from a refused key")
    func wrongServerKey() throws {
        let client = try CurveKeyPair.generate()
        let server = try CurveServer(allowed: [client.publicKey])
        defer { server.stop() }
        expectOnly(
            .noHandshake,
            try failures(
                endpoint: server.endpoint,
                context: server.context,
                keys: client,
                serverKey: try CurveKeyPair.generate().publicKey
            )
        )
    }

    @Test("a plain client against a CURVE server is a mechanism mismatch")
    func plainClient() throws {
        let server = try CurveServer(allowed: [])
        defer { server.stop() }
        expectOnly(
            .mechanismMismatch,
            try failures(endpoint: server.endpoint, context: server.context, keys: nil, serverKey: nil)
        )
    }

    @Test("nothing listening is a refused connect")
    func nothingListening() throws {
        let context = try ZMQContext()
        let probe = try makeSocket(context, .router)
        let endpoint = try probe.bind("tcp://127.0.0.1:*")
        try probe.unbind(endpoint)
        expectOnly(.unreachable, try failures(endpoint: endpoint, context: context, keys: nil, serverKey: nil))
    }

    @Test("a good key over the right server key succeeds: no failure")
    func goodKey() throws {
        let client = try CurveKeyPair.generate()
        let server = try CurveServer(allowed: [client.publicKey])
        defer { server.stop() }
        let dealer = try makeSocket(server.context, .dealer)
        let monitor = try dealer.monitor([.handshakeFailed, .handshakeSucceeded])
        try dealer.makeCurveClient(client, serverKey: server.keys.publicKey)
        try dealer.connect(server.endpoint)
        let event = try monitor.waitFor([.handshakeFailed, .handshakeSucceeded], timeoutMilliseconds: 5_000)
        #expect(event?.event == .handshakeSucceeded)
        var reader = HandshakeDiagnosis()
        #expect(event.flatMap { reader.read($0) } == nil)
    }

    @Test("a definite cause stays the cause on the next socket: its drops are not a second cause")
    func definiteCauseSurvivesReconnect() {
        func event(_ kind: MonitorEvents, _ value: UInt32 = 0) -> MonitorEvent {
            MonitorEvent(event: kind, value: value, endpoint: "tcp://127.0.0.1:1")
        }
        var reader = HandshakeDiagnosis()
        let mismatch = UInt32(ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        #expect(reader.read(event(.handshakeFailedProtocol, mismatch))?.kind == .mechanismMismatch)
        reader.socketReplaced()
        // A fresh diagnosis would call two drops in a row `noHandshake`: a second "no session" line.
        #expect(reader.read(event(.disconnected)) == nil)
        #expect(reader.read(event(.disconnected)) == nil)
        #expect(reader.read(event(.handshakeFailedProtocol, mismatch))?.kind == .mechanismMismatch)
        // After a success, drops count again.
        _ = reader.read(event(.handshakeSucceeded))
        reader.socketReplaced()
        _ = reader.read(event(.disconnected))
        #expect(reader.read(event(.disconnected))?.kind == .noHandshake)
    }

    @Test("a cause is explained once; a vague one only after two windows in a row, never after a definite one")
    func explainedOnce() {
        func said(_ explainer: inout HandshakeExplainer, _ failure: HandshakeFailure?) -> Bool {
            explainer.shouldExplain(failure)
        }
        func failure(_ kind: HandshakeFailure.Kind) -> HandshakeFailure {
            HandshakeFailure(kind: kind, endpoint: "tcp://127.0.0.1:1", detail: 0)
        }
        // A plain client against CURVE: the first window ends with drops, the next with the mismatch.
        var plain = HandshakeExplainer()
        #expect(!said(&plain, failure(.noHandshake)))
        #expect(said(&plain, failure(.mechanismMismatch)))
        #expect(!said(&plain, failure(.mechanismMismatch)))
        #expect(!said(&plain, failure(.noHandshake)))
        #expect(!said(&plain, failure(.noHandshake)))
        // A wrong server key only ever shows drops: said at the second window, once.
        var wrongKey = HandshakeExplainer()
        #expect(!said(&wrongKey, failure(.noHandshake)))
        #expect(said(&wrongKey, failure(.noHandshake)))
        #expect(!said(&wrongKey, failure(.noHandshake)))
        // Nothing listening; a window without a failure breaks the streak.
        var nobody = HandshakeExplainer()
        #expect(!said(&nobody, failure(.unreachable)))
        #expect(!said(&nobody, nil))
        #expect(!said(&nobody, failure(.unreachable)))
        #expect(said(&nobody, failure(.unreachable)))
    }
}
