@testable import AskClient
import AskKeys
import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// A handler that records whether the connection told it that it ended, and whether it ever registered.
// @unchecked: written on the connection thread, read only after wait().
final class EndWatcher: WorkerHandler, @unchecked Sendable {
    private(set) var failure: WorkerConnectionError?
    private(set) var registrations = 0
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition { .ack }
    func registered(_ connection: WorkerConnection, welcome: Welcome) { registrations += 1 }
    func ended(_ connection: WorkerConnection, failure: WorkerConnectionError) { self.failure = failure }
}

@Suite("refusals that can never succeed end the connection", .timeLimit(.minutes(1)), .serialized)
struct ConnectionRefusalTests {
    func configuration(_ broker: String, role: SessionRole, _ claims: [EndpointClaim]) -> WorkerConfiguration {
        var configuration = WorkerConfiguration(broker: broker, role: role, worker: "refusal-test", endpoints: claims)
        configuration.heartbeatInterval = .milliseconds(200)
        return configuration
    }

    @Test("a HELLO refused 'forbidden' ends the connection with the broker's reason, after one attempt")
    func forbiddenEnds() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let watcher = EndWatcher()
        // A guardian session may not serve a child address: the broker refuses the HELLO with `forbidden`.
        let runtime = try WorkerRuntime(
            configuration: configuration(
                broker.endpoint,
                role: .guardian,
                [EndpointClaim(address: "child/c1", family: "f1")]
            ),
            logger: AskLogger(label: "test", level: .warning),
            context: try ZMQContext()
        ) { watcher }
        try await blocking { runtime.wait() }
        // Ended by the refusal itself, not after retries: the failure is the broker's `forbidden`, and the broker
        // refused exactly one HELLO (below).
        #expect(runtime.failure?.code == .forbidden)
        let message = runtime.failure?.message ?? ""
        #expect(message.contains("may not serve 'child/c1'"), "\(message)")
        #expect(watcher.failure == runtime.failure)
        #expect(watcher.registrations == 0)
        let refusals = broker.logs.lines.filter { $0.contains("forbidden") }
        #expect(refusals.count == 1, "one HELLO, one refusal: \(refusals)")
    }

    @Test("transient refusals are not in the permanent set")
    func transientCodes() {
        for code in [ErrorCode.busy, .notRegistered, .storageFailed, .addressTaken] {
            #expect(!WorkerConnectionError.permanentHelloRefusals.contains(code), "\(code)")
        }
    }

    @Test("address-taken is retried for the patience, then the connection ends")
    func addressTakenEnds() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try ZMQContext()
        let holder = try RawPeer(context: context, endpoint: broker.endpoint)
        try holder.register(role: .limits, ["limits/L1"])
        var configuration = configuration(broker.endpoint, role: .limits, [EndpointClaim(address: "limits/L1")])
        configuration.addressTakenPatience = .seconds(1)
        let watcher = EndWatcher()
        let start = ContinuousClock.now
        let runtime = try WorkerRuntime(
            configuration: configuration,
            logger: AskLogger(label: "test", level: .warning),
            context: context
        ) { watcher }
        // The holder stays alive (it answers heartbeats) while the worker waits; the suite's time limit ends a
        // worker that never gives up.
        while runtime.failure == nil && !Task.isCancelled {
            _ = try holder.next(timeout: .milliseconds(100))
            var beat = Multipart()
            WireEncoder.heartbeat(into: &beat)
            try holder.send(beat)
        }
        if runtime.failure == nil { runtime.stop() }  // the time limit passed: do not wait on.
        try await blocking { runtime.wait() }
        let elapsed = ContinuousClock.now - start
        #expect(runtime.failure?.code == .addressTaken)
        #expect(elapsed >= .seconds(1), "retried for the patience first (\(elapsed))")
        #expect(watcher.registrations == 0)
        // More than one HELLO was refused: it retried.
        #expect(broker.logs.lines.filter { $0.contains("address-taken") }.count >= 2)
    }

    @Test("a connection whose socket dies ends with a failure, not as if it had been stopped")
    func deadConnectionIsAFailure() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try ZMQContext()
        let watcher = EndWatcher()
        let runtime = try WorkerRuntime(
            configuration: configuration(broker.endpoint, role: .limits, [EndpointClaim(address: "limits/L1")]),
            logger: AskLogger(label: "test", level: .critical),
            context: context
        ) { watcher }
        // Every call on the context's sockets fails with ETERM from now on.
        context.shutdown()
        try await blocking { runtime.wait() }
        #expect(runtime.failure != nil)
        #expect(runtime.failure?.message.contains("failed") == true)
        #expect(watcher.failure != nil)
    }

    @Test("AskCenter surfaces a refused CURVE key: no registration wait, no ask, loops on it")
    func askCenterSurfacesRefusal() async throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let brokerKeys = try CurveKeyPair.generate()
        try KeyFile(keys: brokerKeys, role: "broker", id: "broker").save(path: directory.path + "/broker.key")
        try PrincipalsFile(principals: []).save(path: directory.path + "/principals.json")
        let path = directory.path
        let broker = try TestBroker { configuration in
            configuration.curveSecretFile = path + "/broker.key"
            configuration.principalsFile = path + "/principals.json"
        }
        defer { broker.stop() }
        var options = AskCenter.Options()
        options.heartbeatInterval = .milliseconds(200)
        options.curve = (try CurveKeyPair.generate(), brokerKeys.publicKey)
        // Longer than the suite's time limit: an ask that ended by its timeout could not pass.
        options.askTimeout = .seconds(120)
        let center = try AskCenter(
            broker: broker.endpoint,
            children: [ChildIdentity(id: "c1", family: "f1")],
            stateDirectory: nil,
            logger: AskLogger(label: "test", level: .critical),
            context: try ClientContext(),
            options: options
        )
        // The key is not listed: the handshake is refused, and the center gives up instead of reconnecting (one
        // that kept reconnecting never sets `connectionFailure`, and the suite's time limit ends the test).
        var registered = false
        while center.connectionFailure == nil && !Task.isCancelled {
            registered = await center.waitUntilRegistered(timeout: .milliseconds(200)) || registered
        }
        #expect(!registered)
        #expect(center.connectionFailure?.message.contains("refused this worker's CURVE key") == true)
        // No registration wait: with a timeout past the suite's time limit, only the ended connection can make this
        // return (false) before the limit fails the test.
        #expect(await center.waitUntilRegistered(timeout: .seconds(120)) == false)
        // No ask: it fails with the ended connection, not with its timeout (set past the time limit above).
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+14155550100", kind: .phoneNumber))
        await #expect(throws: AskError.systemError("the ask center stopped: its connection to the broker ended")) {
            try await center.child("c1").ask(question)
        }
        await center.stop()
    }
}

/// A flag set on one thread and read on another.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

/// A CURVE "broker" whose every handshake takes `handshakeDelay` (its ZAP handler answers each request that long
/// after it came) and that answers any message with WELCOME: a busy broker, as a connecting worker sees it.
// @unchecked: its sockets are used only by its own thread after init.
final class SlowHandshakeBroker: @unchecked Sendable {
    let context: ZMQContext
    let keys: CurveKeyPair
    let endpoint: String
    private let router: ZMQSocket
    private let zap: ZMQSocket
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    let welcomes = Atomic<Int>(0)

    init(handshakeDelay: Duration) throws {
        context = try ZMQContext()
        keys = try CurveKeyPair.generate()
        // A ROUTER, not a REP, on the ZAP endpoint: requests are answered independently, each after the delay.
        zap = try context.socket(.router)
        try zap.set(.linger, 0)
        _ = try zap.bind(ZAP.endpoint)
        router = try context.socket(.router)
        try router.set(.linger, 0)
        try router.makeCurveServer(keys)
        try router.set(.zapDomain, "test")
        endpoint = try router.bind("tcp://127.0.0.1:*")
        Thread { [self] in serve(handshakeDelay) }.start()
    }

    private func serve(_ delay: Duration) {
        var due: [(at: ContinuousClock.Instant, reply: [[UInt8]])] = []
        var poller = ZMQPoller()
        let zapIndex = poller.add(zap)
        let routerIndex = poller.add(router)
        while !stopping.load(ordering: .relaxed) {
            _ = try? poller.poll(timeoutMilliseconds: 10)
            if poller.isReady(zapIndex) {
                while let frames = try? zap.receiveMultipart(.dontWait), frames.count >= 8 {
                    // [peer, empty, version, request id, domain, address, identity, mechanism, key]
                    guard let request = ZAP.Request(frames: Array(frames.dropFirst(2))) else { continue }
                    let reply = [frames[0], []] + ZAP.reply(to: request, status: 200, text: "OK", userID: "slow")
                    due.append((ContinuousClock.now + delay, reply))
                }
            }
            let now = ContinuousClock.now
            while let first = due.first, first.at <= now {
                due.removeFirst()
                _ = try? zap.send(multipart: first.reply, .dontWait)
            }
            if poller.isReady(routerIndex) {
                while let frames = try? router.receiveMultipart(.dontWait) {
                    var welcome = Multipart()
                    welcome.append(frames[0])
                    let body = Welcome(
                        session: "slow-1",
                        heartbeatMs: 200,
                        liveness: 3,
                        window: 64,
                        broker: "slow",
                        carriedAcks: true
                    )
                    WireEncoder.session(.welcome, body: SessionJSON.encode(body), into: &welcome)
                    _ = try? router.send(welcome, .dontWait)
                    welcomes.add(1, ordering: .relaxed)
                }
            }
        }
        finished.signal()
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        finished.wait()
    }
}

@Suite("a slow handshake still ends in a session", .timeLimit(.minutes(1)))
struct SlowHandshakeTests {
    @Test("each handshake takes longer than the worker's silence window: it still registers")
    func slowHandshakeRegisters() async throws {
        // Heartbeat 200 ms × liveness 3: a fresh socket every 600 ms without a session. Each handshake takes 1 s.
        // With a fixed window every socket was given up before its handshake finished, forever ("broker silent;
        // reconnecting" every 600 ms, and the broker never saw a HELLO).
        let broker = try SlowHandshakeBroker(handshakeDelay: .seconds(1))
        defer { broker.stop() }
        var configuration = WorkerConfiguration(
            broker: broker.endpoint,
            role: .limits,
            worker: "slow-test",
            endpoints: [EndpointClaim(address: "limits/L1")]
        )
        configuration.heartbeatInterval = .milliseconds(200)
        configuration.curve = (try CurveKeyPair.generate(), broker.keys.publicKey)
        let watcher = EndWatcher()
        let runtime = try WorkerRuntime(
            configuration: configuration,
            logger: AskLogger(label: "test", level: .critical),
            context: try ZMQContext()
        ) { watcher }
        let registered = Flag()
        let deadline = ContinuousClock.now + .seconds(10)
        while !registered.isSet && ContinuousClock.now < deadline {
            let done = DispatchSemaphore(value: 0)
            runtime.submit { connection, _ in
                if connection.isRegistered { registered.set() }
                done.signal()
            }
            _ = try await blocking { done.wait(timeout: .now() + .milliseconds(100)) }
        }
        runtime.stop()
        #expect(registered.isSet, "registered within 10 s")
        #expect(watcher.registrations >= 1)
    }
}
