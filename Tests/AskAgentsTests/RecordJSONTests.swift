import AskAgents
import AskProtocol
import Foundation
import Testing

@Suite("records keep microseconds")
struct RecordJSONTests {
    @Test("a date goes out with six fractional digits and comes back to the microsecond")
    func roundTrip() throws {
        let base = Date(wireMilliseconds: 1_764_590_400_123)
        let date = base.addingTimeInterval(0.000_456_2)
        let text = try #require(RecordJSON.format(date))
        #expect(text == "2025-12-01T12:00:00.123456Z")
        let back = try #require(RecordJSON.parse(text))
        #expect(abs(back.timeIntervalSince(date)) < 0.000_001)
        #expect(RecordJSON.format(back) == text)
        // A canonical wire date (whole milliseconds) has no extra digits, and reads back equal.
        #expect(RecordJSON.format(base) == "2025-12-01T12:00:00.123000Z")
        #expect(RecordJSON.parse("2025-12-01T12:00:00.123000Z") == base)
    }

    @Test("any RFC 3339 fraction reads: none, three, six, nine digits")
    func fractions() throws {
        let whole = try #require(RecordJSON.parse("2025-12-01T12:00:00Z"))
        let three = try #require(RecordJSON.parse("2025-12-01T12:00:00.123Z"))
        #expect(abs(three.timeIntervalSince(whole) - 0.123) < 1e-7)
        let six = try #require(RecordJSON.parse("2025-12-01T12:00:00.123456Z"))
        #expect(abs(six.timeIntervalSince(whole) - 0.123456) < 1e-7)
        let nine = try #require(RecordJSON.parse("2025-12-01T12:00:00.123456789Z"))
        #expect(abs(nine.timeIntervalSince(whole) - 0.123456) < 1e-7)
        let four = try #require(RecordJSON.parse("2025-12-01T12:00:00.1234Z"))
        #expect(abs(four.timeIntervalSince(whole) - 0.1234) < 1e-7)
        #expect(RecordJSON.parse("2025-12-01 12:00:00Z") == nil)
    }

    @Test("a record written and read keeps sub-millisecond latencies")
    func record() throws {
        let asked = Date(wireMilliseconds: 1_764_590_400_000)
        var record = ChildFlowRecord(
            question: UUID(),
            child: "c1",
            family: "f1",
            topic: "communication",
            outcome: .approved,
            closedAt: asked.addingTimeInterval(0.003)
        )
        record.askedAt = asked
        record.presentedAt = asked.addingTimeInterval(0.000_412)
        let read = try RecordJSON.decode(ChildFlowRecord.self, from: RecordJSON.encode(record))
        let askedBack = try #require(read.askedAt)
        let latency = try #require(read.presentedAt?.timeIntervalSince(askedBack))
        #expect(abs(latency - 0.000_412) < 0.000_001)
    }
}
