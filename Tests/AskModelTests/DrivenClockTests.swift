import AskModel
import Foundation
import Synchronization
import Testing

@Suite("Clocks: SystemClock and DrivenClock")
struct DrivenClockTests {
    @Test("a driven clock stands still, and moves both faces by exactly what it is advanced, in whole milliseconds")
    func advance() {
        let start = Date(wireMilliseconds: 1_900_000_000_123)
        let clock = DrivenClock(start: start)
        let instant = clock.instant
        #expect(clock.now == start)
        #expect(clock.isDriven)
        clock.advance(by: .milliseconds(48 * 3_600_000 + 1))
        #expect(clock.now == Date(wireMilliseconds: 1_900_000_000_123 + 48 * 3_600_000 + 1))
        #expect(clock.instant - instant == .milliseconds(48 * 3_600_000 + 1))
        #expect(clock.elapsed == .milliseconds(48 * 3_600_000 + 1))
        #expect(!SystemClock().isDriven)
    }

    @Test("sleep(for:) returns when the clock is advanced that far, not before")
    func sleepers() async throws {
        let clock = DrivenClock()
        let short = Task { try await clock.sleep(for: .seconds(5)) }
        let long = Task { try await clock.sleep(for: .seconds(10)) }
        while clock.sleepers < 2 { await Task.yield() }
        clock.advance(by: .milliseconds(4_999))
        #expect(clock.sleepers == 2)
        clock.advance(by: .milliseconds(1))
        try await short.value
        // The long sleeper is still parked: advancing resumes only the due ones, before it returns.
        #expect(clock.sleepers == 1)
        clock.advance(by: .seconds(5))
        try await long.value
        #expect(clock.sleepers == 0)
        // Zero is due at once.
        try await clock.sleep(for: .zero)
    }

    @Test("a cancelled sleeper throws CancellationError and leaves the clock")
    func cancelledSleeper() async {
        let clock = DrivenClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(60)) }
        while clock.sleepers < 1 { await Task.yield() }
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleepers == 0)
    }

    @Test("advance observers are called after each advance until removed")
    func observers() {
        let clock = DrivenClock()
        let calls = Mutex(0)
        let token = clock.addAdvanceObserver { calls.withLock { $0 += 1 } }
        clock.advance(by: .seconds(1))
        clock.advance(by: .zero)
        #expect(calls.withLock { $0 } == 2)
        clock.removeAdvanceObserver(token)
        clock.advance(by: .seconds(1))
        #expect(calls.withLock { $0 } == 2)
    }
}
