import AskBroker
import AskClient
import AskTestSupport
import Foundation
import Synchronization
import Testing
import ZeroMQ

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

    @Test("openAll opens every group's shard; when one fails, the ones opened are handed back to undo")
    func openAllUndoes() throws {
        struct Refused: Error {}
        let brokers = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1")
        let connections = ShardedConnections<String>(brokers: brokers) { shard in
            if shard.name == "b1" { throw Refused() }
            return "member-\(shard.name)"
        }
        // f3 is b0's, f1 b1's (the vectors of ShardTests): b0 opens, then b1 fails.
        let groups = ShardedConnections<String>.group(["f3", "f1"], over: brokers) { $0 }
        var undone: [String] = []
        #expect(throws: Refused.self) { try connections.openAll(groups) { undone = $0 } }
        #expect(undone == ["member-b0"])
        let good = ShardedConnections<String>(brokers: brokers) { "member-\($0.name)" }
        try good.openAll(groups) { _ in Issue.record("nothing failed, nothing to undo") }
        #expect(good.opened.map(\.member) == ["member-b0", "member-b1"])
    }

    /// A member whose connection counters are fixed, answered on another thread as a connection's are.
    struct FixedCounters: ConnectionCounterSource {
        let counters: WorkerCounters
        func readConnectionCounters(_ body: @escaping @Sendable (WorkerCounters) -> Void) {
            let counters = self.counters
            Thread { body(counters) }.start()
        }
    }

    @Test("a process's connection counters are the sum over its opened shards, handed over once all answered")
    func countersAddUp() throws {
        let brokers = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1")
        let connections = ShardedConnections<FixedCounters>(brokers: brokers) { shard in
            var counters = WorkerCounters()
            counters.sent = shard.name == "b0" ? 3 : 5
            counters.registrations = 1
            counters.reconnects = shard.name == "b1" ? 2 : 0
            return FixedCounters(counters: counters)
        }
        func read() -> [WorkerCounters] {
            let answers = Mutex<[WorkerCounters]>([])
            let done = DispatchSemaphore(value: 0)
            connections.readConnectionCounters { counters in
                answers.withLock { $0.append(counters) }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 10) == .success)
            return answers.withLock { $0 }
        }
        #expect(read().map(\.sent) == [0], "no shard opened yet: zeros")
        _ = try connections.member(forFamily: "f1")  // b1
        _ = try connections.member(forFamily: "f3")  // b0
        let sums = read()
        #expect(sums.count == 1, "one answer, not one per shard")
        #expect(sums.first.map { [$0.sent, $0.registrations, $0.reconnects] } == [8, 2, 2])
    }

    @Test("AskCenter.sharded and GuardianCenter.sharded: one center per shard, each registered with its own broker")
    func centersOverTwoBrokers() async throws {
        let sockets = TempDirectory()
        defer { sockets.cleanup() }
        let endpoints = ["ipc://\(sockets.path)/b0.sock", "ipc://\(sockets.path)/b1.sock"]
        let list = try BrokerList(parsing: "b0=\(endpoints[0]),b1=\(endpoints[1])")
        let brokers = try (0..<2).map { index in
            try TestBroker {
                $0.endpoints = [endpoints[index]]
                $0.shardName = "b\(index)"
                $0.brokers = list
            }
        }
        defer { for broker in brokers { broker.stop() } }
        let context = try ZMQContext()
        // Of b0 and b1, f1 is b1's and f3 is b0's: a HELLO listing both would be refused with wrong-shard.
        var guardianOptions = GuardianCenter.Options()
        guardianOptions.heartbeatInterval = .milliseconds(200)
        let guardians = try GuardianCenter.sharded(
            brokers: list,
            guardians: [GuardianIdentity(id: "g1", family: "f1"), GuardianIdentity(id: "g3", family: "f3")],
            logger: .silent(),
            context: ClientContext(context),
            options: guardianOptions
        )
        var childOptions = AskCenter.Options()
        childOptions.heartbeatInterval = .milliseconds(200)
        let children = try AskCenter.sharded(
            brokers: list,
            children: [ChildIdentity(id: "c1", family: "f1"), ChildIdentity(id: "c3", family: "f3")],
            stateDirectory: sockets.path + "/state",
            logger: .silent(),
            context: ClientContext(context),
            options: childOptions
        )
        #expect(guardians.opened.map(\.shard.name) == ["b0", "b1"])
        #expect(children.opened.map(\.shard.name) == ["b0", "b1"])
        for (_, center) in guardians.opened { #expect(await center.waitUntilRegistered(timeout: .seconds(10))) }
        for (_, center) in children.opened { #expect(await center.waitUntilRegistered(timeout: .seconds(10))) }
        #expect(try children.member(forFamily: "f3").children.keys.sorted() == ["c3"])
        for shard in ["b0", "b1"] {
            let record = sockets.path + "/state/\(shard)/askcenter.sqlite"
            #expect(FileManager.default.fileExists(atPath: record), "a response record per shard: \(record)")
        }
        for (_, center) in guardians.opened { await center.stop() }
        for (_, center) in children.opened { await center.stop() }
    }
}
