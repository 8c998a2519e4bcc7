@testable import AskAgents
import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// A handler that records whether the connection told it that it ended, and whether it ever registered.
final class EndWatcher: WorkerHandler, @unchecked Sendable {  // @unchecked: written on the connection thread, read after wait().
    private(set) var failure: WorkerConnectionError?
    private(set) var registrations = 0
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition { .ack }
    func registered(_ connection: WorkerConnection, welcome: Welcome) { registrations += 1 }
    func ended(_ connection: WorkerConnection, failure: WorkerConnectionError) { self.failure = failure }
}

/// Runs `body` off the cooperative pool and waits for it.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
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
                broker.endpoint, role: .guardian, [EndpointClaim(address: "child/c1", family: "f1")]),
            logger: Logger(label: "test", level: .warning), context: try Context()
        ) { watcher }
        let start = ContinuousClock.now
        try await offPool { runtime.wait() }
        #expect(ContinuousClock.now - start < .seconds(5), "ended at once, not after retries")
        #expect(runtime.failure?.code == .forbidden)
        #expect(runtime.failure?.message.contains("may not serve 'child/c1'") == true, "\(String(describing: runtime.failure))")
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
        let context = try Context()
        let holder = try RawPeer(context: context, endpoint: broker.endpoint)
        try holder.register(role: .limits, ["limits/L1"])
        var configuration = configuration(broker.endpoint, role: .limits, [EndpointClaim(address: "limits/L1")])
        configuration.addressTakenPatience = .seconds(1)
        let watcher = EndWatcher()
        let start = ContinuousClock.now
        let runtime = try WorkerRuntime(
            configuration: configuration, logger: Logger(label: "test", level: .warning), context: context
        ) { watcher }
        // The holder stays alive (it answers heartbeats) while the worker waits.
        let deadline = ContinuousClock.now + .seconds(8)
        while runtime.failure == nil && ContinuousClock.now < deadline {
            _ = try holder.next(timeout: .milliseconds(100))
            var beat = Multipart()
            WireEncoder.heartbeat(into: &beat)
            try holder.send(beat)
        }
        try await offPool { runtime.wait() }
        let elapsed = ContinuousClock.now - start
        #expect(runtime.failure?.code == .addressTaken)
        #expect(elapsed >= .seconds(1), "retried for the patience first (\(elapsed))")
        #expect(elapsed < .seconds(8))
        #expect(watcher.registrations == 0)
        // More than one HELLO was refused: it retried.
        #expect(broker.logs.lines.filter { $0.contains("address-taken") }.count >= 2)
    }

    @Test("a connection whose socket dies ends with a failure, not as if it had been stopped")
    func deadConnectionIsAFailure() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let context = try Context()
        let watcher = EndWatcher()
        let runtime = try WorkerRuntime(
            configuration: configuration(broker.endpoint, role: .limits, [EndpointClaim(address: "limits/L1")]),
            logger: Logger(label: "test", level: .critical), context: context
        ) { watcher }
        // Every call on the context's sockets fails with ETERM from now on.
        context.shutdown()
        try await offPool { runtime.wait() }
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
        let center = try AskCenter(
            broker: broker.endpoint, children: [ChildIdentity(id: "c1", family: "f1")], stateDirectory: nil,
            logger: Logger(label: "test", level: .critical), context: try Context(), options: options)
        let start = ContinuousClock.now
        // The key is not listed: the handshake is refused, and the center gives up instead of reconnecting.
        var registered = false
        while center.connectionFailure == nil && ContinuousClock.now - start < .seconds(10) {
            registered = await center.waitUntilRegistered(timeout: .milliseconds(200)) || registered
        }
        #expect(!registered)
        #expect(center.connectionFailure != nil)
        #expect(center.connectionFailure?.message.contains("refused this worker's CURVE key") == true)
        #expect(await center.waitUntilRegistered(timeout: .seconds(20)) == false)
        #expect(ContinuousClock.now - start < .seconds(10))
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+14155550100", kind: .phoneNumber))
        let asked = ContinuousClock.now
        await #expect(throws: AskError.self) { try await center.child("c1").ask(question) }
        #expect(ContinuousClock.now - asked < .seconds(2), "fails at once, not after the ask timeout")
        await center.stop()
    }
}
