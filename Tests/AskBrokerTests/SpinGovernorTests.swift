@testable import AskBroker
import Testing

/// The broker spins after a turn only while recent spins caught a message.
struct SpinGovernorTests {
    @Test func spinsWhileSpinsPayAndProbesWhenTheyDoNot() {
        var governor = SpinGovernor()
        // A busy broker: every spin catches the next message, so every turn spins.
        for _ in 0..<100 {
            let spins = governor.shouldSpin()
            #expect(spins)
            governor.record(caught: true)
        }
        // Moderate load: spins run out. After a few misses the share falls below one half and the loop
        // spins only on every 16th eligible turn.
        var spins = 0
        for _ in 0..<1600 where governor.shouldSpin() {
            spins += 1
            governor.record(caught: false)
        }
        #expect(spins < 1600 / SpinGovernor.probeEvery + 10, "spun \(spins) times in 1600 turns")
        #expect(spins >= 1600 / SpinGovernor.probeEvery)
        // Load comes back: the probes catch messages and spinning resumes within a few probes.
        var turns = 0
        while governor.hitShare < SpinGovernor.threshold {
            turns += 1
            if governor.shouldSpin() { governor.record(caught: true) }
        }
        #expect(turns <= 8 * SpinGovernor.probeEvery, "took \(turns) turns")
        let spinsAgain = governor.shouldSpin()
        #expect(spinsAgain)
    }
}
