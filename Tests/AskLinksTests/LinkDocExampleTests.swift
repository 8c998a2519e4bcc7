import AskRelayTesting
import Foundation
import Testing

/// The examples of docs/testing.md ("Faults between a process and its broker"), run as written; the last test
/// checks that the document shows exactly this code.
@Suite("the links example of docs/testing.md", .serialized, .timeLimit(.minutes(1)))
struct LinkDocExampleTests {
    // doc-example: begin
    @Test(.askRelayCluster(links: true))
    func guardiansCutOff() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        #expect(await guardians.waitUntilRegistered())
        var questions = guardians.questions().makeAsyncIterator()
        let link = try cluster.link(for: guardians)  // or cluster.link("guardiancenter-1")

        link.partition(.fromBroker)  // the guardians hear nothing; their own bytes still reach the broker
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        link.heal()  // what the broker sent meanwhile flows now, in order
        #expect(try #require(await questions.next()).id == question.id)

        let registrations = guardians.registrationCount
        link.reset()  // RST to both sides, as a crashed middlebox; the center connects again
        #expect(await guardians.waitForRegistration(after: registrations, timeout: .seconds(30)))
        #expect(link.counters.resets == 1)
        await app.stop()
        await guardians.stop()
    }
    // doc-example: end

    // doc-example: begin messages
    @Test(.askRelayCluster(links: true))
    func answerLostOnce() async throws {
        let cluster = try #require(AskRelayCluster.current)
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        #expect(await guardians.waitUntilRegistered())
        var questions = guardians.questions().makeAsyncIterator()
        var responses = app.child("c1-1").responses(for: CommunicationTopic.self).makeAsyncIterator()
        let link = try cluster.link(for: guardians)

        // The guardians' first answer never reaches the broker; the center sends it again, same id, after 2 s.
        let lost = LinkMessageFault(.drop, .toBroker, command: .send, kind: "answer", count: 1)
        link.apply(lost)
        link.bandwidth(20_000, direction: .fromBroker)  // and the broker's bytes come at 20 kB/s at most
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550101", kind: .phoneNumber))
        try await app.child("c1-1").ask(question)
        try await app.child("c1-1").send(question.id)
        let delivered = try #require(await questions.next())
        try await delivered.answer(PermissionChoice.approve.id)  // returns once the broker took the retry
        #expect(try #require(await responses.next()).choice == .approve)
        #expect(link.counters[lost].dropped == 1)
        await app.stop()
        await guardians.stop()
    }
    // doc-example: end messages

    @Test("docs/testing.md shows the examples above, line for line", arguments: ["", " messages"])
    func documentShowsTheExample(_ name: String) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let lines = source.components(separatedBy: "\n")
        let begin = try #require(lines.firstIndex { $0.hasSuffix("// doc-example: begin\(name)") })
        let end = try #require(lines.firstIndex { $0.hasSuffix("// doc-example: end\(name)") })
        let example = lines[(begin + 1)..<end].map { $0.hasPrefix("    ") ? String($0.dropFirst(4)) : $0 }

        let document = try String(
            contentsOf: root.appendingPathComponent("docs/testing.md"),
            encoding: .utf8
        ).components(separatedBy: "\n")
        let marker = "<!-- example: Tests/AskLinksTests/LinkDocExampleTests.swift\(name) -->"
        let start = try #require(document.firstIndex(of: marker), "docs/testing.md has no '\(marker)'")
        try #require(document[start + 1] == "```swift")
        let close = try #require(document[(start + 2)...].firstIndex(of: "```"))
        #expect(Array(document[(start + 2)..<close]) == example)
    }
}
