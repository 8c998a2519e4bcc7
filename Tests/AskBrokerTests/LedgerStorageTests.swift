import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

@testable import AskBroker

/// A question with every field the model has: custom choices (escapes, non-ASCII), names, an avatar, an expiry.
func richQuestion() -> AnyPermissionQuestion {
    let person = CommunicationTopic.PersonInformation(
        handle: CommunicationHandle(value: "ana@example.com", kind: .emailAddress),
        nameComponents: PersonName(givenName: "Ana \"Nita\"", familyName: "Müller/Łódź"),
        avatarImage: Data([0, 1, 2, 250])
    )
    let other = CommunicationTopic.PersonInformation(
        handle: CommunicationHandle(value: "+15550001111", kind: .phoneNumber)
    )
    let choices = [
        PermissionChoice(id: "com.example.yes-\(UUID().uuidString)", title: "Oui, d'accord ✓", answer: .approval),
        PermissionChoice(id: "com.example.later", title: "Später\n(bitte)", answer: .denial),
        PermissionChoice(id: "com.example.no", title: "No", answer: .denial),
    ]
    return AnyPermissionQuestion(
        topic: .communication(
            CommunicationTopic(personInformation: [person, other], actions: [.message, .videoCall])
        ),
        choices: choices,
        defaultChoice: choices[2],
        expirationDate: Date().addingTimeInterval(3600)
    )
}

@Suite("Ledger storage: compact entries, bodies spliced from the stored question JSON", .timeLimit(.minutes(1)))
struct LedgerStorageTests {
    @Test("a ledger entry is 32 bytes (24 and the journal row's seq) and holds no references")
    func entryIsCompact() {
        #expect(MemoryLayout<LedgerEntry>.stride <= 32)
        #expect(_isPOD(LedgerEntry.self))
    }

    @Test("spliced bodies are byte for byte what encoding the full message gives")
    func splicedBodies() throws {
        let question = richQuestion()
        let json = try WireJSON.encode(question)
        let sentAt = Date()
        let expiresAt = sentAt.addingTimeInterval(1234.5678)
        let spliced = try LedgerBodies.guardianQuestion(
            question: json,
            child: "c-1.x_y",
            family: "fam.1",
            sentAt: sentAt,
            expiresAt: expiresAt
        )
        let encoded = try WireJSON.encode(
            GuardianQuestion(
                question: question,
                child: "c-1.x_y",
                family: "fam.1",
                sentAt: sentAt,
                expiresAt: expiresAt
            )
        )
        #expect(spliced == encoded)
        #expect(try WireJSON.decode(GuardianQuestion.self, from: spliced).question == question)
        for choice in question.choices {
            let response = try LedgerBodies.response(question: json, choice: choice)
            #expect(response == (try WireJSON.encode(AnyPermissionResponse(question: question, choice: choice))))
        }
    }

    @Test("names are stored once and numbered from 1")
    func namePool() {
        var pool = NamePool()
        let a = pool.number("child-a")
        let b = pool.number("family-b")
        #expect(a != NamePool.none && b != NamePool.none && a != b)
        #expect(pool.number("child-a") == a)
        #expect(pool[a] == "child-a" && pool[b] == "family-b")
        #expect(pool.count == 2)
    }

    @Test("a bulk push makes a heap: entries come out by deadline, mixed with those pushed one by one")
    func heapBulkPush() {
        var heap = DeadlineHeap<Int, Int>()
        heap.push(50, -1)
        heap.push(3, -2)
        let bulk = (0..<1_000).map { (at: ($0 * 7919) % 1_000, payload: $0) }
        heap.push(contentsOf: bulk)
        heap.push(-5, -3)
        var popped: [Int] = []
        while let top = heap.peek {
            popped.append(top.at)
            heap.pop()
        }
        #expect(popped == ([50, 3, -5] + bulk.map(\.at)).sorted())
    }

    @Test("a question closed 1 ms, 0.6 ms or 10 µs before a whole-millisecond deadline is stored closed before it")
    func closedJustBeforeTheDeadline() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let journal = try Journal(directory: directory.path, durability: .batch)
        let deadline = Date(wireMilliseconds: 1_800_000_000_123)
        // Before: closed_ms was rounded to the nearest, so 0.6 ms and 10 µs before were stored as at the deadline.
        let offsets: [(before: Double, closedBefore: Bool)] = [
            (0.001, true), (0.000_6, true), (0.000_01, true), (0, false),
        ]
        var ids: [MessageID: Bool] = [:]
        for (n, offset) in offsets.enumerated() {
            let id = MessageID(high: 9, low: UInt64(n))
            ids[id] = offset.closedBefore
            try journal.saveQuestion(
                QuestionRecord(
                    id: id,
                    child: "c",
                    family: "f",
                    state: .answered,
                    createdAt: deadline.addingTimeInterval(-10),
                    expiresAt: deadline,
                    question: Array("{}".utf8),
                    choiceIDs: ["yes"],
                    approvalChoiceIDs: ["yes"],
                    closedAt: deadline.addingTimeInterval(-offset.before)
                )
            )
        }
        try journal.commitIfNeeded()
        var seen = 0
        try journal.forEachLedgerQuestion { question in
            let closedAt = try #require(question.closedAt)
            #expect(Journal.milliseconds(question.expiresAt) == deadline.wireMilliseconds)
            #expect((closedAt < question.expiresAt) == ids[question.id], "\(question.id): closed \(closedAt)")
            seen += 1
        }
        #expect(seen == offsets.count)
    }

    @Test("deadlines and answer times are whole milliseconds: accepted before the deadline is stored before it")
    func deadlinesAreWholeMilliseconds() {
        var random = SystemRandomNumberGenerator()
        let window = Duration.seconds(48 * 3600) / 3600
        for _ in 0..<2_000 {
            let now = Date(timeIntervalSince1970: 1_800_000_000 + Double.random(in: 0..<1, using: &random))
            let pendingEnd = now.addingTimeInterval(window.seconds)
            let expiry: Date? =
                Bool.random(using: &random)
                ? nil
                : Date(wireMilliseconds: Int64(pendingEnd.timeIntervalSince1970 * 1000) + Int64.random(in: -3...3))
            let deadline = Broker.deadline(now: now, expirationDate: expiry, window: window)
            #expect(deadline.truncatedToWireMilliseconds == deadline)
            let bound = min(expiry ?? pendingEnd, pendingEnd)
            #expect(deadline <= bound && deadline > bound.addingTimeInterval(-0.001))
            // The broker decides an answer at its time truncated (handleAnswer): 1 ms, 1 µs, 0.3 µs before the
            // deadline is accepted and stored before it; at the deadline it is refused.
            for before in [0.001, 0.000_5, 0.000_001, 0.000_000_3, 0] {
                let decided = deadline.addingTimeInterval(-before).truncatedToWireMilliseconds
                #expect((decided < deadline) == (before > 0), "\(before) s before \(deadline)")
                if before > 0 { #expect(Journal.milliseconds(decided) < Journal.milliseconds(deadline)) }
            }
            #expect(Journal.milliseconds(deadline) == deadline.wireMilliseconds)
        }
    }

    @Test("a restart restores every question in one scan: deadlines by time, closed ones forgotten as they closed")
    func restoreFromJournal() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let journal = try Journal(directory: directory.path, durability: .batch)
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        func record(_ n: UInt64, _ state: QuestionState, expiresIn: Double, closedAt: Double? = nil) -> QuestionRecord {
            QuestionRecord(
                id: MessageID(high: 7, low: n),
                child: n % 2 == 0 ? "child-even-with-a-long-name" : "child-odd",
                family: "family-\(n % 3)",
                state: state,
                createdAt: base,
                expiresAt: base.addingTimeInterval(expiresIn),
                question: Array("{}".utf8),
                choiceIDs: ["yes"],
                approvalChoiceIDs: ["yes"],
                closedAt: closedAt.map { base.addingTimeInterval($0) }
            )
        }
        // Stored in an order that is neither the deadlines' nor the closings'.
        let records = [
            record(1, .sent, expiresIn: 30), record(2, .answered, expiresIn: 60, closedAt: 20),
            record(3, .presented, expiresIn: 10), record(4, .expired, expiresIn: 5, closedAt: 5),
            record(5, .admitting, expiresIn: 20), record(6, .cancelled, expiresIn: 60, closedAt: 10),
        ]
        for record in records { try journal.saveQuestion(record) }
        try journal.commitIfNeeded()
        var ledger = QuestionLedger(configuration: BrokerConfiguration())
        ledger.reserveCapacity(records.count)
        let restored = try ledger.restore(from: journal)
        #expect(restored.open == 3 && restored.closed == 3)
        for record in records {
            let entry = try #require(ledger.entries[record.id])
            #expect(entry.state == record.state && entry.expiresAt == record.expiresAt)
            #expect(ledger.child(of: entry) == record.child && ledger.family(of: entry) == record.family)
            #expect(entry.admitter == NamePool.none)
        }
        #expect(ledger.names.count == 2 + 3)
        #expect(
            ledger.countsByState() == [
                "sent": 1, "presented": 1, "admitting": 1, "answered": 1, "expired": 1,
                "cancelled": 1,
            ]
        )
        #expect(ledger.nextDeadline == base.addingTimeInterval(10))
        #expect(
            ledger.due(now: base.addingTimeInterval(25)) == [MessageID(high: 7, low: 3), MessageID(high: 7, low: 5)]
        )
        #expect(ledger.nextDeadline == base.addingTimeInterval(30))
        // Closed at 5, 10, 20: a horizon of 15 forgets the first two only.
        #expect(ledger.forgetClosed(before: base.addingTimeInterval(15)) == 2)
        #expect(ledger.entries[MessageID(high: 7, low: 4)] == nil && ledger.entries[MessageID(high: 7, low: 6)] == nil)
        #expect(ledger.entries[MessageID(high: 7, low: 2)] != nil)
    }

    /// ask → present → send, then the guardian's answer: the child's response and the approval notice carry the
    /// full question, read back from the journal (or from memory without one).
    func answerGivesFullResponse(durability: Durability, restart: Bool) throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let question = richQuestion()
        let approve = question.choices[0]
        var broker = try TestBroker(durability: durability, directory: directory)
        defer { broker.stop() }
        var context = try ZMQContext()
        var child = try RawPeer(context: context, endpoint: broker.endpoint)
        var limits = try RawPeer(context: context, endpoint: broker.endpoint)
        var guardian = try RawPeer(context: context, endpoint: broker.endpoint)
        try child.register(role: .child, ["child/c1"], family: "f1")
        try limits.register(role: .limits, ["limits/l1"])
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        try child.expectAck(try child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        try limits.ack([try limits.expectDelivery(kind: "ask").id!])
        try limits.expectAck(
            try limits.send(AskResult(questionID: question.id, outcome: .presented), from: "limits/l1", to: "child/c1")
        )
        try child.ack([try child.expectDelivery(kind: "ask.result").id!])
        try child.expectAck(try child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker"))
        if restart {
            broker.stop()
            broker = try TestBroker(durability: durability, directory: directory)
            context = try ZMQContext()
            guardian = try RawPeer(context: context, endpoint: broker.endpoint)
            child = try RawPeer(context: context, endpoint: broker.endpoint)
            limits = try RawPeer(context: context, endpoint: broker.endpoint)
            try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
            try child.register(role: .child, ["child/c1"], family: "f1")
            try limits.register(role: .limits, ["limits/l1"])
        }
        let delivered = try guardian.expectDelivery(kind: "question")
        #expect(try delivered.decode(GuardianQuestion.self).question == question)
        try guardian.ack([delivered.id!])
        // An unknown choice is refused after the question is read back, and changes nothing.
        let wrong = try guardian.send(
            GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id),
            from: "guardian/g1",
            to: "broker"
        )
        #expect(try guardian.expectNack(wrong).code == ErrorCode.invalidChoice.rawValue)
        try guardian.expectAck(
            try guardian.send(
                GuardianAnswer(questionID: question.id, choiceID: approve.id),
                from: "guardian/g1",
                to: "broker"
            )
        )
        let response = try child.expectDelivery(kind: "response")
        #expect(
            try response.decode(AnyPermissionResponse.self)
                == AnyPermissionResponse(question: question, choice: approve)
        )
        let approval = try limits.expectDelivery(kind: "approval")
        #expect(
            try approval.decode(ApprovalNotice.self)
                == ApprovalNotice(child: "c1", questionID: question.id, handles: question.topic.handles)
        )
    }

    @Test("after a restart, the answer's response carries the full question read back from the journal")
    func fullResponseAfterRestart() throws {
        try answerGivesFullResponse(durability: .batch, restart: true)
    }

    @Test("without a restart the response is the full question too", arguments: [Durability.off, .batch])
    func fullResponse(_ durability: Durability) throws {
        try answerGivesFullResponse(durability: durability, restart: false)
    }
}
