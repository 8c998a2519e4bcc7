@testable import AskClient
import AskProtocol
import AskTestSupport
import Foundation
import SQLite
import Synchronization
import Testing
import ZeroMQ

/// A response reaches a stream only after the record says it was surfaced, on every path: live, waiting for a
/// stream, read at start, retried after a failed commit. Otherwise a crash or a power cut between the two hands it
/// to the app again at the next start.
@Suite("responses are committed as surfaced before a stream gets them", .serialized, .timeLimit(.minutes(3)))
struct ResponseSurfaceTests {
    struct Fault: Error {}

    @Test("a stream opened on responses read at start, before any connection, gets each only once it is surfaced=1")
    func waitingResponsesCommittedFirst() async throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path + "/askcenter.sqlite"
        let waiting = (0..<5).map(ResponseHubOrderingTests.response)
        do {
            let store = try ResponseStore(path: path, durability: .powerLossSafe)
            for response in waiting {
                #expect(try store.record(response, body: try WireJSON.encode(response.response), now: Date()))
            }
        }
        var options = AskCenter.Options()
        options.recordDurability = .powerLossSafe
        // No broker listens there: the stream opens before the first connection.
        let center = try AskCenter(
            broker: "ipc://\(directory.path)/no-broker.sock",
            children: [ChildIdentity(id: "c1", family: "fa")],
            stateDirectory: directory.path,
            logger: .silent(),
            context: try ClientContext(),
            options: options
        )
        let marks = Mutex<[UUID: [Int64]]>([:])
        let (stream, continuation) = AsyncStream<UUID>.makeStream()
        center.subscribe(child: "c1", topicID: waiting[0].response.question.topicID, continuation: continuation) {
            delivered in
            let question = delivered.response.question.id
            // What the record holds at the moment the stream's element is produced, read by another connection.
            let surfaced = try? Database(path: path).query(
                "SELECT surfaced FROM responses WHERE question = ?",
                [.text(question.uuidString)]
            ) { $0.int64(at: 0) }
            marks.withLock { $0[question] = surfaced ?? [] }
            continuation.yield(question)
        }
        let received = await within(.seconds(20)) { () -> [UUID] in
            var received: [UUID] = []
            for await question in stream {
                received.append(question)
                if received.count == waiting.count { break }
            }
            return received
        }
        await center.stop()
        #expect(received == waiting.map(\.response.question.id), "oldest first, each once")
        for response in waiting {
            let question = response.response.question.id
            #expect(marks.withLock { $0[question] } == [1], "given to the stream before its surfaced mark committed")
        }
        #expect(try ResponseStore.unsurfaced(path: path).isEmpty)
    }

    @Test("a failed surfaced commit keeps the responses waiting in order; a retry that commits gives each once")
    func failedCommitWaitsForRetry() throws {
        let responses = (0..<3).map(ResponseHubOrderingTests.response)
        let hub = ResponseHub(waiting: [responses[0]])
        let received = Mutex<[UUID]>([])
        let subscribed = hub.subscribe(
            child: "c1",
            topicID: responses[0].response.question.topicID,
            yield: { delivered in received.withLock { $0.append(delivered.response.question.id) } },
            finish: {}
        )
        guard let token = subscribed else {
            Issue.record("a live hub refused a stream")
            return
        }
        // Subscribed, not yet opened: a publish waits behind the older one.
        #expect(hub.waitingCount == 1)
        let opened = hub.open(token) { _ in throw Fault() }
        #expect(opened == .failed)
        #expect(hub.isStalled)
        // While the first waits for its commit, a later one must not overtake it, even if its own commit works.
        var committed: [[UUID]] = []
        let published = hub.publish(responses[1]) { _ in throw Fault() }
        #expect(published == .failed)
        #expect(received.withLock { $0 }.isEmpty)
        #expect(hub.waitingCount == 2)
        let retried = hub.retry { committed.append($0) }
        #expect(retried == .delivered(2))
        let ids = responses.map(\.response.question.id)
        #expect(committed == [[ids[0], ids[1]]])
        #expect(received.withLock { $0 } == [ids[0], ids[1]])
        #expect(!hub.isStalled)
        #expect(hub.waitingCount == 0)
        let again = hub.retry { _ in Issue.record("committed with nothing waiting") }
        #expect(again == .nothing)
        let live = hub.publish(responses[2]) { committed.append($0) }
        #expect(live == .delivered(1))
        #expect(received.withLock { $0 } == ids)
    }

    @Test("a stream subscribed but never opened (its job did not run) finishes when the hub finishes")
    func unopenedStreamFinishes() throws {
        let hub = ResponseHub(waiting: [ResponseHubOrderingTests.response(0)])
        let finished = Counter()
        let token = hub.subscribe(
            child: nil,
            topicID: "any",
            yield: { _ in },
            finish: { _ = finished.value.add(1, ordering: .relaxed) }
        )
        #expect(token != nil)
        hub.finishAll()
        #expect(finished.value.load(ordering: .relaxed) == 1)
        // Later ones finish at once; opening a finished token does nothing.
        let later = hub.subscribe(
            child: nil,
            topicID: "any",
            yield: { _ in },
            finish: { _ = finished.value.add(1, ordering: .relaxed) }
        )
        #expect(later == nil)
        #expect(finished.value.load(ordering: .relaxed) == 2)
        let opened = token.map { hub.open($0) { _ in Issue.record("opened a finished stream") } }
        #expect(opened == .nothing)
    }

    @Test("streams opened while the center stops, after it stopped, or after its connection failed all finish")
    func streamsFinishAroundStop() async throws {
        for round in 0..<10 {
            let center = try AskCenter(
                broker: "tcp://127.0.0.1:9",
                children: [ChildIdentity(id: "c1", family: "fa")],
                stateDirectory: nil,
                logger: .silent(),
                context: try ClientContext()
            )
            let ended = await within(.seconds(20)) { () -> Int in
                await withTaskGroup(of: Int.self) { group in
                    for index in 0..<40 {
                        group.addTask {
                            if index == round { await center.stop() }
                            for await _ in center.child("c1").responses(for: CommunicationTopic.self) {}
                            return 1
                        }
                    }
                    group.addTask {
                        await center.stop()
                        for await _ in center.responses(for: CommunicationTopic.self) {}
                        return 1
                    }
                    return await group.reduce(0, +)
                }
            }
            #expect(ended == 41, "round \(round): streams still open after 20 s")
        }
        // The loop ended by itself (its context shut down): a stream opened then finishes too.
        let context = try ZMQContext()
        let center = try AskCenter(
            broker: "tcp://127.0.0.1:9",
            children: [ChildIdentity(id: "c1", family: "fa")],
            stateDirectory: nil,
            logger: .silent(),
            context: ClientContext(context)
        )
        context.shutdown()
        let deadline = ContinuousClock.now + .seconds(20)
        while center.connectionFailure == nil, ContinuousClock.now < deadline { await Task.yield() }
        #expect(center.connectionFailure != nil)
        let ended = await within(.seconds(10)) {
            for await _ in center.child("c1").responses(for: CommunicationTopic.self) {}
            return true
        }
        #expect(ended == true)
        await center.stop()
    }
}
