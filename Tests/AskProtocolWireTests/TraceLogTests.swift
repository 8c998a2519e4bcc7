import AskProtocol
import AskTestKit
import Foundation
import Testing

@Suite("Trace log lines")
struct TraceLogTests {
    @Test("recorded lines are written at the flush, one JSON line each, and read back as TraceLine")
    func roundTrip() throws {
        let folder = TempDirectory()
        defer { folder.cleanup() }
        let path = folder.path + "/trace.jsonl"
        let log = try TraceLog(path: path)
        let question = UUID()
        let id = UUID()
        let at = Date(timeIntervalSince1970: 1_764_763_200.123456)
        log.record(
            .delivered,
            kind: "question",
            question: question,
            id: id,
            from: "broker",
            to: "guardian/g\"1",
            at: at
        )
        log.record(.refused, kind: "answer", question: question, code: "already-closed", at: at)
        #expect(FileManager.default.contents(atPath: path)?.isEmpty == true, "nothing before the flush")
        log.flush()
        let lines = try #require(String(data: FileManager.default.contents(atPath: path)!, encoding: .utf8))
            .split(separator: "\n")
        #expect(lines.count == 2)
        let first = try JSONDecoder().decode(TraceLine.self, from: Data(lines[0].utf8))
        #expect(first.atMicroseconds == 1_764_763_200_123_456)
        #expect(first.event == TraceEvent.delivered.rawValue)
        #expect(first.question == question.uuidString && first.id == id.uuidString)
        #expect(first.to == "guardian/g\"1", "quotes escaped")
        #expect(first.code == nil)
        let second = try JSONDecoder().decode(TraceLine.self, from: Data(lines[1].utf8))
        #expect(second.code == "already-closed" && second.id == nil && second.from == nil)
    }

    @Test("a trace log in a folder that does not exist is refused with the path and the flag")
    func unopenable() {
        #expect {
            _ = try TraceLog(path: "/nonexistent-askrelay/trace.jsonl")
        } throws: { error in
            "\(error)".contains("cannot open the trace log '/nonexistent-askrelay/trace.jsonl'")
                && "\(error)".contains("--trace-log")
        }
    }
}
