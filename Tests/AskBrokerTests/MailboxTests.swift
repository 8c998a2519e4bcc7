import AskProtocol
import Testing

@testable import AskBroker

@Suite("Mailbox and accepted ids: memory")
struct MailboxTests {
    static func envelope(_ seq: Int64) -> Envelope {
        Envelope(
            seq: seq,
            id: .random(),
            from: "child/a",
            to: "guardian/g",
            kind: "question",
            subject: nil,
            body: Array("{}".utf8),
            createdAt: 0,
            persistent: true
        )
    }

    /// A message that left the queue is not kept alive by it: a child that got ten messages, each delivered and
    /// acknowledged, must not hold ten envelopes (at a million pending questions that was ~360 B per question).
    @Test func aDequeuedMessageIsReleased() {
        let mailbox = Mailbox(address: "guardian/g")
        weak var first: Envelope?
        weak var second: Envelope?
        do {
            let a = Self.envelope(1)
            let b = Self.envelope(2)
            first = a
            second = b
            mailbox.enqueue(a)
            mailbox.enqueue(b)
            mailbox.enqueue(Self.envelope(3))
        }
        #expect(mailbox.dequeue()?.seq == 1)
        #expect(first == nil, "the first message left the queue while others wait")
        #expect(mailbox.dequeue()?.seq == 2)
        #expect(second == nil)
        #expect(mailbox.waitingCount == 1)
        #expect(mailbox.dequeue()?.seq == 3)
        #expect(mailbox.dequeue() == nil)
        #expect(mailbox.waitingCount == 0)
    }

    /// Order and redelivery still hold with the emptied slots: a message put back goes first.
    @Test func pushFrontAndRequeueKeepOrder() {
        let mailbox = Mailbox(address: "guardian/g")
        for seq in 1...4 { mailbox.enqueue(Self.envelope(Int64(seq))) }
        let one = mailbox.dequeue()!
        let two = mailbox.dequeue()!
        mailbox.inflight[two.id] = two
        mailbox.pushFront(one)
        mailbox.requeueInflight()
        #expect(mailbox.drainAll().map(\.seq) == [2, 1, 3, 4])
        #expect(mailbox.isEmpty)
    }

    @Test func acceptedIDsAreForgottenByTurn() {
        var accepted = AcceptedIDs()
        let start = ContinuousClock.now
        var turns: [[MessageID]] = []
        // 10 000 turns of 3 ids, one second apart: forgetting runs past the list's compaction.
        for turn in 0..<10_000 {
            let ids = (0..<3).map { _ in MessageID.random() }
            for id in ids {
                let inserted = accepted.insert(id)
                #expect(inserted)
                accepted.record(id, at: start + .seconds(turn))
            }
            turns.append(ids)
        }
        let refused = MessageID.random()
        var inserted = accepted.insert(refused)
        #expect(inserted)
        accepted.remove(refused)
        inserted = accepted.insert(turns[0][0])
        #expect(!inserted, "an accepted id is a retry")
        #expect(accepted.count == 30_000)
        // Turns 0...6999 are older than 100 s at start + 7 100 s (7 000 is exactly 100 s old: kept).
        var forgotten = accepted.forget(olderThan: .seconds(100), now: start + .seconds(7_100))
        #expect(forgotten == 21_000)
        #expect(accepted.count == 9_000)
        #expect(!accepted.contains(turns[6_999][2]))
        #expect(accepted.contains(turns[7_000][0]))
        forgotten = accepted.forget(olderThan: .seconds(100), now: start + .seconds(7_100))
        #expect(forgotten == 0)
        // Still listed by turn after the compaction: recording goes on, forgetting finds the right turns.
        let late = MessageID.random()
        inserted = accepted.insert(late)
        #expect(inserted)
        accepted.record(late, at: start + .seconds(20_000))
        forgotten = accepted.forget(olderThan: .seconds(100), now: start + .seconds(10_050))
        #expect(forgotten == 3 * 2_950)
        #expect(accepted.contains(turns[9_999][1]))
        #expect(accepted.contains(late))
        forgotten = accepted.forget(olderThan: .seconds(100), now: start + .seconds(20_101))
        #expect(forgotten == 3 * 50 + 1)
        #expect(accepted.count == 0)
    }
}
