@testable import AskClient
import AskLogging
import AskProtocol
import AskTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// Records what the connection refuses.
final class RefusalRecorder: WorkerHandler {
    let refused: @Sendable (MessageID, WireError) -> Void
    init(_ refused: @escaping @Sendable (MessageID, WireError) -> Void) { self.refused = refused }
    func deliver(_ delivery: Delivery, connection: WorkerConnection) -> DeliveryDisposition { .ack }
    func refused(_ id: MessageID, error: WireError, connection: WorkerConnection) { refused(id, error) }
}

@Suite("WorkerConnection: an unencodable body", .timeLimit(.minutes(1)))
struct WorkerEncodeFailureTests {
    @Test("is logged and refused to the handler (invalid-json), never sent as an empty body")
    func refusedNotSent() async throws {
        let sink = MemorySink()
        let logger = AskLogger(label: "test", level: .info, sink: sink)
        let context = try ZMQContext()
        let refusals = Mutex<[(MessageID, WireError)]>([])
        let refusedOne = DispatchSemaphore(value: 0)
        // No broker listens there: nothing can be sent anyway, and nothing needs to be.
        let runtime = try WorkerRuntime(
            configuration: WorkerConfiguration(
                broker: "tcp://127.0.0.1:9",
                role: .child,
                worker: "test",
                endpoints: []
            ),
            logger: logger,
            context: context
        ) {
            RefusalRecorder { id, error in
                refusals.withLock { $0.append((id, error)) }
                refusedOne.signal()
            }
        }
        defer { runtime.stop() }
        var question = PermissionQuestion(handle: CommunicationHandle(value: "a@example.org", kind: .emailAddress))
        question.expirationDate = BrokerEncodeFailureDates.farFuture
        let sent = Mutex<(MessageID, Int)?>(nil)
        let message = AskRequest(question: AnyPermissionQuestion(question))
        runtime.submit { connection, _ in
            let id = connection.send(message, from: "child/c1", to: "limits")
            sent.withLock { $0 = (id, connection.outstandingCount) }
        }
        let signalled = try await blocking { refusedOne.wait(timeout: .now() + 10) == .success }
        #expect(signalled, "no refusal within 10 s")
        let (id, outstanding) = try #require(sent.withLock { $0 })
        #expect(outstanding == 0, "an unencodable SEND is not queued for the broker")
        let refusal = try #require(refusals.withLock { $0.first })
        #expect(refusal.0 == id)
        #expect(refusal.1.code == .invalidJSON)
        #expect(refusal.1.reason.contains("could not encode the AskRequest body"), "\(refusal.1.reason)")
        #expect(sink.lines.contains { $0.contains("message not sent: its body cannot be encoded") })
    }
}

enum BrokerEncodeFailureDates {
    /// Year 12000: outside what the wire's dates can carry (0000...9999).
    static let farFuture = Date(timeIntervalSince1970: 315_537_897_600 + 100 * 365 * 86_400)
}
