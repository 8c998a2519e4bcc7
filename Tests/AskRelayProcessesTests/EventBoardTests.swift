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
}
