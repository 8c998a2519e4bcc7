import Foundation
import Synchronization
import Testing

@testable import AskCLI

/// PendingStop, the workers' one stop primitive, with a real signal sent to this process (SIGUSR2, which nothing
/// in the project uses; the watcher leaves it ignored in this process). One test only: libdispatch did not deliver the signal to a second watcher of
/// the same signal created in the same process after the first one was cancelled.
@Suite("PendingStop: a signal's stop, armed later, waited for", .timeLimit(.minutes(1)))
struct PendingStopTests {
    @Test("a signal before arm wakes a waiter, and runs the stop once it is armed; later waits return at once")
    func signalBeforeArm() async {
        let signals = Mutex<[Int32]>([])
        let stop = PendingStop(signals: [SIGUSR2]) { signal in signals.withLock { $0.append(signal) } }
        #expect(!stop.isRequested)
        let waiter = Task { await stop.wait() }
        kill(getpid(), SIGUSR2)
        await waiter.value
        #expect(stop.isRequested)
        #expect(signals.withLock { $0 } == [SIGUSR2])
        let ran = Mutex(0)
        stop.arm { ran.withLock { $0 += 1 } }
        #expect(ran.withLock { $0 } == 1)
        await stop.wait()
    }
}
