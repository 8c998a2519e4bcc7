/// A min-heap of deadlines, each with a payload: the timer queue of the broker's ledger and of the workers.
///
/// Inlinable, so users in other modules get it specialized for their types: unspecialized, each push and pop looks
/// up the element tuple's type metadata at run time (measured: visible in a profile of a broker restart that pushes
/// a million deadlines).
public struct DeadlineHeap<Deadline: Comparable, Payload> {
    @usableFromInline var items: [(at: Deadline, payload: Payload)] = []

    @inlinable public init() {}

    /// The earliest deadline and its payload.
    @inlinable public var peek: (at: Deadline, payload: Payload)? { items.first }
    @inlinable public var count: Int { items.count }
    @inlinable public var isEmpty: Bool { items.isEmpty }

    @inlinable public mutating func push(_ at: Deadline, _ payload: Payload) {
        items.append((at, payload))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].at < items[parent].at else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    /// Adds `entries` in any order and restores the heap order once, in O(n) (a restart adds a million deadlines;
    /// a push each costs a sift per entry and grows the storage step by step).
    @inlinable public mutating func push(contentsOf entries: some Collection<(at: Deadline, payload: Payload)>) {
        items.reserveCapacity(items.count + entries.count)
        items.append(contentsOf: entries)
        var parent = items.count / 2
        while parent > 0 {
            parent -= 1
            siftDown(parent)
        }
    }

    /// Removes the earliest entry.
    @inlinable public mutating func pop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        siftDown(0)
    }

    @inlinable mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < items.count && items[left].at < items[smallest].at { smallest = left }
            if right < items.count && items[right].at < items[smallest].at { smallest = right }
            if smallest == parent { break }
            items.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

extension DeadlineHeap: Sendable where Deadline: Sendable, Payload: Sendable {}
