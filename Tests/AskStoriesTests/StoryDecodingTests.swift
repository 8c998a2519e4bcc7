import AskTestKit
import AskModel
import AskStories
import Foundation
import Testing

@Suite("story files: decoding and checks")
struct StoryDecodingTests {
    static let minimal = """
        {"families": [{"id": "smith", "children": ["c1"], "guardians": ["mum", "dad"]}],
         "steps": [{"ask": {"child": "c1", "question": "q1", "handles": [{"phone": "+15550100"}]}}]}
        """

    func parse(_ text: String) throws -> Story {
        try Story.parse(Data(text.utf8), file: "story.json", defaultName: "story")
    }

    /// The error a story text gets, as the command prints it.
    func error(_ text: String) -> String {
        do {
            _ = try parse(text)
            return "no error"
        } catch {
            return "\(error)"
        }
    }

    /// A story of the minimal one's families with these steps.
    func steps(_ steps: String) -> String {
        """
        {"families": [{"id": "smith", "children": ["c1"], "guardians": ["mum", "dad"]}, {"id": "jones", "children": ["c2"]}],
         "steps": [{"ask": {"child": "c1", "question": "q1", "handles": [{"phone": "+15550100"}]}}, \(steps)]}
        """
    }

    @Test("a minimal story: its name from the file, defaults for the rest")
    func minimalStory() throws {
        let story = try parse(Self.minimal)
        #expect(story.name == "story")
        #expect(story.children == ["c1": "smith"])
        #expect(story.guardians == ["mum": "smith", "dad": "smith"])
        #expect(story.broker == BrokerSettings())
        #expect(story.askTimeout == .seconds(10))
        guard case .ask(let ask, let expect) = story.steps[0].action else {
            Issue.record("not an ask: \(story.steps[0])")
            return
        }
        #expect(expect == .presented)
        #expect(
            ask.topic
                == .communication(
                    handles: [CommunicationHandle(value: "+15550100", kind: .phoneNumber)],
                    actions: [.message]
                )
        )
    }

    @Test("every step kind decodes")
    func everyStep() throws {
        let story = try parse(
            steps(
                """
                {"name": "send it", "send": "q1"},
                {"cancel": "q1", "expect": "already-sent"},
                {"expectQuestion": {"guardian": "mum", "question": "q1", "within": "5s"}},
                {"expectNoQuestion": {"guardian": "dad", "question": "q1", "during": "200ms"}},
                {"answer": {"guardian": "mum", "question": "q1", "choice": "askrelay.approve"}},
                {"answer": {"guardian": "dad", "question": "q1", "choice": "askrelay.decline"}, "expect": "already-closed"},
                {"expectResponse": {"question": "q1", "choice": "askrelay.approve", "within": "5s"}},
                {"expectNoResponse": {"question": "q1", "during": "1s"}},
                {"expectClosed": {"guardian": "dad", "question": "q1", "reason": "answered", "answeredBy": "mum", "within": "5s"}},
                {"knownHandles": {"child": "c1", "handles": [{"email": "a@b.example"}]}, "expect": []},
                {"limits": {"child": "c2", "limitsEnabled": false, "addKnown": [{"custom": "x"}]}},
                {"fault": {"process": "broker", "action": "kill"}},
                {"fault": {"process": "broker", "action": "restart"}}
                """
            )
        )
        #expect(
            story.steps.map(\.action.keyword) == [
                "ask", "send", "cancel", "expectQuestion", "expectNoQuestion", "answer", "answer", "expectResponse",
                "expectNoResponse", "expectClosed", "knownHandles", "limits", "fault", "fault",
            ]
        )
        #expect(story.steps[1].label == "step 1 \"send it\" (send)")
        #expect(story.steps[2].action == .cancel(question: "q1", expect: .refused("already-sent")))
        #expect(story.steps[12].action == .fault(process: .broker, action: .kill))
        #expect(
            story.steps[11].action
                == .limits(
                    LimitsAdminChange(
                        child: "c2",
                        limitsEnabled: false,
                        addKnown: [CommunicationHandle(value: "x", kind: .custom)]
                    )
                )
        )
    }

    @Test("an ask with every field: app update, choices, default, expiry in the past, an AskError expected")
    func fullAsk() throws {
        let story = try parse(
            steps(
                """
                {"ask": {"child": "c2", "question": "u1", "topic": "significantAppUpdate", "description": "v2",
                         "choices": [{"id": "yes", "title": "Yes", "answer": "approval"}, {"id": "no", "answer": "denial"}],
                         "defaultChoice": "no", "expiresIn": "-1s"}, "expect": "invalidQuestion"}
                """
            )
        )
        guard case .ask(let ask, let expect) = story.steps[1].action else {
            Issue.record("not an ask")
            return
        }
        #expect(expect == .refused("invalidQuestion"))
        #expect(ask.topic == .significantAppUpdate(description: "v2"))
        #expect(ask.choices?.map(\.id) == ["yes", "no"])
        #expect(ask.choices?[1].title == "no")
        #expect(ask.defaultChoice == "no")
        #expect(ask.expiresIn == .seconds(-1))
    }

    @Test("a bad value names the file, the field and what is expected")
    func badExpect() {
        #expect(
            error(steps(#"{"send": "q1"}, {"ask": {"child": "c1", "question": "q2", "handles": []}, "expect": "x"}"#))
                == "story.json: steps[2].expect: unknown value \"x\"; expected one of presented, "
                + "communicationLimitsNotEnabled, contactSyncNotSetup, invalidQuestion, notAvailable, systemError, unknown"
        )
    }

    @Test("a control character in a bad value or a name is shown escaped in the error, on one line")
    func controlCharactersInErrors() {
        #expect(
            error(steps(#"{"send": "q1", "expect": "no\u0007\nway"}"#)).hasPrefix(
                #"story.json: steps[1].expect: unknown value "no\u{7}\nway"; expected one of accepted, "#
            )
        )
    }

    @Test(
        "every kind of mistake is refused with its field",
        arguments: [
            (#"{"send": "q9"}"#, "steps[1].send: no earlier ask step names question \"q9\" (asked so far: q1)"),
            (#"{"send": "q1", "cancel": "q1"}"#, "steps[1]: a step does one thing; this one has cancel and send"),
            (#"{"wait": "1s"}"#, "steps[1]: a step needs one of ask, send, cancel"),
            (
                #"{"send": "q1", "expect": "nope"}"#,
                "steps[1].expect: unknown value \"nope\"; expected one of accepted, "
            ),
            (
                #"{"answer": {"guardian": "gran", "question": "q1", "choice": "x"}}"#,
                "steps[1].answer.guardian: \"gran\" is not a guardian of any family (dad, mum)"
            ),
            (#"{"answer": {"guardian": "mum", "question": "q1"}}"#, "steps[1].answer.choice: is required"),
            (
                #"{"expectResponse": {"question": "q1", "choice": "maybe", "within": "1s"}}"#,
                "steps[1].expectResponse.choice: unknown value \"maybe\"; expected one of askrelay.approve, askrelay.decline"
            ),
            (
                #"{"expectResponse": {"question": "q1", "within": "soon"}}"#,
                "steps[1].expectResponse.within: expected a duration such as"
            ),
            (
                #"{"expectClosed": {"guardian": "mum", "question": "q1", "reason": "cancelled", "within": "1s"}}"#,
                "steps[1].expectClosed.reason: unknown value \"cancelled\"; expected one of answered, expired"
            ),
            (
                #"{"fault": {"process": "parent", "action": "kill"}}"#,
                "steps[1].fault.process: unknown value \"parent\"; expected one of broker, limits"
            ),
            (
                #"{"fault": {"process": "broker", "action": "pause"}}"#,
                "steps[1].fault.action: unknown value \"pause\"; expected one of kill, stop, cont, term, restart"
            ),
            (
                #"{"limits": {"child": "c1", "limitsEnabled": "no"}}"#,
                "steps[1].limits.limitsEnabled: expected true or false, found a string"
            ),
            (#"{"limits": {"child": "c1", "colour": "red"}}"#, "steps[1].limits.colour: unknown field; known: child, "),
            (
                #"{"knownHandles": {"child": "c1", "handles": [{"fax": "1"}]}, "expect": []}"#,
                "steps[1].knownHandles.handles[0].fax: unknown field; known: phone, email, custom"
            ),
            (#"{"knownHandles": {"child": "c1", "handles": []}}"#, "steps[1].expect: is required"),
            (
                #"{"ask": {"child": "c2", "question": "q1", "handles": []}}"#,
                "steps[1].ask.question: \"q1\" was asked by c1"
            ),
            (
                #"{"ask": {"child": "c1", "question": "q2", "topic": "weather"}}"#,
                "steps[1].ask.topic: unknown value \"weather\""
            ),
            (
                #"{"ask": {"child": "c1", "question": "q2", "handles": [], "actions": ["wave"]}}"#,
                "steps[1].ask.actions[0]: unknown value \"wave\""
            ),
            (
                #"{"ask": {"child": "c1", "question": "q2", "handles": [], "expiresIn": "-x"}}"#,
                "steps[1].ask.expiresIn: expected a duration"
            ),
            (
                #"{"expectClosed": {"guardian": "mum", "question": "q1", "reason": "answered", "within": "1s", "by": "dad"}}"#,
                "steps[1].expectClosed.by: unknown field"
            ),
        ]
    )
    func mistakes(step: String, message: String) {
        let got = error(steps(step))
        #expect(got.hasPrefix("story.json: " + message), "got: \(got)")
    }

    @Test(
        "top-level mistakes",
        arguments: [
            ("{}", "story.json: families: is required"),
            (#"{"families": [], "steps": []}"#, "story.json: families: no family has a child"),
            (
                #"{"families": [{"id": "f", "children": ["c1"]}], "steps": []}"#,
                "story.json: steps: a story needs at least one step"
            ),
            (
                #"{"families": [{"id": "f", "children": ["c1", "c1"]}], "steps": []}"#,
                "story.json: families[0].children[1]: child \"c1\" is listed twice"
            ),
            (
                #"{"families": [{"id": "f g", "children": ["c1"]}], "steps": []}"#,
                "story.json: families[0].id: \"f g\" is not an id"
            ),
            (
                #"{"families": [{"id": "f", "children": ["c1"]}], "limits": {"c9": {}}, "steps": []}"#,
                "story.json: limits.c9: \"c9\" is not a child of any family (c1)"
            ),
            (
                #"{"families": [{"id": "f", "children": ["c1"]}], "broker": {"durability": "fast"}, "steps": []}"#,
                "story.json: broker.durability: unknown value \"fast\"; expected one of strict, batch, off"
            ),
            (
                #"{"families": [{"id": "f", "children": ["c1"]}], "title": "x", "steps": []}"#,
                "story.json: title: unknown field; known: name, description"
            ),
            (
                #"{"families": [{"id": "f", "children": ["c1"]}],}"#,
                "story.json: not valid JSON at line 1, column 48: expected a field name in double quotes after ','"
            ),
            ("[1]", "story.json: expected an object, found an array"),
        ]
    )
    func topLevel(text: String, message: String) {
        let got = error(text)
        #expect(got.hasPrefix(message), "got: \(got)")
    }

    @Test("a folder means its *.json files, sorted; a missing path is named")
    func folders() throws {
        let scratch = TempDirectory(prefix: "stories")
        defer { scratch.cleanup() }
        let folder = scratch.url
        for name in ["b.json", "a.json", "notes.txt"] {
            try Data(Self.minimal.utf8).write(to: folder.appendingPathComponent(name))
        }
        #expect(
            try Story.files([folder.path]) == [
                folder.appendingPathComponent("a.json").path, folder.appendingPathComponent("b.json").path,
            ]
        )
        #expect(throws: StoryError(file: "/no/such", field: "", "no such file or folder")) {
            try Story.files(["/no/such"])
        }
        #expect(try Story.load(path: folder.appendingPathComponent("a.json").path).name == "a")
    }

    @Test("an answer may expect timed-out, as send and cancel may: GuardianCenter's answer times out")
    func answerTimedOut() throws {
        let story = try parse(
            steps(
                #"{"send": "q1"}, {"answer": {"guardian": "mum", "question": "q1", "choice": "askrelay.approve"}, "expect": "timed-out"}"#
            )
        )
        #expect(
            story.steps[2].action
                == .answer(guardian: "mum", question: "q1", choice: "askrelay.approve", expect: .refused("timed-out"))
        )
    }

    @Test("network steps decode: each fault, its direction, delay, jitter and duration, on a child, a guardian, limits")
    func networkSteps() throws {
        let story = try parse(
            steps(
                """
                {"network": {"on": "mum", "fault": "partition", "direction": "toBroker"}},
                {"network": {"on": "dad", "fault": "partition", "for": "2s"}},
                {"network": {"on": "limits", "fault": "delay", "delay": "100ms"}},
                {"network": {"on": "c1", "fault": "delay", "delay": "50ms", "jitter": "10ms", "direction": "fromBroker"}},
                {"network": {"on": "guardian/mum", "fault": "stall", "for": "500ms"}},
                {"name": "cut", "network": {"on": "child/c2", "fault": "reset"}},
                {"network": {"on": "mum", "fault": "heal"}}
                """
            )
        )
        #expect(story.usesLinks)
        #expect(
            story.steps.dropFirst().map(\.action) == [
                .network(on: .guardian("mum"), .fault(.partition(.toBroker), for: nil)),
                .network(on: .guardian("dad"), .fault(.partition(.both), for: .seconds(2))),
                .network(on: .limits, .fault(.delay(.milliseconds(100), jitter: .zero, .both), for: nil)),
                .network(
                    on: .child("c1"),
                    .fault(.delay(.milliseconds(50), jitter: .milliseconds(10), .fromBroker), for: nil)
                ),
                .network(on: .guardian("mum"), .fault(.stall, for: .milliseconds(500))),
                .network(on: .child("c2"), .reset),
                .network(on: .guardian("mum"), .heal),
            ]
        )
        #expect(story.steps[6].label == "step 6 \"cut\" (network)")
        #expect(try parse(Self.minimal).usesLinks == false)
    }

    @Test("answerTimeout: GuardianCenter's answer timeout, 10 s unless the story says")
    func answerTimeout() throws {
        #expect(try parse(Self.minimal).answerTimeout == .seconds(10))
        let story = try parse(
            """
            {"families": [{"id": "f", "children": ["c1"]}], "answerTimeout": "500ms",
             "steps": [{"ask": {"child": "c1", "question": "q1", "handles": []}}]}
            """
        )
        #expect(story.answerTimeout == .milliseconds(500))
        #expect(
            error(#"{"families": [{"id": "f", "children": ["c1"]}], "answerTimeout": "0s", "steps": [{"send": "q1"}]}"#)
                == "story.json: answerTimeout: must be longer than 0"
        )
    }

    @Test(
        "a bad network step is refused with its field",
        arguments: [
            (
                #"{"network": {"on": "gran", "fault": "partition"}}"#,
                "steps[1].network.on: \"gran\" is not a child, a guardian or limits (known: limits, c1, c2, dad, mum)"
            ),
            (
                #"{"network": {"on": "broker", "fault": "partition"}}"#,
                "steps[1].network.on: \"broker\" is not a child, a guardian or limits"
            ),
            (
                #"{"network": {"on": "child/mum", "fault": "reset"}}"#,
                "steps[1].network.on: \"mum\" is not a child of any family (c1, c2)"
            ),
            (
                #"{"network": {"on": "guardian/c1", "fault": "reset"}}"#,
                "steps[1].network.on: \"c1\" is not a guardian of any family (dad, mum)"
            ),
            (#"{"network": {"fault": "partition"}}"#, "steps[1].network.on: is required"),
            (#"{"network": {"on": "mum"}}"#, "steps[1].network.fault: is required"),
            (
                #"{"network": {"on": "mum", "fault": "drop"}}"#,
                "steps[1].network.fault: unknown value \"drop\"; expected one of partition, delay, stall, reset, heal"
            ),
            (
                #"{"network": {"on": "mum", "fault": "partition", "direction": "up"}}"#,
                "steps[1].network.direction: unknown value \"up\"; expected one of toBroker, fromBroker, both"
            ),
            (
                #"{"network": {"on": "mum", "fault": "reset", "direction": "toBroker"}}"#,
                "steps[1].network.direction: a reset has no direction; only partition and delay have one"
            ),
            (
                #"{"network": {"on": "mum", "fault": "partition", "delay": "1s"}}"#,
                "steps[1].network.delay: a partition has no delay; only a delay has one"
            ),
            (
                #"{"network": {"on": "mum", "fault": "heal", "for": "1s"}}"#,
                "steps[1].network.for: a heal has no for; only partition, delay and stall have one"
            ),
            (#"{"network": {"on": "limits", "fault": "delay"}}"#, "steps[1].network.delay: is required"),
            (
                #"{"network": {"on": "limits", "fault": "delay", "delay": "fast"}}"#,
                "steps[1].network.delay: expected a duration such as"
            ),
            (
                #"{"network": {"on": "limits", "fault": "delay", "delay": "0ms"}}"#,
                "steps[1].network.delay: must be longer than 0 and at most 1m"
            ),
            (
                #"{"network": {"on": "limits", "fault": "delay", "delay": "2m"}}"#,
                "steps[1].network.delay: must be longer than 0 and at most 1m"
            ),
            (
                #"{"network": {"on": "limits", "fault": "delay", "delay": "1s", "jitter": "61s"}}"#,
                "steps[1].network.jitter: must be at most 1m"
            ),
            (
                #"{"network": {"on": "mum", "fault": "stall", "for": "0s"}}"#,
                "steps[1].network.for: must be longer than 0 and at most 1h"
            ),
            (
                #"{"network": {"on": "mum", "fault": "partition", "loss": 0.5}}"#,
                "steps[1].network.loss: unknown field; known: on, fault, direction, delay, jitter, for"
            ),
            (#"{"network": "mum"}"#, "steps[1].network: expected an object, found a string"),
        ]
    )
    func badNetworkSteps(step: String, message: String) {
        let got = error(steps(step))
        #expect(got.hasPrefix("story.json: " + message), "got: \(got)")
    }

    @Test("an id that names two processes (a child and a guardian, or limits) must be spelled child/ or guardian/")
    func ambiguousNetworkTarget() throws {
        func story(_ on: String) -> String {
            """
            {"families": [{"id": "f", "children": ["sam", "limits"], "guardians": ["sam"]}],
             "steps": [{"network": {"on": "\(on)", "fault": "reset"}}]}
            """
        }
        #expect(
            error(story("sam"))
                == "story.json: steps[0].network.on: \"sam\" names more than one process; say \"child/sam\" or \"guardian/sam\""
        )
        #expect(
            error(story("limits"))
                == "story.json: steps[0].network.on: \"limits\" names more than one process; "
                + "say \"limits\" (the limits worker) or \"child/limits\""
        )
        #expect(try parse(story("guardian/sam")).steps[0].action == .network(on: .guardian("sam"), .reset))
        #expect(try parse(story("child/limits")).steps[0].action == .network(on: .child("limits"), .reset))
    }
}
