import AskClient
import Synchronization
import Testing

@Suite("ShardedConnections: one member per shard a process needs, opened on first need")
struct ShardedConnectionsTests {
    /// Counts what `open` was called for.
    final class Opened: Sendable {
        let names = Mutex<[String]>([])
    }

    @Test("a member opens the first time a family maps to its shard, once; other shards stay closed")
    func lazyOnce() throws {
        // Over b0, b1, b2: f1 and f2 are b1's, f3 is b0's (f0 would be b2's; the vectors of ShardTests).
        let brokers = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1")
        let opened = Opened()
        let connections = ShardedConnections<String>(brokers: brokers) { shard in
            opened.names.withLock { $0.append(shard.name) }
            return "member-\(shard.name)"
        }
        #expect(connections.opened.isEmpty)
        #expect(try connections.member(forFamily: "f1") == "member-b1")
        #expect(try connections.member(forFamily: "f2") == "member-b1")
        #expect(try connections.member(forFamily: "f3") == "member-b0")
        #expect(opened.names.withLock { $0 } == ["b1", "b0"])
        #expect(connections.opened.map(\.shard.name) == ["b0", "b1"], "in list order")
    }

    @Test("group puts each item with its family's shard, in list order, leaving out shards without items")
    func grouping() throws {
        let brokers = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1")
        let families = ["f1", "f3", "f2", "f6"]
        let groups = ShardedConnections<String>.group(families, over: brokers) { $0 }
        #expect(groups.map(\.shard.name) == ["b0", "b1"])
        #expect(groups.map(\.items) == [["f3", "f6"], ["f1", "f2"]])
    }

    @Test("an open that fails leaves the shard closed, and a later call tries again")
    func failedOpen() throws {
        struct Refused: Error {}
        let brokers = BrokerList(single: "tcp://a:1")
        let attempts = Opened()
        let connections = ShardedConnections<String>(brokers: brokers) { shard in
            let count = attempts.names.withLock { names in
                names.append(shard.name)
                return names.count
            }
            if count == 1 { throw Refused() }
            return "ok"
        }
        #expect(throws: Refused.self) { try connections.member(forFamily: "x") }
        #expect(connections.opened.isEmpty)
        #expect(try connections.member(forFamily: "x") == "ok")
    }
}
