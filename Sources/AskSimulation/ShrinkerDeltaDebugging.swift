/// Delta debugging (ddmin, Zeller and Hildebrandt): the smallest part of a failing input that still fails.
public enum DeltaDebugging {
    /// A 1-minimal sublist of `items` for which `fails` holds, given that it holds for `items` itself: removing any
    /// one element of the result makes `fails` false (the empty list included, which is tried first). The result
    /// keeps the items' order. `fails` is called at most once per distinct sublist.
    ///
    /// The list is cut into `n` chunks (2 at first); a chunk that fails alone becomes the list (back to 2 chunks),
    /// else a complement (the list without one chunk) that fails does (`n - 1` chunks); else `n` doubles, until the
    /// chunks are single items.
    /// - Throws: what `fails` throws (a spent budget), at once.
    public static func minimize<Element>(
        _ items: [Element],
        fails: ([Element]) throws -> Bool
    ) rethrows -> [Element] {
        var known: [[Int]: Bool] = [:]
        func test(_ indices: [Int]) throws -> Bool {
            if let result = known[indices] { return result }
            let result = try fails(indices.map { items[$0] })
            known[indices] = result
            return result
        }
        var current = Array(items.indices)
        if current.isEmpty { return [] }
        if try test([]) { return [] }
        var granularity = 2
        while current.count >= 2 {
            let chunks = split(current, into: min(granularity, current.count))
            var reduced = false
            for chunk in chunks {
                if try test(chunk) {
                    current = chunk
                    granularity = 2
                    reduced = true
                    break
                }
            }
            // With two chunks each complement is the other chunk, already tried.
            if !reduced && chunks.count > 2 {
                for chunk in chunks {
                    let removed = Set(chunk)
                    let complement = current.filter { !removed.contains($0) }
                    if try test(complement) {
                        current = complement
                        granularity = max(granularity - 1, 2)
                        reduced = true
                        break
                    }
                }
            }
            if reduced { continue }
            if granularity >= current.count { break }
            granularity = min(current.count, granularity * 2)
        }
        return current.map { items[$0] }
    }

    /// `list` cut into `count` consecutive chunks whose sizes differ by at most one.
    static func split(_ list: [Int], into count: Int) -> [[Int]] {
        var chunks: [[Int]] = []
        var start = 0
        for index in 0..<count {
            let size = (list.count - start) / (count - index)
            chunks.append(Array(list[start..<(start + size)]))
            start += size
        }
        return chunks
    }
}
