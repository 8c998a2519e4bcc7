import Foundation

/// A small, fast, reproducible random generator (SplitMix64): the same seed gives the same stream on every platform.
public struct SeededGenerator: RandomNumberGenerator, Sendable, Hashable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    /// A generator for one named stream of a run: the same `(seed, stream)` always gives the same numbers, and
    /// different streams are independent, so adding a guardian does not change what the others decide.
    public init(seed: UInt64, stream: String) {
        // FNV-1a over the stream name, mixed with the seed.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in stream.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        var mixer = SeededGenerator(seed: seed ^ hash)
        state = mixer.next()
    }

    public mutating func next() -> UInt64 {
        state = state &+ 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    public mutating func nextUnit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// A uniform number in `[0, 1)` (same as ``nextUnit()``).
    public mutating func unit() -> Double { nextUnit() }

    /// `true` with probability `p`.
    public mutating func chance(_ p: Double) -> Bool { p > 0 && nextUnit() < p }
}
