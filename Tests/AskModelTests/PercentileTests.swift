import AskModel
import Testing

/// The one percentile definition (nearest rank) that every reported figure uses.
@Suite("Percentile: nearest rank")
struct PercentileTests {
    @Test("rank is ⌈p/100 × n⌉, at least 1, at most n")
    func ranks() {
        #expect(Percentile.rank(50, among: 4) == 2)
        #expect(Percentile.rank(50, among: 5) == 3)
        #expect(Percentile.rank(99, among: 100) == 99)
        #expect(Percentile.rank(25, among: 10) == 3)
        #expect(Percentile.rank(0, among: 10) == 1)
        #expect(Percentile.rank(100, among: 10) == 10)
        #expect(Percentile.rank(150, among: 10) == 10)
        #expect(Percentile.rank(-5, among: 10) == 1)
        #expect(Percentile.rank(50, among: 0) == 0)
        #expect(Percentile.rank(50, among: UInt64(3)) == 2)
    }

    @Test("a percentile is a recorded value: the lower middle of an even count, the max at 100")
    func values() {
        #expect(Percentile.of(50, sorted: [1, 2, 3, 4]) == 2)
        #expect(Percentile.of(50, sorted: [1, 2, 3, 4, 5]) == 3)
        #expect(Percentile.of(99, sorted: Array(1...100)) == 99)
        #expect(Percentile.of(100, sorted: [7, 8]) == 8)
        #expect(Percentile.of(50, sorted: [Int]()) == nil)
    }
}
