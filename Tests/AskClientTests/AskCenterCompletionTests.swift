@testable import AskClient
import AskProtocol
import AskTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// The result of `body`, or `nil` if it has not returned within `limit` (the body is then left running: a call that
/// never completes cannot be cancelled, which is what these tests look for).
func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    let once = ResumeOnce<T?>()
    return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
        once.continuation.withLock { $0 = continuation }
        Task { once.resume(await body()) }
        DispatchQueue.global().asyncAfter(deadline: .now() + limit.seconds) { once.resume(nil) }
    }
}

/// A continuation resumed by whichever side comes first.
final class ResumeOnce<T: Sendable>: Sendable {
    let continuation = Mutex<CheckedContinuation<T, Never>?>(nil)
    func resume(_ value: T) { continuation.withLock { $0.take() }?.resume(returning: value) }
}

final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

func someQuestion() -> PermissionQuestion<CommunicationTopic> {
    PermissionQuestion(handle: CommunicationHandle(value: "+15550123", kind: .phoneNumber))
}

/// The message of an ask's `systemError`, or a description of whatever else happened.
func askOutcome(_ session: ChildSession) async -> String {
    do {
        try await session.ask(someQuestion())
        return "presented"
    } catch {
        if case .systemError(let message) = error { return message }
        return "\(error)"
    }
}

@Suite("AskCenter calls always complete", .serialized, .timeLimit(.minutes(3)))
struct AskCenterCompletionTests {
    /// Long enough that no timeout can be what ends a call in these tests.
    static func patient(_ options: inout AskCenter.Options) {
        options.askTimeout = .seconds(120)
        options.sheetTimeout = .seconds(120)
        options.queryTimeout = .seconds(120)
    }

    @Test("a failing socket (its context shut down) ends every waiting ask and query, and later calls at once")
    func failingSocket() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        // The center's own context, so shutting it down fails only the center's socket.
        let context = try ZMQContext()
        var options = AskCenter.Options()
        options.heartbeatInterval = .milliseconds(200)
        Self.patient(&options)
        let center = try AskCenter(
            broker: rig.broker.endpoint,
            children: [rig.child],
            stateDirectory: nil,
            logger: .silent(),
            context: ClientContext(context),
            options: options
        )
        #expect(await center.waitUntilRegistered(timeout: .seconds(10)))
        let session = center.child("c1")
        let ask = Task { await askOutcome(session) }
        let query = Task { () -> LimitsQueryError? in
            do {
                let handle = CommunicationHandle(value: "x@example.org", kind: .emailAddress)
                _ = try await center.knownHandles(in: [handle], child: "c1")
            } catch let error as LimitsQueryError { return error } catch {}
            return nil
        }
        // The ask and the query are on the wire (the limits peer has them) before the socket fails.
        let limits = rig.limits
        try await blocking {
            let kinds = Set([try limits.expectDelivery().kind, try limits.expectDelivery().kind])
            #expect(kinds == ["ask", "limits.query"])
        }
        context.shutdown()
        let asked = await within(.seconds(10)) { await ask.value }
        #expect(asked?.contains("stopped") == true, "ask: \(asked ?? "still waiting after 10 s")")
        let queried = await within(.seconds(10)) { await query.value }
        #expect(queried == .some(.stopped), "query: \(String(describing: queried))")
        let later = await within(.seconds(10)) { await askOutcome(session) }
        #expect(later?.contains("stopped") == true, "a later ask: \(later ?? "still waiting after 10 s")")
        #expect(center.shared.calls.pendingCount == 0)
        #expect(await within(.seconds(10)) { await center.stop() } != nil)
    }

    @Test("a call posted after the connection loop ended (its job is never run) ends at once")
    func loopEndedUnderneath() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center(configure: Self.patient)
        // End the loop without `AskCenter.stop()`: as if the thread had died.
        center.runtime.submit { connection, _ in connection.stop() }
        let runtime = center.runtime
        try await blocking { runtime.wait() }
        let outcome = await within(.seconds(10)) { await askOutcome(center.child("c1")) }
        #expect(outcome?.contains("stopped") == true, "ask: \(outcome ?? "still waiting after 10 s")")
        let session = center.child("c1")
        let sent = await within(.seconds(10)) { () -> SheetError? in
            do { try await session.send(UUID()) } catch let error as SheetError { return error } catch {}
            return nil
        }
        #expect(sent == .some(.stopped), "send: \(String(describing: sent))")
        let counters = await within(.seconds(10)) { await center.counters() }
        #expect(counters != nil, "counters() still waiting after 10 s")
        #expect(await within(.seconds(10)) { await center.stop() } != nil)
    }

    @Test("1 000 concurrent asks racing stop(): every one ends, as stopped (ten rounds)")
    func thousandAsksRacingStop() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        for round in 0..<10 {
            let center = try await rig.center(configure: Self.patient)
            let session = center.child("c1")
            let started = Counter()
            // stop() comes while asks are still starting, at a different point each round.
            let stopAfter = 100 * (round + 1)
            let outcomes = await within(.seconds(60)) {
                await withTaskGroup(of: String.self) { group in
                    group.addTask {
                        while started.value.load(ordering: .relaxed) < stopAfter { await Task.yield() }
                        await center.stop()
                        return "stop"
                    }
                    for _ in 0..<1000 {
                        group.addTask {
                            started.value.add(1, ordering: .relaxed)
                            return await askOutcome(session)
                        }
                    }
                    var outcomes: [String: Int] = [:]
                    for await outcome in group { outcomes[outcome, default: 0] += 1 }
                    return outcomes
                }
            }
            guard let outcomes else {
                let pending = center.shared.calls.pendingCount
                Issue.record("round \(round): asks still waiting 60 s after stop(); \(pending) registered")
                return
            }
            // The limits peer never answers, so no ask can be presented: each one was stopped.
            #expect(outcomes["stop"] == 1)
            #expect(outcomes["the ask center stopped"] == 1000, "round \(round): \(outcomes)")
            #expect(center.shared.calls.pendingCount == 0)
        }
    }

    @Test("an ask times out on time even while the connection thread is busy")
    func timeoutWhileThreadBusy() async throws {
        let rig = try await AskRig()
        defer { rig.stop() }
        let center = try await rig.center { $0.askTimeout = .milliseconds(300) }
        let release = DispatchSemaphore(value: 0)
        defer { release.signal() }
        let session = center.child("c1")
        let ask = Task { await askOutcome(session) }
        try await blocking { _ = try rig.limits.expectDelivery(kind: "ask") }
        // Block the connection thread well past the timeout: its tick cannot run.
        center.runtime.submit { _, _ in _ = release.wait(timeout: .now() + 20) }
        let outcome = await within(.seconds(10)) { await ask.value }
        #expect(outcome?.contains("timed out") == true, "ask: \(outcome ?? "still waiting after 10 s")")
        release.signal()
        await center.stop()
    }
}

@Suite("ResponseHub ordering", .timeLimit(.minutes(1)))
struct ResponseHubOrderingTests {
    static func response(_ index: Int) -> DeliveredResponse {
        let question = AnyPermissionQuestion(
            PermissionQuestion(handle: CommunicationHandle(value: "h\(index)@example.org", kind: .emailAddress))
        )
        return DeliveredResponse(child: "c1", response: AnyPermissionResponse(question: question, choice: .approve))
    }

    @Test("responses published while a stream takes the waiting ones never overtake them")
    func flushThenPublishInOrder() async throws {
        let waiting = (0..<2000).map(Self.response)
        let published = (0..<200).map { Self.response(10_000 + $0) }
        let topic = waiting[0].response.question.topicID
        for _ in 0..<20 {
            let hub = ResponseHub(waiting: waiting)
            let received = Mutex<[UUID]>([])
            let go = DispatchSemaphore(value: 0)
            let publisher = Thread {
                go.wait()
                for response in published { _ = hub.publish(response) }
            }
            publisher.start()
            go.signal()
            let subscribed = hub.subscribe(
                child: "c1",
                topicID: topic,
                yield: { delivered in
                    received.withLock { $0.append(delivered.response.question.id) }
                },
                finish: {}
            )
            guard let token = subscribed else {
                Issue.record("a live hub refused a stream")
                return
            }
            // What was published before the stream opened waits behind the older ones and comes with them.
            hub.open(token) { _ in }
            // The publisher is done once every response has arrived somewhere: at the stream, or waiting.
            let deadline = ContinuousClock.now + .seconds(20)
            while received.withLock({ $0.count }) + hub.waitingCount < waiting.count + published.count {
                guard ContinuousClock.now < deadline else { break }
                await Task.yield()
            }
            let ids = received.withLock { $0 }
            let expected = (waiting + published).map(\.response.question.id)
            #expect(ids == Array(expected.prefix(ids.count)), "a published response overtook the waiting ones")
            #expect(ids.count == expected.count)
        }
    }
}

@Suite("PendingCalls", .timeLimit(.minutes(1)))
struct PendingCallsTests {
    @Test("the watchdog ends a call at its deadline with nobody else acting; the call cannot be ended twice")
    func watchdogTimesOut() async {
        let calls = PendingCalls()
        let tokens = Mutex<[PendingCalls.Token]>([])
        let outcome = await within(.seconds(10)) { () -> SheetError? in
            let result = await withCheckedContinuation { (continuation: PendingCalls.SheetContinuation) in
                if let token = calls.register(.sheet(continuation), deadline: .now + .milliseconds(100)) {
                    tokens.withLock { $0.append(token) }
                }
            }
            if case .failure(let error) = result { return error }
            return nil
        }
        #expect(outcome == .some(.timedOut))
        let token = tokens.withLock { $0.first }
        #expect(token.map { calls.take($0) == nil } == true, "a timed-out call was still there to end again")
        #expect(calls.pendingCount == 0)
    }

    @Test("calls registered from many tasks while close() runs each end exactly once: stopped, or their timeout")
    func closeRacesRegistration() async {
        for _ in 0..<20 {
            let calls = PendingCalls()
            let outcomes = await within(.seconds(30)) {
                await withTaskGroup(of: String.self) { group in
                    for index in 0..<400 {
                        group.addTask {
                            let result = await withCheckedContinuation {
                                (continuation: PendingCalls.QueryContinuation) in
                                // Some with deadlines in the past: the watchdog races close() for them.
                                let deadline: ContinuousClock.Instant = .now + (index % 4 == 0 ? .zero : .seconds(120))
                                _ = calls.register(.query(continuation), deadline: deadline)
                            }
                            if case .failure(let error) = result { return "\(error)" }
                            return "answered"
                        }
                        if index == 200 {
                            group.addTask {
                                calls.close(.stopped); return "close"
                            }
                        }
                    }
                    var outcomes: [String: Int] = [:]
                    for await outcome in group { outcomes[outcome, default: 0] += 1 }
                    return outcomes
                }
            }
            guard let outcomes else {
                Issue.record("calls still waiting 30 s after close(); \(calls.pendingCount) registered")
                return
            }
            #expect(outcomes["close"] == 1)
            let stopped = outcomes[LimitsQueryError.stopped.description] ?? 0
            let timedOut = outcomes[LimitsQueryError.timedOut.description] ?? 0
            #expect(stopped + timedOut == 400, "\(outcomes)")
            #expect(calls.pendingCount == 0)
        }
    }
}
