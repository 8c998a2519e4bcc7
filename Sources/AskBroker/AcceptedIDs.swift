import AskProtocol

/// The ids of the SENDs accepted within the deduplication horizon (ten ACK timeouts), with when each was accepted.
///
/// A fill accepts a few ids per loop turn, all with the turn's start time, so the times are kept once per turn:
/// the ids in acceptance order (16 bytes each) and one mark per turn (its time and where its ids end), instead of a
/// time beside every id.
struct AcceptedIDs: Sendable {
    private var ids: Set<MessageID> = []
    /// Accepted ids in the order they were accepted, from `head` on.
    private var order: [MessageID] = []
    private var head = 0
    /// Per turn (or recovery) that accepted ids: its time and the index in `order` after its last id, from
    /// `turnHead` on.
    private var turns: [(at: ContinuousClock.Instant, end: Int)] = []
    private var turnHead = 0

    /// Ids remembered (inserted and not removed).
    var count: Int { ids.count }

    func contains(_ id: MessageID) -> Bool { ids.contains(id) }

    /// Makes room for `count` ids (a restart knows how many it will read).
    mutating func reserveCapacity(_ count: Int) {
        ids.reserveCapacity(count)
        order.reserveCapacity(count)
    }

    /// Adds an id (one probe of the set). - Returns: whether it is new; an id already there is a retry.
    mutating func insert(_ id: MessageID) -> Bool { ids.insert(id).inserted }

    /// Takes an id out again (its SEND was refused, or its turn failed); a listed one is skipped when its time comes.
    mutating func remove(_ id: MessageID) { ids.remove(id) }

    /// Lists an inserted id as accepted at `at`, to be forgotten once `at` is older than the horizon. Times must
    /// not go backwards.
    mutating func record(_ id: MessageID, at: ContinuousClock.Instant) {
        order.append(id)
        if turnHead < turns.count, turns[turns.count - 1].at == at {
            turns[turns.count - 1].end = order.count
        } else {
            turns.append((at, order.count))
        }
    }

    /// Forgets the ids accepted more than `horizon` before `now`. - Returns: how many listed ids were passed.
    mutating func forget(olderThan horizon: Duration, now: ContinuousClock.Instant) -> Int {
        let before = head
        while turnHead < turns.count, now - turns[turnHead].at > horizon {
            let end = turns[turnHead].end
            while head < end {
                ids.remove(order[head])
                head += 1
            }
            turnHead += 1
        }
        let passed = head - before
        if head > 4096 && head * 2 > order.count {
            order.removeFirst(head)
            for index in turnHead..<turns.count { turns[index].end -= head }
            turns.removeFirst(turnHead)
            turnHead = 0
            head = 0
        }
        return passed
    }
}
