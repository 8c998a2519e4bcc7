import AskAgents
import AskProtocol
import Foundation
import Testing

@testable import AskSimulation

@Suite("Scenario files", .timeLimit(.minutes(1)))
struct ScenarioTests {
    func parse(_ json: String) throws -> Scenario { try Scenario.parse(Data(json.utf8)) }

    func error(_ json: String) -> ScenarioError? {
        do {
            _ = try parse(json)
            return nil
        } catch let error as ScenarioError {
            return error
        } catch {
            Issue.record("expected a ScenarioError, got \(error)")
            return nil
        }
    }

    @Test("{} is the default scenario, and the defaults make every outcome possible")
    func emptyIsDefault() throws {
        let scenario = try parse("{}")
        #expect(scenario == Scenario())
        #expect(scenario.seed == 42)
        #expect(scenario.pendingWindow == .seconds(48 * 3600))
        #expect(scenario.childProcesses >= 2 && scenario.parentProcesses >= 2)
        #expect(scenario.families >= 200)
        #expect(scenario.faults.isEmpty)
        // Expiry must happen within the run: the scaled expiry is far shorter than the run.
        #expect(scenario.scaled(scenario.expireAfter ?? scenario.pendingWindow) < scenario.duration.seconds / 4)
        #expect(scenario.answeringFamilies < scenario.families)
        #expect(scenario.cancelProbability > 0 && scenario.invalidRatio > 0 && scenario.ratios.knownHandle > 0)
        #expect(
            scenario.ratios.limitsEnabled < 1 && scenario.ratios.contactSyncSetUp < 1 && scenario.ratios.eligible < 1
        )
    }

    @Test("every field is read")
    func everyField() throws {
        let scenario = try parse(
            """
            {"seed": 7, "families": 10, "childrenPerFamily": 2, "guardiansPerFamily": 3, "childProcesses": 3,
             "parentProcesses": 4,
             "ratios": {"limitsEnabled": 0.5, "contactSyncSetUp": 0.6, "eligible": 0.7, "knownHandle": 0.1},
             "actions": {"message": 1, "follow": 2}, "topics": {"communication": 1},
             "groupQuestionRatio": 0.3, "invalidRatio": 0.04, "cancelProbability": 0.2,
             "guardians": {"approveProbability": 0.9, "neverAnswerRatio": 0.5, "think": "uniform:50ms-2s"},
             "childThink": "1s", "pendingWindow": "24h", "expireAfter": "12h", "timeScale": 1000, "duration": "1m",
             "flowsPerChild": 5, "grace": "500ms", "durability": "strict", "answerAfterExpiry": true,
             "faults": [{"at": "5s", "process": "broker", "action": "kill", "restartAfter": "1s"},
                        {"at": 6.5, "process": "parent-2", "action": "stop", "continueAfter": "2s"},
                        {"at": "7s", "process": "child-3", "action": "term"}]}
            """
        )
        #expect(scenario.seed == 7 && scenario.families == 10 && scenario.childrenPerFamily == 2)
        #expect(scenario.guardiansPerFamily == 3 && scenario.childProcesses == 3 && scenario.parentProcesses == 4)
        #expect(scenario.ratios.limitsEnabled == 0.5 && scenario.ratios.contactSyncSetUp == 0.6)
        #expect(scenario.ratios.eligible == 0.7 && scenario.ratios.knownHandle == 0.1)
        #expect(scenario.actions == ["message": 1, "follow": 2] && scenario.topics == ["communication": 1])
        #expect(
            scenario.groupQuestionRatio == 0.3 && scenario.invalidRatio == 0.04 && scenario.cancelProbability == 0.2
        )
        #expect(scenario.guardians.approveProbability == 0.9 && scenario.guardians.neverAnswerRatio == 0.5)
        #expect(scenario.guardians.think == "uniform:50ms-2s")
        #expect(scenario.childThink == .seconds(1) && scenario.pendingWindow == .seconds(24 * 3600))
        #expect(
            scenario.expireAfter == .seconds(12 * 3600) && scenario.timeScale == 1000
                && scenario.duration == .seconds(60)
        )
        #expect(scenario.flowsPerChild == 5 && scenario.grace == .milliseconds(500) && scenario.durability == "strict")
        #expect(scenario.answerAfterExpiry)
        #expect(
            scenario.faults == [
                .init(at: .seconds(5), process: "broker", action: .kill, restartAfter: .seconds(1)),
                .init(at: .milliseconds(6500), process: "parent-2", action: .stop, continueAfter: .seconds(2)),
                .init(at: .seconds(7), process: "child-3", action: .term),
            ]
        )
        #expect(scenario.answeringFamilies == 5)
    }

    @Test("a scenario survives encode then parse")
    func roundTrip() throws {
        var scenario = Scenario()
        scenario.faults = [.init(at: .milliseconds(1500), process: "limits", action: .kill, restartAfter: .seconds(2))]
        scenario.expireAfter = nil
        let data = try JSONEncoder().encode(scenario)
        #expect(try Scenario.parse(data) == scenario)
    }

    @Test("a 'run' fault takes a command and an undo (1s later by default), names no process, and round-trips")
    func runFault() throws {
        let scenario = try parse(
            #"{"faults": [{"at": "2s", "action": "run", "command": ["ip", "link", "set", "dev", "eth0", "down"],"#
                + #" "undo": ["ip", "link", "set", "dev", "eth0", "up"]}, {"at": "9s", "action": "run", "command": ["true"]}]}"#
        )
        #expect(
            scenario.faults == [
                .init(
                    at: .seconds(2),
                    run: ["ip", "link", "set", "dev", "eth0", "down"],
                    undo: ["ip", "link", "set", "dev", "eth0", "up"],
                    undoAfter: .seconds(1)
                ),
                .init(at: .seconds(9), run: ["true"]),
            ]
        )
        #expect(try Scenario.parse(try JSONEncoder().encode(scenario)) == scenario)
    }

    @Test("a power-cut fault parses and round-trips; a build without the fault VFS refuses it, saying how to get one")
    func powerCutFault() throws {
        let json =
            #"{"durability": "strict", "faults": [{"at": "3s", "process": "broker", "action": "power-cut", "#
            + #""restartAfter": "500ms"}]}"#
        let scenario = try parse(json)
        #expect(
            scenario.faults == [
                .init(at: .seconds(3), process: "broker", action: .powerCut, restartAfter: .seconds(0.5))
            ]
        )
        #expect(try Scenario.parse(try JSONEncoder().encode(scenario)) == scenario)
        #expect(String(decoding: try JSONEncoder().encode(scenario), as: UTF8.self).contains(#""power-cut""#))
        let error = #expect(throws: ScenarioError.self) { try scenario.validate(faultVFS: false) }
        #expect(error?.field == "faults[0].action")
        #expect(
            error?.description.contains("need a debug build") == true
                && error?.description.contains("swift build; .build/debug/askrelay simulate ...") == true,
            "\(error.map(String.init(describing:)) ?? "")"
        )
    }

    @Test("expireAfter null leaves expiry to the pending window")
    func expireAfterNull() throws {
        #expect(try parse(#"{"expireAfter": null}"#).expireAfter == nil)
    }

    @Test(
        "bad input names the field",
        arguments: [
            (#"{"families": "many"}"#, "families"),
            (#"{"families": 0}"#, "families"),
            (#"{"famlies": 3}"#, "famlies"),
            (#"{"ratios": {"eligible": 1.5}}"#, "ratios.eligible"),
            (#"{"ratios": {"elgible": 0.5}}"#, "ratios.elgible"),
            (#"{"guardians": {"think": "sometimes"}}"#, "guardians.think"),
            (#"{"guardians": {"approveProbability": -0.1}}"#, "guardians.approveProbability"),
            (#"{"pendingWindow": "two days"}"#, "pendingWindow"),
            (#"{"timeScale": 0}"#, "timeScale"),
            // One range with the broker's --time-scale (0.01...1e9), and durations of at most 100d: 1e10 was accepted
            // and refused later by the broker; 1e12 seconds trapped converting to nanoseconds.
            (#"{"timeScale": 1e10}"#, "timeScale"),
            (#"{"duration": 1e12}"#, "duration"),
            (#"{"duration": "1e12s"}"#, "duration"),
            (#"{"guardians": {"think": "exponential:1e12s"}}"#, "guardians.think"),
            (#"{"durability": "fast"}"#, "durability"),
            (#"{"actions": {"hug": 1}}"#, "actions.hug"),
            (#"{"faults": [{"at": "1s", "process": "broker", "action": "explode"}]}"#, "faults[0].action"),
            (#"{"faults": [{"at": "1s", "process": "parent-9", "action": "kill"}]}"#, "faults[0].process"),
            (#"{"faults": [{"process": "broker", "action": "kill"}]}"#, "faults[0].at"),
            (
                #"{"faults": [{"at": "1s", "process": "broker", "action": "kill", "continueAfter": "1s"}]}"#,
                "faults[0].continueAfter"
            ),
            (#"{"seed": -1}"#, "seed"),
            // A power cut: of a broker only, with strict durability (batch loses acknowledged messages by design).
            (#"{"faults": [{"at": "1s", "process": "broker", "action": "power-cut"}]}"#, "durability"),
            (
                #"{"durability": "off", "faults": [{"at": "1s", "process": "broker", "action": "power-cut"}]}"#,
                "durability"
            ),
            (
                #"{"durability": "strict", "faults": [{"at": "1s", "process": "child-1", "action": "power-cut"}]}"#,
                "faults[0].process"
            ),
            (
                #"{"durability": "strict", "faults": [{"at": "1s", "process": "broker", "action": "power-cut", "#
                    + #""continueAfter": "1s"}]}"#,
                "faults[0].continueAfter"
            ),
            (#"{"faults": [{"at": "1s", "action": "run"}]}"#, "faults[0].command"),
            (#"{"faults": [{"at": "1s", "action": "run", "command": []}]}"#, "faults[0].command"),
            (
                #"{"faults": [{"at": "1s", "process": "broker", "action": "run", "command": ["x"]}]}"#,
                "faults[0].process"
            ),
            (
                #"{"faults": [{"at": "1s", "action": "run", "command": ["x"], "undoAfter": "1s"}]}"#,
                "faults[0].undoAfter"
            ),
            (
                #"{"faults": [{"at": "1s", "process": "broker", "action": "kill", "command": ["x"]}]}"#,
                "faults[0].command"
            ),
        ]
    )
    func badInput(json: String, field: String) {
        let error = error(json)
        #expect(error?.field == field, "\(json) → \(error.map(String.init(describing:)) ?? "no error")")
        #expect(error?.description.contains("'\(field)'") == true)
    }

    @Test("a field with a simulate flag has the flag's range: 1e9 families is refused as --families 1000000000 is")
    func flagRanges() {
        for (json, got) in [(#"{"families": 1000001}"#, "1000001"), (#"{"families": 1e9}"#, "1000000000")] {
            #expect(
                error(json)?.description
                    == "scenario field 'families': needs a whole number in 1...1000000, got \(got)",
                "\(json)"
            )
        }
        #expect(
            error(#"{"brokers": 17}"#)?.description
                == "scenario field 'brokers': needs a whole number in 1...16, got 17"
        )
        #expect(error(#"{"duration": "0s"}"#)?.field == "duration")
        #expect(Scenario.Bounds.families == 1...1_000_000)
        #expect(error(#"{"families": 1.5}"#)?.description == "scenario field 'families': needs a whole number, got 1.5")
        #expect(error(#"{"faults": {}}"#)?.description.hasSuffix("found a JSON object") == true)
        #expect(error(#"{"ratios": 3}"#)?.description.hasSuffix("found a number") == true)
        #expect(throws: Never.self) { try parse(#"{"families": 1000000}"#) }
    }

    @Test("a scenario that is not one JSON object says what it is, where, and what to write instead")
    func notAnObject() {
        #expect(
            error("\n  [{\"families\": 3}]")?.description
                == "scenario: the file holds a JSON array (line 2, column 3), but a scenario is one JSON object: "
                + #"write its fields inside { }, e.g. {"families": 10, "duration": "20s"}"#
        )
        #expect(error("42")?.description.contains("the file holds a number (line 1, column 1)") == true)
        let nested = error(#"{"ratios": [0.5]}"#)
        #expect(nested?.field == "ratios")
        #expect(
            nested?.description
                == #"scenario field 'ratios': expected a JSON object ({"name": value, ...}), found an array"#,
            "\(nested.map(String.init(describing:)) ?? "")"
        )
    }

    @Test("the scenario files the simulation writes show an empty list as []")
    func emptyListsPrintShort() throws {
        let text = String(decoding: try ReportJSON.simulationFile(Scenario()), as: UTF8.self)
        #expect(text.contains(#""faults" : [],"#) || text.contains(#""faults" : []"#), "\(text)")
        #expect(!text.contains("[\n"), "\(text)")
        #expect(try Scenario.parse(ReportJSON.simulationFile(Scenario())) == Scenario())
    }

    @Test("a drain bound of more than 10 minutes of wall time is named before the run, with the flag that accepts it")
    func longDrain() throws {
        var scenario = Scenario()
        #expect(scenario.longDrainProblem == nil)
        scenario.timeScale = 1
        scenario.duration = .seconds(3)
        let problem = try #require(scenario.longDrainProblem)
        #expect(problem.contains("time scale 1"), "\(problem)")
        #expect(problem.contains("24h 0m 36s"), "\(problem)")
        #expect(problem.contains("--allow-long-drain"), "\(problem)")
    }

    @Test("text that is not JSON is refused")
    func notJSON() {
        #expect(error("families: 3") != nil)
    }

    @Test("the example scenarios in docs/scenarios parse, and default.json is the built-in default")
    func examples() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        for name in ["default", "faults", "small"] {
            _ = try Scenario.load(path: root.appendingPathComponent("docs/scenarios/\(name).json").path)
        }
        #expect(try Scenario.load(path: root.appendingPathComponent("docs/scenarios/default.json").path) == Scenario())
        let faults = try Scenario.load(path: root.appendingPathComponent("docs/scenarios/faults.json").path)
        #expect(faults.faults.contains { $0.process == "broker" && $0.action == .kill && $0.restartAfter != nil })
    }

    @Test("guardians.think takes the parent's --think grammar, which the scenario passes it to")
    func thinkTimes() throws {
        for text in ["fixed:200ms", "uniform:50ms-2s", "exponential:300ms", "1.5s"] {
            let scenario = try parse(#"{"guardians": {"think": "\#(text)"}}"#)
            #expect(scenario.guardians.think == text)
            #expect(try ThinkTime.parse(scenario.guardians.think) == ThinkTime.parse(text))
        }
        for text in ["uniform:2s-1s", "gaussian:1s", "fixed:abc"] {
            #expect(error(#"{"guardians": {"think": "\#(text)"}}"#)?.field == "guardians.think", "\(text)")
        }
    }

    @Test("derived seeds differ per process and repeat per seed; the limits state is seeded")
    func seeds() {
        #expect(SeedDerivation.seed(1, "child-1") == SeedDerivation.seed(1, "child-1"))
        #expect(SeedDerivation.seed(1, "child-1") != SeedDerivation.seed(1, "child-2"))
        #expect(SeedDerivation.seed(1, "child-1") != SeedDerivation.seed(2, "child-1"))
        let plan = WorkerPlan(scenario: Scenario(), brokerEndpoint: "ipc:///tmp/x", runDirectory: "/tmp")
        let state = plan.limitsState()
        #expect(state == plan.limitsState())
        #expect(state.children.values.contains { !$0.eligible })
        #expect(state.children.values.contains { !$0.limitsEnabled })
        #expect(state.children.values.contains { !$0.contactSyncSetUp })
        var other = Scenario()
        other.seed = 43
        #expect(WorkerPlan(scenario: other, brokerEndpoint: "", runDirectory: "/tmp").limitsState() != state)
    }

    @Test("the plan names children and guardians as the workers generate them, and the roster parses as a roster")
    func naming() throws {
        var scenario = Scenario()
        scenario.families = 5
        scenario.childrenPerFamily = 2
        scenario.guardiansPerFamily = 2
        scenario.guardians.neverAnswerRatio = 0.4
        let plan = WorkerPlan(scenario: scenario, brokerEndpoint: "", runDirectory: "/tmp")
        let generated = ContactGenerator.children(
            families: 5,
            childrenPerFamily: 2,
            idPrefix: WorkerPlan.childPrefix(2)
        )
        #expect(plan.childIDs(process: 2).map(\.id) == generated.map(\.id))
        #expect(plan.childIDs(process: 2).map(\.family) == generated.map(\.family))
        let roster = plan.roster(1)
        let guardians = try Roster.generate(families: 5, guardiansPerFamily: 2, idPrefix: WorkerPlan.guardianPrefix(1))
        #expect(roster.map(\.id) == guardians.map(\.id))
        #expect(roster.map(\.family) == guardians.map(\.family))
        #expect(roster.filter { $0.policy == "never" }.map(\.family) == ["f4", "f4", "f5", "f5"])
        let parsed = try Roster.parseFile(try JSONEncoder().encode(roster))
        #expect(parsed.count == 10)
    }
}

@Suite("Scenario JSON is checked strictly, with the place of the first error")
struct StrictScenarioJSONTests {
    func syntaxFailure(_ text: String) -> StrictJSONSyntax.Failure? {
        do {
            try StrictJSONSyntax.check(Data(text.utf8))
            return nil
        } catch let failure as StrictJSONSyntax.Failure {
            return failure
        } catch {
            return nil
        }
    }

    @Test("what JSONDecoder lets through is refused: trailing commas, duplicate fields, leading zeros, single quotes")
    func lenientCases() throws {
        let cases: [(String, Int, Int, String)] = [
            (#"{"families": 5,}"#, 1, 16, "no trailing comma"),
            (#"{"faults": [1, 2,]}"#, 1, 18, "no trailing comma"),
            (#"{"families": 5, "families": 6}"#, 1, 17, "given twice"),
            (#"{"families": 05}"#, 1, 15, "may not start with 0"),
            (#"{'families': 5}"#, 1, 2, "double quotes"),
            ("{\n  \"families\": 5\n  \"seed\": 3\n}", 3, 3, "expected ',' or '}'"),
            ("{\"name\": \"é\" x}", 1, 14, "expected ',' or '}'"),
            ("{} {}", 1, 4, "after the end"),
            ("", 1, 1, "empty"),
            ("{\"a\": tru}", 1, 7, "lower case"),
        ]
        for (text, line, column, words) in cases {
            let failure = try #require(syntaxFailure(text), "accepted: \(text)")
            #expect(failure.line == line && failure.column == column, "\(text): \(failure)")
            #expect(failure.message.contains(words), "\(text): \(failure)")
        }
        #expect(throws: ScenarioError.self) { try Scenario.parse(Data(#"{"families": 5,}"#.utf8)) }
    }

    @Test("valid JSON passes, and every scenario in docs/scenarios parses")
    func validCases() throws {
        for text in [
            "{}", #"{"a": [1, -2.5e+3, 0, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"], "b": {}}"#, " [ ] ",
        ] {
            #expect(syntaxFailure(text) == nil, "\(text): \(String(describing: syntaxFailure(text)))")
        }
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../../docs/scenarios"
        )
        .standardizedFileURL.path
        let files = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".json") }
        #expect(!files.isEmpty)
        for file in files { _ = try Scenario.load(path: folder + "/" + file) }
    }
}
