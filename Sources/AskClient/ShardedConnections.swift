import AskBasics
import AskLogging
import AskProtocol
import Foundation
import Synchronization
internal import ZeroMQ

/// One client per broker shard that a process needs (docs/scaling.md): endpoints are grouped by
/// `brokers.shard(family:)`, and the member for a shard (a ``WorkerRuntime``, an ``AskCenter``, a
/// ``GuardianCenter``: anything with one connection of its own, so its own heartbeats, reconnect and SEND retry) is
/// opened by `open` the first time a family maps there, never for a shard that no endpoint needs. Each member's
/// HELLO lists only its shard's addresses, so a process holds at most as many connections as there are brokers.
///
/// With a one-entry list (`--broker URL`) there is exactly one member, the same client as without sharding.
public final class ShardedConnections<Member: Sendable>: Sendable {
    /// The deployment's broker list.
    public let brokers: BrokerList
    private let open: @Sendable (BrokerEntry) throws -> Member
    /// Members by shard name.
    private let members = Mutex<[String: Member]>([:])

    /// - Parameter open: makes the member of one shard; called at most once per shard (under a lock).
    public init(brokers: BrokerList, open: @escaping @Sendable (BrokerEntry) throws -> Member) {
        self.brokers = brokers
        self.open = open
    }

    /// The member of `family`'s shard, opened now if it is the first family of that shard.
    /// - Throws: what `open` throws (the shard stays unopened; a later call tries again).
    public func member(forFamily family: String) throws -> Member {
        let shard = brokers.shard(family: family)
        return try members.withLock { try open(shard, in: &$0) }
    }

    /// The member of `shard`, opened now if it is not yet (the caller holds the lock).
    private func open(_ shard: BrokerEntry, in members: inout [String: Member]) throws -> Member {
        if let member = members[shard.name] { return member }
        let member = try open(shard)
        members[shard.name] = member
        return member
    }

    /// The opened members, in the order of the broker list.
    public var opened: [(shard: BrokerEntry, member: Member)] {
        let members = self.members.withLock { $0 }
        return brokers.entries.compactMap { entry in members[entry.name].map { (entry, $0) } }
    }

    /// Opens the member of each group's shard now; when one cannot be opened, hands the members opened so far to
    /// `undo` (to stop them) and rethrows, so a process never runs on part of its shards.
    public func openAll<Item>(_ groups: [(shard: BrokerEntry, items: [Item])], undo: ([Member]) -> Void) throws {
        do {
            for group in groups { _ = try members.withLock { try open(group.shard, in: &$0) } }
        } catch {
            undo(opened.map(\.member))
            throw error
        }
    }

    /// `items` grouped by their family's shard, in the order of the broker list; shards without items are left out.
    public static func group<Item>(_ items: [Item], over brokers: BrokerList, family: (Item) -> String) -> [(
        shard: BrokerEntry, items: [Item]
    )] {
        var byShard: [String: [Item]] = [:]
        for item in items { byShard[brokers.shard(family: family(item)).name, default: []].append(item) }
        return brokers.entries.compactMap { entry in byShard[entry.name].map { (entry, $0) } }
    }
}

extension ShardedConnections where Member == WorkerRuntime {
    /// Why a connection ended by itself (the first one, in list order), or `nil` while all run.
    public var failure: WorkerConnectionError? { opened.lazy.compactMap { $0.member.failure }.first }

    /// Stops every connection (each says BYE) and waits for their threads.
    public func stop() {
        let runtimes = opened.map(\.member)
        for runtime in runtimes { runtime.submit { connection, _ in connection.stop() } }
        for runtime in runtimes { runtime.wait() }
    }

    /// Waits until every connection has ended; when one ends by itself (a permanent refusal, a dead socket), the
    /// others are stopped, so the process ends with that failure instead of serving part of its endpoints.
    public func wait() {
        let runtimes = opened.map(\.member)
        let ended = DispatchSemaphore(value: 0)
        for runtime in runtimes {
            startThread(name: "sharded-wait") {
                runtime.wait()
                ended.signal()
            }
        }
        for _ in runtimes {
            ended.wait()
            if failure != nil { for runtime in runtimes { runtime.submit { connection, _ in connection.stop() } } }
        }
    }
}
