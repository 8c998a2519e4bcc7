@testable import AskLogging
import Foundation
import Synchronization
import Testing

@Suite("AskLogger: one bounded line per event")
struct LoggerTests {
    @Test("values: bare when plain, else quoted with every line break, control and backslash escaped")
    func quoting() {
        #expect(AskLogger.quote("plain-value_1.2") == "plain-value_1.2")
        #expect(AskLogger.quote("") == #""""#)
        #expect(AskLogger.quote("a b") == #""a b""#)
        #expect(AskLogger.quote("k=v") == #""k=v""#)
        #expect(AskLogger.quote(#"say "hi""#) == #""say \"hi\"""#)
        #expect(AskLogger.quote(#"back\slash"#) == #""back\\slash""#)
        #expect(AskLogger.quote("two\nlines\r\tx") == #""two\nlines\r\tx""#)
        #expect(AskLogger.quote("\u{1B}[31mred") == #""\u{1B}[31mred""#)
        #expect(AskLogger.quote("nul\u{0}del\u{7F}c1\u{85}") == #""nul\u{0}del\u{7F}c1\u{85}""#)
        #expect(
            AskLogger.quote("ls\u{2028}ps\u{2029}rlo\u{202E}zw\u{200B}")
                == #""ls\u{2028}ps\u{2029}rlo\u{202E}zw\u{200B}""#
        )
        #expect(AskLogger.quote("Zoë") == #""Zoë""#)
    }

    @Test("a value longer than the bound is cut, saying how much was cut")
    func bounded() {
        let quoted = AskLogger.quote(String(repeating: "n", count: 1_000_000))
        let kept = String(repeating: "n", count: AskLogger.maxValueLength)
        #expect(quoted == "\"" + kept + "…(+\(1_000_000 - AskLogger.maxValueLength))\"")
    }

    @Test("every line is one line: message, label, keys and values escaped; keys sorted")
    func oneLine() {
        let sink = MemorySink()
        var logger = AskLogger(label: "lab\nel", level: .info, sink: sink)
        logger.metadata["me\nta"] = "da\nta"
        logger.info("message\nforged 2020-01-01T00:00:00.000Z error x: y", metadata: ["k\ney": "v\nalue", "n": "\(3)"])
        #expect(sink.lines.count == 1)
        let line = sink.lines[0]
        #expect(!line.contains("\n"))
        let expected =
            #" lab\nel: k\ney="v\nalue" me\nta="da\nta" n=3 message\nforged 2020-01-01T00:00:00.000Z error x: y"#
        #expect(line.hasSuffix(expected), "\(line)")
    }

    @Test("fields and message are built only when the level is enabled")
    func lazy() {
        final class Calls: Sendable { let count = Atomic<Int>(0) }
        let calls = Calls()
        func expensive() -> String {
            calls.count.add(1, ordering: .relaxed)
            return "built"
        }
        let sink = MemorySink()
        let logger = AskLogger(label: "t", level: .warning, sink: sink)
        logger.info("\(expensive())", metadata: ["field": "\(expensive())"])
        logger.debug("m", metadata: ["field": "\(expensive())"])
        logger.log(level: .trace, "m", metadata: ["field": "\(expensive())"])
        #expect(calls.count.load(ordering: .relaxed) == 0)
        #expect(sink.lines.isEmpty)
        logger.warning("\(expensive())", metadata: ["field": "\(expensive())"])
        #expect(calls.count.load(ordering: .relaxed) == 2)
        #expect(sink.lines.count == 1)
    }
}

@Suite("LogRateLimiter")
struct LogRateLimiterTests {
    @Test("a burst per key per interval, then a count of what was held back on the next line let through")
    func limits() {
        var limiter = LogRateLimiter<String>(burst: 3, interval: .seconds(10))
        let start = ContinuousClock.now
        #expect((0..<3).map { _ in limiter.admit("a", now: start) } == [0, 0, 0])
        #expect((0..<5).map { _ in limiter.admit("a", now: start + .seconds(1)) }.allSatisfy { $0 == nil })
        #expect(limiter.suppressed("a") == 5)
        // Another peer is not held back by the first one.
        #expect(limiter.admit("b", now: start + .seconds(1)) == 0)
        // A new window: the first line says how many were held back.
        #expect(limiter.admit("a", now: start + .seconds(10)) == 5)
        #expect(limiter.admit("a", now: start + .seconds(10)) == 0)
        #expect(limiter.suppressed("a") == 0)
    }

    @Test("remembers a bounded number of keys")
    func boundedKeys() {
        var limiter = LogRateLimiter<Int>(burst: 1, interval: .seconds(10), maxKeys: 100)
        let now = ContinuousClock.now
        for key in 0..<10_000 { _ = limiter.admit(key, now: now) }
        #expect(limiter.keyCount <= 100)
    }
}
