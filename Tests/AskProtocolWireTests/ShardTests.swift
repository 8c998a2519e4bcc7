import AskProtocol
import Testing

@Suite("The shard of a family: rendezvous hashing over a named broker list (docs/scaling.md)")
struct ShardTests {
    // The vectors come from an independent implementation of docs/scaling.md, in Python:
    //
    //     M = (1 << 64) - 1
    //     def fnv(b):
    //         h = 0xcbf29ce484222325
    //         for x in b: h = ((h ^ x) * 0x100000001b3) & M
    //         return h
    //     def mix(x):
    //         z = (x + 0x9e3779b97f4a7c15) & M
    //         z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    //         z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    //         return z ^ (z >> 31)
    //     def score(f, n): return mix(fnv(f.encode() + b'\0' + n.encode()))

    @Test("fnv1a64 and mix64 match the reference values")
    func primitives() {
        #expect(Rendezvous.fnv1a64("") == 0xcbf2_9ce4_8422_2325)
        #expect(Rendezvous.fnv1a64("a") == 0xaf63_dc4c_8601_ec8c)
        #expect(Rendezvous.mix64(0) == 0xe220_a839_7b1d_cdaf)
    }

    @Test("scores and shards match the reference implementation")
    func vectors() throws {
        #expect(Rendezvous.score(family: "f0", name: "b0") == 0xe0b7_7315_a213_0b87)
        #expect(Rendezvous.score(family: "f0", name: "b1") == 0xccc6_865c_6cfe_0640)
        #expect(Rendezvous.score(family: "f0", name: "b2") == 0xfdf2_f671_8d15_623d)
        #expect(Rendezvous.score(family: "smith", name: "b2") == 0xe38f_42e3_259d_ff4f)
        let three = try BrokerList(parsing: "b0=tcp://h0:1,b1=tcp://h1:1,b2=tcp://h2:1")
        let two = try BrokerList(parsing: "b0=tcp://h0:1,b1=tcp://h1:1")
        let expected: [(String, String, String)] = [
            ("f0", "b2", "b0"), ("f1", "b1", "b1"), ("f2", "b1", "b1"), ("family-42", "b1", "b1"),
            ("smith", "b2", "b0"),
        ]
        for (family, ofThree, ofTwo) in expected {
            #expect(three.shard(family: family).name == ofThree, "\(family)")
            #expect(two.shard(family: family).name == ofTwo, "\(family)")
        }
    }

    @Test("the name is hashed, not the endpoint, nor the order of the list")
    func nameNotEndpoint() throws {
        let list = try BrokerList(parsing: "b0=tcp://h0:1,b1=tcp://h1:1,b2=tcp://h2:1")
        let moved = try BrokerList(parsing: "b2=ipc:///x,b0=tcp://other:9,b1=tcp://h1:1")
        for index in 0..<500 {
            #expect(list.shard(family: "f\(index)").name == moved.shard(family: "f\(index)").name)
        }
    }

    @Test("families spread evenly: each of 4 brokers gets 25% ± 3% of 20 000 families")
    func distribution() throws {
        let list = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1,b3=tcp://d:1")
        var counts: [String: Int] = [:]
        for index in 0..<20_000 { counts[list.shard(family: "family-\(index)").name, default: 0] += 1 }
        for name in ["b0", "b1", "b2", "b3"] {
            #expect((4400...5600).contains(counts[name] ?? 0), "\(name): \(counts[name] ?? 0)")
        }
    }

    @Test("adding a broker moves only the families it wins; removing one moves only its own")
    func minimalMovement() throws {
        let four = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1,b3=tcp://d:1")
        let five = try BrokerList(parsing: "b0=tcp://a:1,b1=tcp://b:1,b2=tcp://c:1,b3=tcp://d:1,b4=tcp://e:1")
        let withoutB1 = try BrokerList(parsing: "b0=tcp://a:1,b2=tcp://c:1,b3=tcp://d:1")
        var movedOnAdd = 0
        for index in 0..<10_000 {
            let family = "f\(index)"
            let before = four.shard(family: family).name
            let after = five.shard(family: family).name
            if before != after {
                movedOnAdd += 1
                #expect(after == "b4", "\(family) moved from \(before) to \(after), not to the new broker")
            }
            let removed = withoutB1.shard(family: family).name
            if before != "b1" { #expect(removed == before, "\(family) moved off \(before) when b1 left") }
        }
        // About 1/5 of the families move to the new broker.
        #expect((1700...2300).contains(movedOnAdd), "\(movedOnAdd) of 10 000 moved")
    }

    @Test("a list of one broker is the shard of every family")
    func single() {
        let list = BrokerList(single: "tcp://127.0.0.1:5555")
        #expect(list.shard(family: "anything").endpoint == "tcp://127.0.0.1:5555")
        #expect(list.description == "b0=tcp://127.0.0.1:5555")
    }

    @Test(
        "a bad list is one clear error",
        arguments: [
            ("", "empty"),
            ("b0=tcp://a:1,b0=tcp://b:1", "'b0' is listed twice"),
            ("b0=tcp://a:1,b1=tcp://a:1", "'tcp://a:1' is listed twice"),
            ("b0=tcp://a:1,tcp://b:1", "has no '='"),
            ("b0=tcp://a:1,", "empty entry"),
            ("b/0=tcp://a:1", "is not an id"),
            ("b0=", "has no endpoint"),
        ]
    )
    func badLists(text: String, expected: String) {
        #expect {
            _ = try BrokerList(parsing: text)
        } throws: { error in
            (error as? BrokerListError)?.message.contains(expected) == true
        }
    }
}
