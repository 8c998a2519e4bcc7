import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A 16-byte message identifier, unique per message and kept across redeliveries so receivers can deduplicate.
/// On the wire it is 16 raw bytes; in logs and JSON, 32 lowercase hex digits.
public struct MessageID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    public let high: UInt64
    public let low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A random identifier (128 bits from the system generator, which ``RandomPool`` reads 4 KiB at a time).
    public static func random() -> MessageID {
        let (high, low) = RandomPool.shared.next()
        return MessageID(high: high, low: low)
    }

    /// Reads 16 bytes, big-endian. - Returns: `nil` unless `bytes` has exactly 16 bytes.
    @inlinable
    public init?(bytes: UnsafeRawBufferPointer) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in 0..<8 { high = high << 8 | UInt64(bytes[index]) }
        for index in 8..<16 { low = low << 8 | UInt64(bytes[index]) }
        self.init(high: high, low: low)
    }

    public init?(bytes: [UInt8]) {
        guard let value = bytes.withUnsafeBytes({ MessageID(bytes: $0) }) else { return nil }
        self = value
    }

    public init(uuid: UUID) {
        let u = uuid.uuid
        self.init(bytes: [u.0, u.1, u.2, u.3, u.4, u.5, u.6, u.7, u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15])!
    }

    /// Parses 32 hex digits (either case).
    public init?(hex: String) {
        // UInt64(_:radix:) also takes a leading "+" or "-", which is not a hex digit.
        let isHexDigit = { (byte: UInt8) in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66)
        }
        guard hex.utf8.count == 32, hex.utf8.allSatisfy(isHexDigit), let high = UInt64(hex.prefix(16), radix: 16),
            let low = UInt64(hex.suffix(16), radix: 16)
        else { return nil }
        self.init(high: high, low: low)
    }

    /// The 16 bytes, big-endian.
    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        for index in 0..<8 {
            out[index] = UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64(index)))
            out[8 + index] = UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64(index)))
        }
        return out
    }

    /// Appends the 16 bytes, big-endian, to `buffer`.
    @inlinable
    public func append(to buffer: inout [UInt8]) {
        withUnsafeBytes(of: high.bigEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: low.bigEndian) { buffer.append(contentsOf: $0) }
    }

    /// The id as a UUID, its bytes in order (no array is made: the trace lines convert every id they record).
    public var uuid: UUID {
        @inline(__always) func byte(_ word: UInt64, _ index: UInt64) -> UInt8 {
            UInt8(truncatingIfNeeded: word >> (56 - 8 * index))
        }
        return UUID(
            uuid: (
                byte(high, 0), byte(high, 1), byte(high, 2), byte(high, 3), byte(high, 4), byte(high, 5),
                byte(high, 6), byte(high, 7), byte(low, 0), byte(low, 1), byte(low, 2), byte(low, 3), byte(low, 4),
                byte(low, 5), byte(low, 6), byte(low, 7)
            )
        )
    }

    public var description: String {
        let h = String(high, radix: 16)
        let l = String(low, radix: 16)
        return String(repeating: "0", count: 16 - h.count) + h + String(repeating: "0", count: 16 - l.count) + l
    }

    /// One 64-bit word per id into the hasher (ids are random 128-bit values): half the hashing work of the
    /// synthesized two-word hash, on the broker's hottest tables (dedup set, in-flight index).
    @inlinable
    public func hash(into hasher: inout Hasher) {
        hasher.combine(high ^ (low &* 0x9e37_79b9_7f4a_7c15))
    }

    /// What `Set` and `Dictionary` call to place an id: two rounds of the SplitMix64 finalizer keyed by the table's
    /// seed (random per process), instead of a SipHash `Hasher` per lookup. The broker's dedup set, in-flight index
    /// and mailboxes hash every message id several times; with SipHash (and the dedup set's rehashing as it grows)
    /// that was ~25% of the broker thread. Unlike the one-word `hash(into:)`, two ids cannot be made to collide
    /// without knowing the seed, since the seed enters before the first non-linear round.
    @inlinable
    public func _rawHashValue(seed: Int) -> Int {
        @inline(__always) func mix(_ value: UInt64) -> UInt64 {
            var z = value &+ 0x9e37_79b9_7f4a_7c15
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            return z ^ (z >> 31)
        }
        return Int(truncatingIfNeeded: mix(mix(high ^ UInt64(UInt(bitPattern: seed))) ^ low))
    }

    public static func == (a: MessageID, b: MessageID) -> Bool { a.high == b.high && a.low == b.low }

    public static func < (a: MessageID, b: MessageID) -> Bool { (a.high, a.low) < (b.high, b.low) }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = MessageID(hex: text) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not 32 hex digits")
            )
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
