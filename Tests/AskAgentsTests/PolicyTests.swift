import AskAgents
import AskClient
import AskProtocol
import AskTestSupport
import Foundation
import Testing

@Suite struct PolicyTests {
    // MARK: Seeded randomness

    @Test func seededStreamsAreReproducibleAndIndependent() {
        var a = SeededGenerator(seed: 42, stream: "decide/g1")
        var b = SeededGenerator(seed: 42, stream: "decide/g1")
        var c = SeededGenerator(seed: 42, stream: "decide/g2")
        var d = SeededGenerator(seed: 43, stream: "decide/g1")
        let sa = (0..<100).map { _ in a.next() }
        #expect(sa == (0..<100).map { _ in b.next() })
        #expect(sa != (0..<100).map { _ in c.next() })
        #expect(sa != (0..<100).map { _ in d.next() })
    }

    @Test func probabilityPolicyIsDeterministicPerSeed() {
        let policy = DecisionPolicy.probability(0.5)
        let q = question([phone("+14155550100")])
        func decisions(_ seed: UInt64) -> [Decision] {
            var random = SeededGenerator(seed: seed, stream: "decide/g1")
            return (0..<200).map { _ in policy.decision(for: q, random: &random) }
        }
        #expect(decisions(1) == decisions(1))
        #expect(decisions(1) != decisions(2))
    }

    @Test(arguments: [0.0, 0.1, 0.7, 1.0])
    func probabilityApprovesRoughlyP(p: Double) {
        let policy = DecisionPolicy.probability(p)
        let q = question([phone("+14155550100")])
        var random = SeededGenerator(seed: 99, stream: "decide/g1")
        let draws = 10_000
        let approvals = (0..<draws).filter { _ in policy.decision(for: q, random: &random) == .approve }.count
        // 0.02 is over four standard deviations of the mean at p = 0.5 (0.005): a biased draw fails.
        #expect(abs(Double(approvals) / Double(draws) - p) < 0.02)
    }

    @Test func choicesFollowTheDecision() {
        let q = question([phone("+14155550100")])
        var random = SeededGenerator(seed: 1)
        #expect(DecisionPolicy.approveAll.choice(for: q, random: &random) == .approve)
        #expect(DecisionPolicy.denyAll.choice(for: q, random: &random) == .decline)
        #expect(DecisionPolicy.never.choice(for: q, random: &random) == nil)
    }

    // MARK: Rules

    static let rulesJSON = """
        {"rules": [
          {"decision": "deny", "kind": "phoneNumber", "prefix": "+1900"},
          {"decision": "approve", "kind": "emailAddress", "regex": "[a-z.]+@school\\\\.example"},
          {"decision": "approve", "topic": "communication", "action": "videoCall"},
          {"decision": "never", "kind": "custom"},
          {"decision": "approve", "topic": "significantAppUpdate"}
        ], "default": "deny"}
        """

    @Test func firstMatchingRuleDecides() throws {
        let policy = try DecisionPolicy.parseRules(Data(Self.rulesJSON.utf8))
        var random = SeededGenerator(seed: 1)
        func decide(_ q: AnyPermissionQuestion) -> Decision { policy.decision(for: q, random: &random) }

        #expect(decide(question([email("teacher@school.example")])) == .approve)
        #expect(
            decide(question([email("teacher@school.example"), email("x@elsewhere.example")])) == .deny,
            "every handle must match"
        )
        #expect(
            decide(question([email("TEACHER@school.example")])) == .deny,
            "the regex is case-sensitive and anchored"
        )
        #expect(decide(question([email("teacher@school.example.evil")])) == .deny, "anchored at the end")
        #expect(decide(question([phone("+19005550100")])) == .deny)
        #expect(decide(question([phone("+14155550100")])) == .deny, "no rule matches: default")
        let video = AnyPermissionQuestion(
            topic: .communication(
                CommunicationTopic(
                    personInformation: [.init(handle: phone("+19005550100"))],
                    actions: [.videoCall]
                )
            )
        )
        #expect(decide(video) == .deny, "the first matching rule wins over a later approve")
        let videoOK = AnyPermissionQuestion(
            topic: .communication(
                CommunicationTopic(
                    personInformation: [.init(handle: phone("+14155550100"))],
                    actions: [.message, .videoCall]
                )
            )
        )
        #expect(decide(videoOK) == .approve)
        #expect(decide(question([CommunicationHandle(value: "gamer42", kind: .custom)])) == .never)
        #expect(
            decide(AnyPermissionQuestion(topic: .significantAppUpdate(SignificantAppUpdateTopic(description: "v2"))))
                == .approve
        )
    }

    @Test func rulesFileMayBeAPlainListWithDefaultDeny() throws {
        let policy = try DecisionPolicy.parseRules(Data(#"[{"decision": "approve", "prefix": "+44"}]"#.utf8))
        var random = SeededGenerator(seed: 1)
        #expect(policy.decision(for: question([phone("+447700900123")]), random: &random) == .approve)
        #expect(policy.decision(for: question([phone("+14155550100")]), random: &random) == .deny)
    }

    @Test(arguments: [
        ("{", "not a rules file"),
        (#"{"rules": [{"decision": "maybe"}]}"#, "rules[0].decision"),
        (
            #"{"rules": [{"decision": "approve", "regex": "("}]}"#,
            "rule 1: rule regex '(' is not a valid regular expression"
        ),
        (#"{"rules": [{"decision": "approve", "topic": "weather"}]}"#, "rule 1: rule topic 'weather'"),
        (#"{"rules": [{"decision": "approve", "kind": "fax"}]}"#, "rules[0].kind"),
    ])
    func badRulesGiveAClearError(json: String, expected: String) {
        #expect {
            _ = try DecisionPolicy.parseRules(Data(json.utf8), source: "r.json")
        } throws: { error in
            "\(error)".contains(expected) && "\(error)".hasPrefix("r.json")
        }
    }

    @Test func policyTexts() throws {
        #expect("\(try DecisionPolicy.parse("approve"))" == "approve")
        #expect("\(try DecisionPolicy.parse("deny"))" == "deny")
        #expect("\(try DecisionPolicy.parse("never"))" == "never")
        #expect("\(try DecisionPolicy.parse("probability:0.7"))" == "probability:0.7")
        for bad in ["maybe", "probability:1.5", "probability:x", "rules:", "rules:/nonexistent/rules.json"] {
            #expect(throws: AgentConfigurationError.self, "\(bad)") { try DecisionPolicy.parse(bad) }
        }
    }

    // MARK: Think time

    @Test func thinkTimeTexts() throws {
        #expect(try ThinkTime.parse("fixed:200ms") == .fixed(.milliseconds(200)))
        #expect(try ThinkTime.parse("uniform:50ms-2s") == .uniform(.milliseconds(50), .seconds(2)))
        #expect(try ThinkTime.parse("exponential:300ms") == .exponential(mean: .milliseconds(300)))
        #expect(try ThinkTime.parse("1.5s") == .fixed(.milliseconds(1500)))
        for bad in ["uniform:2s-1s", "uniform:1s", "fixed:abc", "gaussian:1s", "exponential:-1s"] {
            #expect(throws: AgentConfigurationError.self, "\(bad)") { try ThinkTime.parse(bad) }
        }
    }

    @Test func uniformThinkTimeStaysInRangeWithTheRightMean() {
        let think = ThinkTime.uniform(.milliseconds(50), .milliseconds(150))
        var random = SeededGenerator(seed: 5, stream: "think/g1")
        let samples = (0..<10_000).map { _ in think.sample(using: &random) }
        #expect(samples.allSatisfy { $0 >= .milliseconds(50) && $0 <= .milliseconds(150) })
        let mean = samples.map(\.seconds).reduce(0, +) / Double(samples.count)
        // Standard error of the mean: 29ms / 100 = 0.3ms.
        #expect(abs(mean - 0.100) < 0.002)
    }

    @Test func exponentialThinkTimeHasTheRightMean() {
        let think = ThinkTime.exponential(mean: .milliseconds(300))
        var random = SeededGenerator(seed: 5, stream: "think/g1")
        let samples = (0..<20_000).map { _ in think.sample(using: &random).seconds }
        let mean = samples.reduce(0, +) / Double(samples.count)
        // Standard error: 300ms / sqrt(20000) = 2.1ms.
        #expect(abs(mean - 0.300) < 0.010)
        #expect(samples.allSatisfy { $0 >= 0 })
        // The median of an exponential is mean × ln 2.
        let median = samples.sorted()[samples.count / 2]
        #expect(abs(median - 0.300 * log(2.0)) < 0.010)
    }

    @Test func fixedThinkTimeDrawsNothing() {
        var random = SeededGenerator(seed: 5)
        #expect(ThinkTime.fixed(.milliseconds(200)).sample(using: &random) == .milliseconds(200))
        var untouched = SeededGenerator(seed: 5)
        #expect(random.next() == untouched.next())
    }

    // MARK: Offline periods

    @Test func offlineScheduleWindows() throws {
        let schedule = try OfflineSchedule(every: .seconds(10), duration: .seconds(2), phase: .seconds(1))
        #expect(schedule.offline(at: .milliseconds(500)) == nil)
        #expect(schedule.offline(at: .seconds(1)) == .seconds(2))
        #expect(schedule.offline(at: .milliseconds(2500)) == .milliseconds(500))
        #expect(schedule.offline(at: .seconds(3)) == nil)
        #expect(schedule.offline(at: .milliseconds(11_500)) == .milliseconds(1500))
        #expect(throws: AgentConfigurationError.self) { try OfflineSchedule(every: .seconds(1), duration: .seconds(1)) }
    }

    // MARK: Roster

    @Test func rosterFileFlagsAndGeneration() throws {
        let file =
            #"[{"id": "mum", "family": "smith"}, {"id": "dad", "family": "smith", "policy": "deny", "think": "fixed:1s"}]"#
        let entries = try Roster.parseFile(Data(file.utf8))
        #expect(
            entries == [
                GuardianEntry(id: "mum", family: "smith"),
                GuardianEntry(id: "dad", family: "smith", policy: "deny", think: "fixed:1s"),
            ]
        )
        #expect(try Roster.parseGuardian("g1@f1") == GuardianEntry(id: "g1", family: "f1"))
        let generated = try Roster.generate(families: 2, guardiansPerFamily: 3, idPrefix: "p")
        #expect(generated.count == 6)
        #expect(generated.first == GuardianEntry(id: "p1-1", family: "f1"))
        #expect(generated.last == GuardianEntry(id: "p2-3", family: "f2"))
        let setups = try GuardianSetup.make(entries, policy: .approveAll, think: .fixed(.zero), seed: 1)
        #expect("\(setups[0].policy)" == "approve")
        #expect("\(setups[1].policy)" == "deny")
        #expect(setups[1].think == .fixed(.seconds(1)))
    }

    @Test(arguments: [
        ("not json", "not a roster"),
        (#"{"id": "g1", "family": "f1"}"#, "not a roster"),
        (#"[{"id": "g1"}]"#, "missing field '[0].family'"),
        (#"[]"#, "no guardians"),
        (#"[{"id": "g 1", "family": "f1"}]"#, "guardian 1: id 'g 1' must be"),
        (#"[{"id": "g1", "family": ""}]"#, "guardian 1: family '' must be"),
        (#"[{"id": "g1", "family": "f1"}, {"id": "g1", "family": "f2"}]"#, "guardian 2: id 'g1' is listed twice"),
    ])
    func badRostersGiveAClearError(json: String, expected: String) {
        #expect {
            _ = try Roster.parseFile(Data(json.utf8), source: "roster.json")
        } throws: { error in
            "\(error)".contains(expected)
        }
    }

    @Test func badGuardianFlagsAndGeneration() {
        #expect(throws: AgentConfigurationError.self) { try Roster.parseGuardian("g1") }
        #expect(throws: AgentConfigurationError.self) { try Roster.parseGuardian("g1@f1@x") }
        #expect(throws: AgentConfigurationError.self) { try Roster.parseGuardian("@f1") }
        #expect(throws: AgentConfigurationError.self) {
            try Roster.generate(families: 0, guardiansPerFamily: 1, idPrefix: "g")
        }
        #expect(throws: AgentConfigurationError.self) {
            try Roster.generate(families: 1, guardiansPerFamily: 1, idPrefix: "bad/")
        }
        #expect(throws: AgentConfigurationError.self) {
            try GuardianSetup.make(
                [GuardianEntry(id: "g1", family: "f1", policy: "maybe")],
                policy: .approveAll,
                think: .fixed(.zero),
                seed: 1
            )
        }
    }

    // MARK: Limits state file and admission

    @Test func limitsStateFileWithDefaults() throws {
        let json = """
            {"defaults": {"contactSyncSetUp": false},
             "children": {"c1": {"knownHandles": [{"kind": "phoneNumber", "value": "+1 415 555 0100"}]},
                          "c2": {"limitsEnabled": false, "contactSyncSetUp": true}}}
            """
        let file = try LimitsStateFile.parse(Data(json.utf8))
        #expect(file.defaults == LimitsState(contactSyncSetUp: false))
        #expect(file.state(of: "c1").contactSyncSetUp == false, "a child entry inherits the defaults")
        #expect(file.state(of: "c1").isKnownHandle(phone("+14155550100")))
        #expect(file.state(of: "c2") == LimitsState(limitsEnabled: false, contactSyncSetUp: true))
        #expect(file.state(of: "unlisted") == file.defaults)
        #expect(try LimitsStateFile.parse(Data("{}".utf8)) == LimitsStateFile())
    }

    @Test(arguments: [
        ("[]", "not a limits state file"),
        (#"{"children": {"bad id": {}}}"#, "child id 'bad id'"),
        (#"{"children": {"c1": {"eligible": "yes"}}}"#, "wrong type at 'children.c1.eligible'"),
        (#"{"children": {"c1": {"knownHandles": [{"kind": "phoneNumber", "value": " "}]}}}"#, "empty value"),
    ])
    func badLimitsStateFilesGiveAClearError(json: String, expected: String) {
        #expect {
            _ = try LimitsStateFile.parse(Data(json.utf8), source: "state.json")
        } throws: { error in
            "\(error)".contains(expected) && "\(error)".hasPrefix("state.json")
        }
    }

    @Test func admissionForEachState() {
        let q = question([phone("+14155550100")])
        #expect(LimitsWorker.admission(of: q, state: LimitsState()) == nil)
        #expect(
            LimitsWorker.admission(of: q, state: LimitsState(limitsEnabled: false)) == .communicationLimitsNotEnabled
        )
        #expect(LimitsWorker.admission(of: q, state: LimitsState(contactSyncSetUp: false)) == .contactSyncNotSetup)
        #expect(LimitsWorker.admission(of: q, state: LimitsState(eligible: false)) == .notAvailable)
        #expect(
            LimitsWorker.admission(
                of: q,
                state: LimitsState(limitsEnabled: false, contactSyncSetUp: false, eligible: false)
            ) == .notAvailable
        )
        let empty = AnyPermissionQuestion(topic: .communication(CommunicationTopic(personInformation: [])))
        guard case .invalidQuestion(let reason)? = LimitsWorker.admission(of: empty, state: LimitsState()) else {
            Issue.record("a question without people must be invalid")
            return
        }
        #expect(reason.code == .missing)
        let past = question([phone("+14155550100")], expiresIn: -1)
        guard
            case .invalidQuestion(let why)? = LimitsWorker.admission(of: past, state: LimitsState(limitsEnabled: false))
        else {
            Issue.record("an expired question must be invalid before the state is looked at")
            return
        }
        #expect(why.code == .inPast)
    }
}
