import Foundation

/// Millisecond-precision dates as carried on the wire.
///
/// Every date in the AskRelay protocol is an RFC 3339 timestamp in UTC with exactly three fractional digits,
/// for example `"2026-11-29T13:15:06.123Z"`. A `Date` has sub-millisecond precision, so every date the model
/// stores is *truncated* to whole milliseconds (towards the past) when it is assigned through the model's
/// initialisers or property setters, and when it is encoded. Because the canonical value is constructed in one
/// place (``Foundation/Date/init(wireMilliseconds:)``), a decoded value compares equal (`==`) to the value that
/// was encoded.
public enum WireDate {
    /// Milliseconds between 1970-01-01 and 2001-01-01 (Foundation's reference date).
    static let referenceOffsetMilliseconds: Int64 = 978_307_200_000
    /// Earliest encodable instant: 0000-01-01T00:00:00.000Z.
    static let minimumMilliseconds: Int64 = -62_167_219_200_000
    /// Latest encodable instant: 9999-12-31T23:59:59.999Z.
    static let maximumMilliseconds: Int64 = 253_402_300_799_999

    /// Formats a date as `YYYY-MM-DDTHH:MM:SS.sssZ`, truncated to milliseconds.
    ///
    /// - Returns: `nil` when the date lies outside years 0000...9999 or is not finite.
    public static func format(_ date: Date) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(24)
        guard append(date, to: &out) else { return nil }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the ``format(_:)`` text of `date` (without quotes) as UTF-8.
    /// - Returns: `false`, appending nothing, when ``format(_:)`` would return `nil`.
    static func append(_ date: Date, to out: inout [UInt8]) -> Bool {
        guard let ms = date.wireMilliseconds, (minimumMilliseconds...maximumMilliseconds).contains(ms) else {
            return false
        }
        let days = floorDiv(ms, 86_400_000)
        let msOfDay = ms - days * 86_400_000
        let (y, m, d) = civil(fromDays: days)
        func digits(_ v: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(v / divisor % 10))
                divisor /= 10
            }
        }
        digits(y, 4)
        out.append(UInt8(ascii: "-"))
        digits(m, 2)
        out.append(UInt8(ascii: "-"))
        digits(d, 2)
        out.append(UInt8(ascii: "T"))
        digits(msOfDay / 3_600_000, 2)
        out.append(UInt8(ascii: ":"))
        digits((msOfDay / 60_000) % 60, 2)
        out.append(UInt8(ascii: ":"))
        digits((msOfDay / 1000) % 60, 2)
        out.append(UInt8(ascii: "."))
        digits(msOfDay % 1000, 3)
        out.append(UInt8(ascii: "Z"))
        return true
    }

    /// Parses an RFC 3339 timestamp.
    ///
    /// Accepts `YYYY-MM-DDTHH:MM:SS`, an optional fraction of 1...9 digits (digits after the third are
    /// truncated), and a zone of `Z` or `±HH:MM`. The separator must be an upper-case `T`. Leap seconds are
    /// rejected.
    ///
    /// - Returns: the instant, truncated to milliseconds, or `nil` if the text is not a valid timestamp or the
    ///   instant falls outside 0000-01-01T00:00:00.000Z...9999-12-31T23:59:59.999Z.
    public static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parse(utf8: UnsafeRawBufferPointer($0)) }
    }

    /// ``parse(_:)`` of UTF-8 text.
    static func parse(utf8 b: UnsafeRawBufferPointer) -> Date? {
        var i = 0
        func digits(_ n: Int) -> Int64? {
            guard i + n <= b.count else { return nil }
            var v: Int64 = 0
            for k in i..<(i + n) {
                guard b[k] >= 0x30, b[k] <= 0x39 else { return nil }
                v = v * 10 + Int64(b[k] - 0x30)
            }
            i += n
            return v
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let y = digits(4), expect(UInt8(ascii: "-")), let mo = digits(2), expect(UInt8(ascii: "-")),
            let d = digits(2), expect(UInt8(ascii: "T")), let h = digits(2), expect(UInt8(ascii: ":")),
            let mi = digits(2), expect(UInt8(ascii: ":")), let s = digits(2)
        else { return nil }
        guard (1...12).contains(mo), d >= 1, d <= daysInMonth(year: y, month: mo), h <= 23, mi <= 59, s <= 59 else {
            return nil
        }
        var milli: Int64 = 0
        if expect(UInt8(ascii: ".")) {
            var count = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                if count < 3 { milli = milli * 10 + Int64(b[i] - 0x30) }
                count += 1
                i += 1
            }
            guard (1...9).contains(count) else { return nil }
            if count < 3 { for _ in count..<3 { milli *= 10 } }
        }
        var offsetMinutes: Int64 = 0
        if expect(UInt8(ascii: "Z")) {
            // UTC
        } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign: Int64 = b[i] == UInt8(ascii: "+") ? 1 : -1
            i += 1
            guard let oh = digits(2), expect(UInt8(ascii: ":")), let om = digits(2), oh <= 23, om <= 59 else {
                return nil
            }
            offsetMinutes = sign * (oh * 60 + om)
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = days(fromCivil: y, month: mo, day: d)
        let ms = ((days * 24 + h) * 60 + mi - offsetMinutes) * 60_000 + s * 1000 + milli
        // An offset can push the instant outside what ``format(_:)`` can write back; refuse it here.
        guard (minimumMilliseconds...maximumMilliseconds).contains(ms) else { return nil }
        return Date(wireMilliseconds: ms)
    }

    // MARK: - Calendar arithmetic (proleptic Gregorian; H. Hinnant's algorithms)

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }

    static func days(fromCivil year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

extension Date {
    /// Creates the canonical date for a count of milliseconds since 1970-01-01T00:00:00Z.
    ///
    /// All wire dates are built here, so two dates built from the same count are bit-identical.
    public init(wireMilliseconds ms: Int64) {
        self.init(timeIntervalSinceReferenceDate: Double(ms - WireDate.referenceOffsetMilliseconds) / 1000)
    }

    /// Whole milliseconds since 1970-01-01T00:00:00Z, truncated towards the past; `nil` if not finite.
    ///
    /// A date that is already canonical (built by ``init(wireMilliseconds:)``) maps back to its exact count,
    /// even where floating-point division left it a hair below the millisecond boundary.
    public var wireMilliseconds: Int64? {
        let x = timeIntervalSinceReferenceDate * 1000
        guard x.isFinite, abs(x) < 9.0e15 else { return nil }
        let nearest = Int64(x.rounded())
        if Date(wireMilliseconds: nearest + WireDate.referenceOffsetMilliseconds) == self {
            return nearest + WireDate.referenceOffsetMilliseconds
        }
        return Int64(x.rounded(.down)) + WireDate.referenceOffsetMilliseconds
    }

    /// This date truncated to whole milliseconds, the precision every AskRelay date is stored and compared at.
    public var truncatedToWireMilliseconds: Date {
        guard let ms = wireMilliseconds else { return self }
        return Date(wireMilliseconds: ms)
    }
}
