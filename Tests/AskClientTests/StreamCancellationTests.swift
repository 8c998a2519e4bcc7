@testable import AskClient
import AskProtocol
import Foundation
import Synchronization
import Testing

/// A stream whose consumer goes away while the connection thread hands it something. Cancelling the consuming task
/// takes the task's status lock and then runs the stream's termination handler, which takes the center's lock to
/// forget the stream; handing over under that lock resumed the waiting task, which takes the status lock: the two
/// threads waited on each other for good (a make test hung in FlowRuleTests when a test's `Collected` went away while
/// a guardian event came). Each test races the two thousands of times; a regression hangs the run, and make test's
/// watchdog (Tests/watchdog.sh) prints both threads' backtraces.
@Suite("a stream dropped while the connection hands it something never deadlocks")
struct StreamCancellationTests {
    /// Runs `hand` over and over on a thread of its own (the connection thread) while `rounds` consumers, each
    /// started by `consume` on a stream of its own, wait and are cancelled. - Returns: how many hand-overs ran.
    private static func race(
        rounds: Int,
        hand: @escaping @Sendable () -> Void,
        consume: @escaping @Sendable () -> Task<Void, Never>
    ) async -> Int {
        let running = Atomic<Bool>(true)
        let handed = Atomic<Int>(0)
        let finished = DispatchSemaphore(value: 0)
        let connection = Thread {
            while running.load(ordering: .relaxed) {
                hand()
                handed.add(1, ordering: .relaxed)
            }
            finished.signal()
        }
        connection.start()
        for _ in 0..<rounds {
            let consumer = consume()
            await Task.yield()
            consumer.cancel()
            await consumer.value
        }
        running.store(false, ordering: .relaxed)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                finished.wait()
                done.resume()
            }
        }
        return handed.load(ordering: .relaxed)
    }

    @Test("guardian events: publish on the connection thread while consumers are cancelled")
    func guardianEvents() async {
        let events = GuardianEvents()
        // A stream that stays open and is drained: `publish` always has a stream to give to, and nothing piles up.
        let kept = events.stream()
        let drain = Task { for await _ in kept {} }
        let closed = GuardianCenter.Event.closed(
            GuardianCenter.Closed(
                guardian: GuardianIdentity(id: "g1", family: "f1"),
                questionID: UUID(),
                reason: .expired,
                answeredBy: nil
            )
        )
        let handed = await Self.race(rounds: 3000, hand: { events.publish(closed) }) {
            let stream = events.stream()
            return Task { for await _ in stream {} }
        }
        events.finish()
        await drain.value
        #expect(handed > 0)
    }

    @Test("responses: publish on the connection thread while consumers are cancelled")
    func responseHub() async {
        let hub = ResponseHub(waiting: [])
        // A stream that stays open and takes everything: nothing waits at the hub and piles up.
        if let token = hub.subscribe(child: nil, topicID: CommunicationTopic.topicID, yield: { _ in }, finish: {}) {
            hub.open(token) { _ in }
        }
        let response = ResponseHubOrderingTests.response(0)
        let handed = await Self.race(rounds: 3000, hand: { hub.publish(response) }) {
            let (stream, continuation) = AsyncStream<DeliveredResponse>.makeStream()
            guard
                let token = hub.subscribe(
                    child: nil,
                    topicID: CommunicationTopic.topicID,
                    yield: { continuation.yield($0) },
                    finish: { continuation.finish() }
                )
            else { return Task {} }
            // As AskCenter does: the termination handler forgets the stream at the hub.
            continuation.onTermination = { _ in hub.unsubscribe(token) }
            hub.open(token) { _ in }
            return Task { for await _ in stream {} }
        }
        hub.finishAll()
        #expect(handed > 0)
    }
}
