import AskAgents
import AskProtocol
import AskSimulation
import AskTestSupport
import Foundation
import Testing

/// Reached logs as the processes write them and the check reads them; the scenario's `expect.reached`; the exit.
@Suite("Reached situations: logs, counts, expectations")
struct ReachedCountTests {
    static func report(reached: [ReachedCount]?, violated: Bool = false) -> SimulationReport {
        SimulationReport.build(
            scenario: Scenario(),
            broker: "internal",
            startedAt: Date(timeIntervalSince1970: 1_800_000_000),
            wallSeconds: 1,
            childRecords: [],
            guardianRecords: [],
            invariants: InvariantResult(
                violations: violated ? [InvariantViolation(.endsExactlyOnce, "x")] : [],
                checked: [],
                notes: []
            ),
            processes: [],
            reached: reached
        )
    }

    @Test("a reached log appends one JSON line per note (count, time, question), and reads back; a cut line is counted")
    func logRoundTrip() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let path = directory.path + "/broker.jsonl"
        let question = UUID()
        do {
            let log = try ReachedLog(path: path)
            log.note(.guardiansRacing, question: question, at: Date(timeIntervalSince1970: 1_800_000_000.1234))
            log.note(.redeliveryDeduplicated, count: 0)  // nothing to say: no line
        }
        try ReachedLog(path: path).note(.redeliveryDeduplicated, count: 3)
        let handle = try #require(FileHandle(forWritingAtPath: path))
        handle.seekToEndOfFile()
        handle.write(Data("{\"situation\":\"answer-near".utf8))
        try handle.close()
        let read = JSONLinesWriter.read(ReachedLine.self, path: path)
        #expect(read.unreadable == 1)
        #expect(
            read.values == [
                ReachedLine(
                    situation: "guardians-racing",
                    count: 1,
                    atMs: 1_800_000_000_123,
                    question: question.uuidString
                ),
                ReachedLine(
                    situation: "redelivery-deduplicated",
                    count: 3,
                    atMs: read.values.last?.atMs ?? 0,
                    question: nil
                ),
            ]
        )
        #expect(JSONLinesWriter.read(ReachedLine.self, path: directory.path + "/missing.jsonl").values.isEmpty)
    }

    @Test("a reached log in a folder that does not exist is refused with the path and what to do")
    func unopenable() {
        #expect {
            try ReachedLog(path: "/nonexistent-askrelay/reached.jsonl")
        } throws: { error in
            "\(error)".contains("cannot open the reached log '/nonexistent-askrelay/reached.jsonl'")
                && "\(error)".contains("give --reached-log a file in a folder that exists")
        }
    }

    @Test("the counts of a folder: every situation (zero too), by process, the first questions, and what is required")
    func countsOfAFolder() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        #expect(ReachedCount.read(folder: directory.path, required: []) == nil)
        try FileManager.default.createDirectory(atPath: directory.path + "/reached", withIntermediateDirectories: true)
        let broker = try ReachedLog(path: directory.path + "/reached/broker.jsonl")
        let questions = (0..<7).map { _ in UUID() }
        for question in questions { broker.note(.guardiansRacing, question: question) }
        broker.note(.guardiansRacing, question: questions[0])
        try ReachedLog(path: directory.path + "/reached/child-2.jsonl").note(.redeliveryDeduplicated, count: 4)
        try ReachedLog(path: directory.path + "/reached/child-1.jsonl").note(.redeliveryDeduplicated, count: 1)
        let counts = try #require(
            ReachedCount.read(folder: directory.path, required: ["guardians-racing", "answer-near-expiry"])
        )
        #expect(counts.map(\.situation) == ReachedSituation.allCases.map(\.rawValue))
        let racing = try #require(counts.first { $0.situation == "guardians-racing" })
        #expect(racing.count == 8 && racing.processes == ["broker": 8] && racing.required)
        #expect(racing.questions == questions.prefix(5).map(\.uuidString))
        let redelivered = try #require(counts.first { $0.situation == "redelivery-deduplicated" })
        #expect(
            redelivered.count == 5 && redelivered.processes == ["child-1": 1, "child-2": 4] && !redelivered.required
        )
        let near = try #require(counts.first { $0.situation == "answer-near-expiry" })
        #expect(near.count == 0 && near.required)

        let report = Self.report(reached: counts)
        #expect(report.unreachedExpectations == ["answer-near-expiry"])
        #expect(report.exitCode(maxUnknown: nil, requireCoverage: false) == SimulationReport.coverageFailure)
        #expect(
            report.exitReason(maxUnknown: nil, requireCoverage: false)?.hasPrefix(
                "expect.reached: never reached answer-near-expiry: the run did not exercise"
            ) == true
        )
        #expect(report.summaryTable.contains("reached          2 of 6 situations"))
        #expect(report.summaryTable.contains("  answer-near-expiry               0   required, NOT REACHED"))
        #expect(report.summaryTable.contains("  guardians-racing                 8   required"))
        // A violation is exit 1 whatever was reached; all reached is 0.
        #expect(Self.report(reached: counts, violated: true).exitCode(maxUnknown: nil, requireCoverage: false) == 1)
        let met = counts.map { entry in
            var entry = entry
            if entry.required { entry.count = max(entry.count, 1) }
            return entry
        }
        #expect(Self.report(reached: met).exitCode(maxUnknown: nil, requireCoverage: false) == 0)
        #expect(Self.report(reached: nil).exitCode(maxUnknown: nil, requireCoverage: false) == 0)
        #expect(!Self.report(reached: nil).summaryTable.contains("reached "))
        // report.json keeps them.
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let decoded = try decoder.decode(SimulationReport.self, from: report.jsonData())
        #expect(decoded.reached == counts)
    }

    @Test("expect.reached takes the names askrelay counts, refuses others and unknown keys, and round-trips")
    func scenarioExpect() throws {
        let scenario = try Scenario.parse(Data(#"{"expect": {"reached": ["guardians-racing"]}}"#.utf8))
        #expect(scenario.expect.reached == ["guardians-racing"])
        let again = try Scenario.parse(JSONEncoder().encode(scenario))
        #expect(again == scenario)
        #expect(try Scenario.parse(Data("{}".utf8)).expect.reached.isEmpty)
        #expect {
            try Scenario.parse(Data(#"{"expect": {"reached": ["guardians-racing", "sometimes"]}}"#.utf8))
        } throws: { error in
            let error = error as? ScenarioError
            return error?.field == "expect.reached[1]"
                && error?.message.contains("'sometimes' is not a situation") == true
                && error?.message.contains("answer-near-expiry, guardians-racing") == true
        }
        #expect(throws: ScenarioError.self) { try Scenario.parse(Data(#"{"expect": {"reach": []}}"#.utf8)) }
    }

    @Test("raceCancelProbability is a fraction, reaches the child as --race-cancel-probability, and only when set")
    func raceCancel() throws {
        let racing = try Scenario.parse(Data(#"{"raceCancelProbability": 0.25}"#.utf8))
        #expect(racing.raceCancelProbability == 0.25)
        let arguments = WorkerPlan(scenario: racing, brokerEndpoint: "ipc:///b", runDirectory: "/r")
            .childArguments(1, logLevel: "info")
        let index = try #require(arguments.firstIndex(of: "--race-cancel-probability"))
        #expect(arguments[index + 1] == "0.25")
        #expect(try Scenario.parse(JSONEncoder().encode(racing)) == racing)
        let plain = WorkerPlan(scenario: Scenario(), brokerEndpoint: "ipc:///b", runDirectory: "/r")
        #expect(!plain.childArguments(1, logLevel: "info").contains("--race-cancel-probability"))
        #expect(!String(decoding: try JSONEncoder().encode(Scenario()), as: UTF8.self).contains("raceCancel"))
        #expect {
            try Scenario.parse(Data(#"{"raceCancelProbability": 1.5}"#.utf8))
        } throws: { error in
            (error as? ScenarioError)?.field == "raceCancelProbability"
        }
    }
}
