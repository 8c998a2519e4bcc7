@testable import AskAgents
import Foundation
import Testing

/// A child stopped by SIGTERM cancels its flows; a flow waiting for a response must end at once, also when the
/// cancellation came before its wait began (the pending window, up to 48 h, is the wait's only other end).
@Suite("Child worker: a cancelled flow's wait for its response ends at once", .timeLimit(.minutes(1)))
struct ResponseRouterTests {
    @Test("a wait begun after its task was cancelled returns nil without waiting for the timeout")
    func cancelledBeforeTheWait() async {
        let router = ResponseRouter()
        let question = UUID()
        router.expect(question)
        // The wait's timeout is past the suite's time limit: only the cancellation can end it before the limit
        // fails the test.
        let waiter = Task {
            // Cancelled before `wait` registers its continuation, as a SIGTERM between two steps of a flow is.
            withUnsafeCurrentTask { $0?.cancel() }
            return await router.wait(question, timeout: .seconds(3600))
        }
        let response = await waiter.value
        #expect(response == nil)
    }

    @Test("a wait cancelled while it waits returns nil")
    func cancelledDuringTheWait() async {
        let router = ResponseRouter()
        let question = UUID()
        router.expect(question)
        let waiter = Task { await router.wait(question, timeout: .seconds(3600)) }
        waiter.cancel()
        #expect(await waiter.value == nil)
    }
}
