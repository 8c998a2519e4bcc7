import AskModel
import Testing

/// The duration grammar every flag, environment variable, scenario and file shares (AskCLI re-exports it).
@Suite("Duration grammar")
struct DurationTextTests {
    @Test("units ms, us, s, m, h, d and plain seconds")
    func units() {
        #expect(parseDuration("250ms") == .milliseconds(250))
        #expect(parseDuration("50us") == .microseconds(50))
        #expect(parseDuration("2s") == .seconds(2))
        #expect(parseDuration("1.5s") == .milliseconds(1500))
        #expect(parseDuration("5m") == .seconds(300))
        #expect(parseDuration("48h") == .seconds(48 * 3600))
        #expect(parseDuration("2d") == .seconds(2 * 86400))
        #expect(parseDuration("0") == .zero)
        #expect(parseDuration("3") == .seconds(3))
    }

    @Test("negative, non-finite, unreadable and longer than 100d are refused (1e12s trapped before)")
    func refused() {
        for text in ["1e12s", "1e12", "101d", "8640001s", "-1s", "-0.5", "inf", "nans", "abc", "", "s", "1x", "1e400"] {
            #expect(parseDuration(text) == nil, "\(text)")
        }
        #expect(parseDuration("100d") == ValueBounds.maximumDuration)
        #expect(durationFromSeconds(Double.greatestFiniteMagnitude) == nil)
        #expect(durationFromSeconds(.nan) == nil)
        #expect(durationFromSeconds(1.25) == .milliseconds(1250))
    }

    @Test("durationText reads back through parseDuration")
    func text() {
        let durations: [Duration] = [.milliseconds(250), .seconds(2), .seconds(300), .seconds(7200), .seconds(259_200)]
        for duration in durations {
            #expect(parseDuration(durationText(duration)) == duration)
        }
        #expect(durationText(.zero) == "0s")
    }
}
