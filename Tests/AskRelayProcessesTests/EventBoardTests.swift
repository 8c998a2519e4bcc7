import AskRelayProcesses
import Foundation
import Testing

@Suite("event board: waits end on an event or at their deadline", .timeLimit(.minutes(1)))
struct EventBoardTests {
    @Test("a wait ends as soon as a matching event is appended, long before its deadline")
    func endsOnEvent() async {
        let board = EventBoard<Int>()
        // The matcher first runs when the wait registers: it says so, and only then are events appended.
        let (checked, checking) = AsyncStream<Void>.makeStream()
        async let matched = board.wait(timeout: .seconds(30)) { events in
            checking.yield()
            return events.contains(2)
        }
        var iterator = checked.makeAsyncIterator()
        _ = await iterator.next()
        board.append(1)
        board.append(2)
        #expect(await matched)
    }

    @Test("an event already there satisfies a wait at once; none that matches ends it at the deadline")
    func alreadyThereAndDeadline() async {
        let board = EventBoard<String>()
        board.append("question")
        #expect(await board.wait(timeout: .seconds(30)) { $0 == ["question"] })
        let start = ContinuousClock.now
        #expect(await board.wait(timeout: .milliseconds(200)) { $0.contains("closed") } == false)
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        #expect(board.events == ["question"])
    }

    @Test("cancelling the waiting task ends its wait (false), before or after the wait registered")
    func cancelled() async {
        let board = EventBoard<Int>()
        // After: the matcher's first run says the wait is registered; then the task is cancelled. Its deadline is an
        // hour away, so only the cancellation can end it (the suite's time limit would fail the test otherwise).
        let (checked, checking) = AsyncStream<Void>.makeStream()
        let waiting = Task {
            await board.wait(timeout: .seconds(3600)) { events in
                checking.yield()
                return events.contains(1)
            }
        }
        var iterator = checked.makeAsyncIterator()
        _ = await iterator.next()
        waiting.cancel()
        #expect(await waiting.value == false)
        // Before: a task cancelled before it waits does not wait.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await board.wait(timeout: .seconds(3600)) { $0.contains(1) }
        }
        #expect(await early.value == false)
        board.append(1)
        #expect(await board.wait(timeout: .seconds(3600)) { $0.contains(1) })
    }

    @Test("a blocking wait ends at the append that satisfies it, or at once, or false at its deadline")
    func blocking() throws {
        let board = EventBoard<Int>()
        board.append(1)
        #expect(board.waitBlocking(timeout: .seconds(30)) { $0.contains(1) })
        // The matcher's first run says the wait is registered; then another thread appends. Its deadline is an hour
        // away, so only the append can end it (the suite's time limit would fail the test otherwise).
        let registered = DispatchSemaphore(value: 0)
        let appender = Thread {
            registered.wait()
            board.append(2)
        }
        appender.start()
        #expect(
            board.waitBlocking(timeout: .seconds(3600)) { events in
                if !events.contains(2) { registered.signal() }
                return events.contains(2)
            }
        )
        let start = ContinuousClock.now
        #expect(board.waitBlocking(timeout: .milliseconds(200)) { $0.contains(3) } == false)
        #expect(ContinuousClock.now - start >= .milliseconds(200))
    }

    @Test("expectNone: arrived in the window, arrived before the evidence's round trip ended, or absent")
    func expectNone() async throws {
        let board = EventBoard<String>()
        // In the window: the evidence is not run.
        board.append("response")
        let during = try await board.expectNone(during: .seconds(30)) {
            $0.contains("response")
        } evidence: {
            Issue.record("the evidence ran although it arrived in the window")
        }
        #expect(during == .arrivedDuring)
        // After the window, queued ahead of the marker: the evidence's round trip brings it.
        let late = try await board.expectNone(during: .milliseconds(1)) {
            $0.contains("late")
        } evidence: {
            board.append("late")
            board.append("marker")
        }
        #expect(late == .arrivedBeforeEvidence)
        // Nothing on its way: the marker alone.
        var ran = false
        let absent = try await board.expectNone(during: .milliseconds(1)) {
            $0.contains("never")
        } evidence: {
            ran = true
        }
        #expect(absent == .absent && ran)
        // The evidence's failure is the call's.
        struct NoMarker: Error {}
        await #expect(throws: NoMarker.self) {
            _ = try await board.expectNone(during: .milliseconds(1)) {
                $0.contains("never")
            } evidence: {
                throw NoMarker()
            }
        }
    }

    @Test("expectNone in a cancelled task throws CancellationError without running the evidence")
    func expectNoneCancelled() async {
        let board = EventBoard<Int>()
        let waiting = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await board.expectNone(during: .seconds(3600)) {
                $0.contains(1)
            } evidence: {
                Issue.record("the evidence ran in a cancelled task")
            }
        }
        await #expect(throws: CancellationError.self) { try await waiting.value }
    }
}
