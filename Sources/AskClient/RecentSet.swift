/// A set that remembers only its last `capacity` insertions: the oldest is forgotten when one more comes.
///
/// For deduplication that must not grow without bound in a long-running process: a redelivery comes soon after
/// the original (a reconnect, a broker restart), so forgetting the oldest of many is safe.
struct RecentSet<Element: Hashable> {
    let capacity: Int
    private var members: Set<Element> = []
    private var order: [Element] = []
    private var head = 0

    init(capacity: Int) {
        precondition(capacity > 0, "a RecentSet needs room for at least one element")
        self.capacity = capacity
    }

    func contains(_ element: Element) -> Bool { members.contains(element) }

    var count: Int { members.count }

    /// Inserts `element` unless it is a member. - Returns: whether it was new.
    @discardableResult
    mutating func insert(_ element: Element) -> Bool {
        guard members.insert(element).inserted else { return false }
        order.append(element)
        if order.count - head > capacity {
            members.remove(order[head])
            head += 1
            // Compact now and then, so the forgotten prefix does not keep its memory.
            if head > 65536 || head * 2 > order.count {
                order.removeFirst(head)
                head = 0
            }
        }
        return true
    }
}
