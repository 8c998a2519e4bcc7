import AskProtocol
import Dispatch
import Synchronization
import Testing

/// Random message ids come from a pool refilled from the system generator: they stay distinct across refills and
/// between threads.
struct MessageIDRandomTests {
    @Test func idsAreDistinctAcrossRefillsAndThreads() {
        let perThread = 20_000  // 78 refills of the 256-id pool per thread
        let drawn = Mutex<[MessageID]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var mine: [MessageID] = []
            mine.reserveCapacity(perThread)
            for _ in 0..<perThread { mine.append(.random()) }
            drawn.withLock { $0.append(contentsOf: mine) }
        }
        let all = drawn.withLock { $0 }
        #expect(all.count == 4 * perThread)
        #expect(Set(all).count == all.count, "an id was drawn twice")
        // Neither word is stuck: each takes many values (an unfilled buffer would repeat zeros).
        #expect(Set(all.map(\.high)).count == all.count)
        #expect(Set(all.map(\.low)).count == all.count)
    }
}
