import Testing

@testable import AskClient

@Suite("RecentSet: bounded deduplication")
struct RecentSetTests {
    @Test("a member is not inserted twice; the oldest is forgotten beyond the capacity")
    func forgetsTheOldest() {
        var set = RecentSet<Int>(capacity: 3)
        let inserted = [set.insert(1), set.insert(1), set.insert(2), set.insert(3), set.insert(4)]
        #expect(inserted == [true, false, true, true, true])
        #expect(!set.contains(1))
        #expect(set.contains(2) && set.contains(3) && set.contains(4))
        #expect(set.count == 3)
        // A forgotten element is new again and pushes the next oldest out.
        let again = set.insert(1)
        #expect(again)
        #expect(!set.contains(2))
    }

    @Test("a million insertions keep the memory of the capacity, not of the history")
    func staysBounded() {
        var set = RecentSet<Int>(capacity: 1000)
        for value in 0..<1_000_000 { set.insert(value) }
        #expect(set.count == 1000)
        #expect(set.contains(999_999) && set.contains(999_000) && !set.contains(998_999))
    }
}
