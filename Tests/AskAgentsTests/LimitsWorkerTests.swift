import AskAgents
import AskBroker
import AskClient
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// The limits worker against a real in-process broker, with raw peers playing the child, guardian and observer.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct LimitsWorkerTests {
    static let stateFile = LimitsStateFile(
        defaults: LimitsState(),
        children: [
            "ok": LimitsState(knownHandles: [phone("+1 (415) 555-0100")]),
            "off": LimitsState(limitsEnabled: false),
            "nosync": LimitsState(contactSyncSetUp: false),
            "inel": LimitsState(eligible: false),
        ]
    )

    /// A broker, a limits worker on `data` and a child peer serving `children` of family f1.
    final class Setup {
        let broker: TestBroker
        let context: ZMQContext
        let data: TempDirectory
        var worker: LimitsWorker?
        let events = Collected<LimitsWorkerEvent>()
        let child: RawPeer

        init(
            children: [String],
            seed: LimitsStateFile? = LimitsWorkerTests.stateFile,
            data: TempDirectory = TempDirectory()
        ) throws {
            broker = try TestBroker()
            context = try ZMQContext()
            self.data = data
            child = try RawPeer(context: context, endpoint: broker.endpoint)
            try startWorker(seed: seed)
            try child.register(role: .child, children.map { "child/\($0)" }, family: "f1")
        }

        func startWorker(seed: LimitsStateFile?, reset: Bool = false) throws {
            var configuration = LimitsWorkerConfiguration()
            configuration.broker = broker.endpoint
            configuration.seed = seed
            configuration.dataDirectory = data.path
            configuration.reset = reset
            configuration.heartbeat = .milliseconds(200)
            let registered = Collected<Int>()
            let events = self.events
            worker = try LimitsWorker(
                configuration: configuration,
                logger: .silent(),
                context: context,
                onRegistered: { registered.append($0) }
            ) { events.append($0) }
            _ = try registered.expect { _ in true }
        }

        func stop() {
            worker?.stop()
            broker.stop()
            data.cleanup()
        }
    }

    @Test func admitsOrRefusesWithEachAskError() throws {
        let setup = try Setup(children: ["ok", "off", "nosync", "inel", "unlisted"])
        defer { setup.stop() }
        let expected: [(String, AskResult.Outcome)] = [
            ("ok", .presented), ("off", .refused(.communicationLimitsNotEnabled)),
            ("nosync", .refused(.contactSyncNotSetup)),
            ("inel", .refused(.notAvailable)), ("unlisted", .presented),
        ]
        for (child, outcome) in expected {
            let result = try setup.child.ask(question([phone("+14155550199")]), child: child)
            #expect(result.outcome == outcome, "child \(child)")
        }
    }

    @Test func answersKnownHandleQueriesWithNormalizedComparison() throws {
        let setup = try Setup(children: ["ok"])
        defer { setup.stop() }
        let asked = [email("Someone@Example.com"), phone("+14155550100"), phone("+14155550101")]
        let id = try setup.child.send(KnownHandlesQuery(child: "ok", handles: asked), from: "child/ok", to: "limits")
        try setup.child.expectAck(id)
        let reply = try setup.child.expectDelivery(kind: KnownHandlesReply.kind).decode(KnownHandlesReply.self)
        #expect(reply.known == [phone("+14155550100")])
    }

    @Test func learnsApprovedHandlesAndKeepsThemAcrossARestart() throws {
        let setup = try Setup(children: ["ok"])
        defer { setup.stop() }
        let guardian = try RawPeer(context: setup.context, endpoint: setup.broker.endpoint)
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        let friend = email("friend@example.com")
        let q = question([friend])
        try setup.child.askAndSend(q, child: "ok")
        _ = try guardian.expectDelivery(kind: GuardianQuestion.kind)
        let answer = try guardian.send(
            GuardianAnswer(questionID: q.id, choiceID: PermissionChoice.approve.id),
            from: "guardian/g1",
            to: "broker"
        )
        try guardian.expectAck(answer)
        _ = try setup.events.expect {
            if case .learnt(let child, let handles) = $0 { return child == "ok" && handles == [friend] }
            return false
        }
        try expectKnown(setup, [email("FRIEND@example.com")], known: [email("FRIEND@example.com")])

        // A denial teaches nothing.
        let stranger = email("stranger@example.com")
        let denied = question([stranger])
        try setup.child.askAndSend(denied, child: "ok")
        _ = try guardian.expectDelivery(kind: GuardianQuestion.kind)
        try guardian.expectAck(
            try guardian.send(
                GuardianAnswer(questionID: denied.id, choiceID: PermissionChoice.decline.id),
                from: "guardian/g1",
                to: "broker"
            )
        )
        _ = try setup.child.expect {
            $0.command == .deliver && $0.kind == AnyPermissionResponse.kind
                && (try? $0.decode(AnyPermissionResponse.self).question.id) == denied.id
        }
        try expectKnown(setup, [stranger], known: [])

        // Restart on the same store with a state file that knows nothing: the store wins.
        setup.worker?.stop()
        try setup.startWorker(seed: LimitsStateFile())
        try expectKnown(setup, [friend, phone("+14155550100")], known: [friend, phone("+14155550100")])

        // --reset seeds again from the file.
        setup.worker?.stop()
        try setup.startWorker(seed: LimitsStateFile(), reset: true)
        try expectKnown(setup, [friend, phone("+14155550100")], known: [])
    }

    @Test func adminChangeFlipsStateMidRun() throws {
        let setup = try Setup(children: ["ok"])
        defer { setup.stop() }
        #expect(try setup.child.ask(question([phone("+14155550111")]), child: "ok").outcome == .presented)
        let observer = try RawPeer(context: setup.context, endpoint: setup.broker.endpoint)
        try observer.register(role: .observer, ["observer/test"])

        try change(setup, observer, LimitsAdminChange(child: "ok", limitsEnabled: false))
        #expect(
            try setup.child.ask(question([phone("+14155550112")]), child: "ok").outcome
                == .refused(.communicationLimitsNotEnabled)
        )

        try change(setup, observer, LimitsAdminChange(child: "ok", limitsEnabled: true, contactSyncSetUp: false))
        #expect(
            try setup.child.ask(question([phone("+14155550113")]), child: "ok").outcome
                == .refused(.contactSyncNotSetup)
        )

        try change(
            setup,
            observer,
            LimitsAdminChange(
                child: "ok",
                contactSyncSetUp: true,
                addKnown: [email("new@example.com")],
                removeKnown: [phone("+14155550100")]
            )
        )
        #expect(try setup.child.ask(question([phone("+14155550114")]), child: "ok").outcome == .presented)
        try expectKnown(setup, [email("NEW@example.com"), phone("+14155550100")], known: [email("NEW@example.com")])
    }

    @Test func aChildCannotChangeItsOwnLimits() throws {
        let setup = try Setup(children: ["off"])
        defer { setup.stop() }
        let id = try setup.child.send(
            LimitsAdminChange(child: "off", limitsEnabled: true),
            from: "child/off",
            to: "limits"
        )
        // The broker refuses it (only observers change limits state); the worker would refuse it too.
        #expect(try setup.child.expect { $0.command == .nack && $0.id == id }.code == ErrorCode.forbidden.rawValue)
        #expect(
            try setup.child.ask(question([phone("+14155550115")]), child: "off").outcome
                == .refused(.communicationLimitsNotEnabled)
        )
        #expect(!setup.events.all.contains { if case .changed = $0 { true } else { false } })
    }

    private func change(_ setup: Setup, _ observer: RawPeer, _ change: LimitsAdminChange) throws {
        let before = setup.events.all.count
        try observer.expectAck(try observer.send(change, from: "observer/test", to: "limits"))
        _ = try setup.events.expect(after: before) {
            if case .changed(let child, _) = $0 { return child == change.child }
            return false
        }
    }

    private func expectKnown(
        _ setup: Setup,
        _ handles: [CommunicationHandle],
        known: [CommunicationHandle],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let id = try setup.child.send(KnownHandlesQuery(child: "ok", handles: handles), from: "child/ok", to: "limits")
        try setup.child.expectAck(id)
        let reply = try setup.child.expectDelivery(kind: KnownHandlesReply.kind).decode(KnownHandlesReply.self)
        #expect(reply.known == known, sourceLocation: sourceLocation)
    }
}
