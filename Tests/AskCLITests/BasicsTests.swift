import Foundation
import Testing

@testable import AskCLI

/// AskBasics (re-exported by AskCLI): the Duration conversions' rounding and the dedicated-thread helpers.
@Suite("AskBasics helpers")
struct BasicsTests {
    @Test("whole units round toward zero; millisecondsRoundedUp rounds a positive remainder up")
    func durationNumbers() {
        let duration: Duration = .nanoseconds(1_999_999)
        #expect(duration.milliseconds == 1)
        #expect(duration.millisecondsRoundedUp == 2)
        #expect(Duration.milliseconds(2).millisecondsRoundedUp == 2)
        #expect(duration.microseconds == 1999)
        #expect(duration.nanoseconds == 1_999_999)
        #expect(Duration.nanoseconds(-1_999_999).milliseconds == -1)
        #expect(Duration.seconds(90).milliseconds == 90_000)
        #expect(Duration.milliseconds(1500).seconds == 1.5)
        #expect(Duration.milliseconds(3).isWholeMilliseconds)
        #expect(!duration.isWholeMilliseconds)
    }

    @Test("init(seconds:rounding:) rounds to whole nanoseconds as asked")
    func durationFromNumber() {
        #expect(Duration(seconds: 1.5) == .milliseconds(1500))
        #expect(Duration(seconds: 0.000_000_001_6) == .nanoseconds(2))
        #expect(Duration(seconds: 0.000_000_001_6, rounding: .towardZero) == .nanoseconds(1))
        #expect(Duration(seconds: 0.000_000_001_2, rounding: .up) == .nanoseconds(2))
    }

    @Test("onDedicatedThread hands back the work's result or its error; a JoinableThread is joined")
    func dedicatedThread() async {
        struct Failure: Error {}
        let answer = await onDedicatedThread(name: "basics-test") { 6 * 7 }
        #expect(answer == 42)
        await #expect(throws: Failure.self) { try await onDedicatedThread(name: "basics-test") { throw Failure() } }
        let joined = JoinableThread(name: "basics-join") {}
        #expect(joined.join(timeout: .seconds(10)))
    }
}
