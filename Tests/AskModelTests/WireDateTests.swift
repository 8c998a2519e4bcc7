import AskModel
import Foundation
import Testing

@Suite("WireDate")
struct WireDateTests {
    @Test("known instants format as RFC 3339 UTC with milliseconds")
    func knownInstants() {
        #expect(WireDate.format(Date(wireMilliseconds: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(WireDate.format(Date(wireMilliseconds: -1)) == "1969-12-31T23:59:59.999Z")
        #expect(WireDate.format(Date(wireMilliseconds: 951_782_400_000)) == "2000-02-29T00:00:00.000Z")
        #expect(WireDate.format(Date(wireMilliseconds: 1_795_958_106_123)) == "2026-11-29T13:15:06.123Z")
        #expect(WireDate.format(Date(wireMilliseconds: -62_167_219_200_000)) == "0000-01-01T00:00:00.000Z")
        #expect(WireDate.format(Date(wireMilliseconds: 253_402_300_799_999)) == "9999-12-31T23:59:59.999Z")
        #expect(WireDate.format(Date(wireMilliseconds: 253_402_300_800_000)) == nil)
        #expect(WireDate.format(Date(timeIntervalSince1970: .infinity)) == nil)
    }

    @Test("agrees with Foundation's ISO 8601 formatter")
    func agreesWithFoundation() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var r = SeededGenerator(seed: 5)
        for _ in 0..<500 {
            let d = Date(wireMilliseconds: Int64.random(in: 0...4_102_444_800_000, using: &r))
            #expect(WireDate.format(d) == f.string(from: d))
        }
    }

    @Test("parse accepts fractions and offsets, rejects malformed text")
    func parsing() {
        let base = Date(wireMilliseconds: 1_795_958_106_000)
        #expect(WireDate.parse("2026-11-29T13:15:06Z") == base)
        #expect(WireDate.parse("2026-11-29T13:15:06.1Z") == base.addingTimeInterval(0.1).truncatedToWireMilliseconds)
        #expect(WireDate.parse("2026-11-29T13:15:06.123456789Z") == Date(wireMilliseconds: 1_795_958_106_123))
        #expect(WireDate.parse("2026-11-29T14:15:06.000+01:00") == base)
        #expect(WireDate.parse("2026-11-29T12:45:06.000-00:30") == base)
        for bad in [
            "", "2026-11-29", "2026-11-29 13:15:06Z", "2026-11-29T13:15:06", "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z", "2026-11-29T24:00:00Z", "2026-11-29T13:15:60Z", "2026-11-29T13:15:06.Z",
            "2026-11-29T13:15:06.1234567890Z", "2026-11-29T13:15:06Zjunk", "+2026-11-29T13:15:06Z",
            "2026-11-29T13:15:06+0100", "0000-01-01T00:00:00.000+00:01", "9999-12-31T23:59:59.999-00:01",
        ] {
            #expect(WireDate.parse(bad) == nil, "\(bad)")
        }
    }

    @Test("every millisecond round-trips exactly", arguments: [7, 8] as [UInt64])
    func roundTrip(seed: UInt64) {
        var r = SeededGenerator(seed: seed)
        for _ in 0..<5000 {
            let ms = Int64.random(in: -62_167_219_200_000...253_402_300_799_999, using: &r)
            let d = Date(wireMilliseconds: ms)
            #expect(d.wireMilliseconds == ms)
            #expect(d.truncatedToWireMilliseconds == d)
            #expect(WireDate.parse(WireDate.format(d)!) == d)
        }
    }
}
