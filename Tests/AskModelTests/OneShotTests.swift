import AskModel
import Foundation
import Testing

/// The one one-shot waiter: set once, waited for with or without a timeout.
@Suite("OneShot")
struct OneShotTests {
    @Test("a wait that times out returns nil; a set value is returned to every waiter; a second set is ignored")
    func values() {
        let shot = OneShot<Int>()
        #expect(shot.wait(timeout: .milliseconds(20)) == nil)
        #expect(shot.current == nil)
        #expect(shot.fulfill(7))
        #expect(!shot.fulfill(8))
        #expect(shot.wait(timeout: .zero) == 7)
        #expect(shot.wait() == 7)
        #expect(shot.current == 7)
    }

    @Test("a waiter on another thread wakes when the value is set")
    func acrossThreads() {
        let shot = OneShot<String>()
        let started = OneShot<Void>()
        let seen = OneShot<String?>()
        Thread.detachNewThread {
            started.fulfill()
            seen.fulfill(shot.wait(timeout: .seconds(30)))
        }
        #expect(started.wait(timeout: .seconds(30)) != nil)
        shot.fulfill("ready")
        #expect(seen.wait(timeout: .seconds(30)) == .some("ready"))
    }
}
