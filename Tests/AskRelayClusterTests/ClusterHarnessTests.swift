import AskTestKit
import AskClient
import AskModel
import AskProtocol
import AskRelayCluster
import AskRelayProcesses
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The harness itself: start and stop, endpoints, CURVE, limits administration, fault control, cleanup.
@Suite("AskRelayCluster harness")
struct ClusterHarnessTests {
    @Test("starts broker and limits on an OS-picked port, stops them and removes its folder")
    func startAndStop() async throws {
        let cluster = try await AskRelayCluster.start()
        #expect(cluster.endpoint.hasPrefix("tcp://127.0.0.1:"))
        #expect(!cluster.endpoint.hasSuffix(":*"))
        #expect(cluster.broker.isRunning && cluster.limits.isRunning)
        #expect(cluster.limits.readyLine?.hasPrefix("ready id=limits-1") == true)
        #expect(cluster.families.map(\.id) == ["f1"])
        #expect(cluster.children.map(\.id) == ["c1-1"])
        #expect(cluster.guardians.map(\.id) == ["g1-1", "g1-2"])
        let folder = cluster.folder
        #expect(FileManager.default.fileExists(atPath: folder + "/broker.log"))
        await cluster.shutdown()
        #expect(!cluster.broker.isRunning && !cluster.limits.isRunning)
        #expect(cluster.broker.exitStatus == .exited(0))
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    @Test("a missing executable is one clear error naming the folder and the fix")
    func missingExecutable() throws {
        let scratch = TempDirectory(prefix: "askrelay-empty")
        defer { scratch.cleanup() }
        let empty = scratch.path
        var options = AskRelayCluster.Options()
        options.binDirectory = empty
        let error = #expect(throws: ClusterError.self) { try AskRelayCluster(options) }
        #expect(
            error?.description
                == "askrelay-broker not found in \(empty); run `swift build` in the AskRelay checkout (a dependent "
                + "package's own build does not build the askrelay executables), or set ASKRELAY_BIN_DIR to the folder "
                + "holding them (that checkout's .build/debug)"
        )
    }

    @Test("limits administration with CURVE over ipc: the change is stored when the call returns")
    func limitsAdminWithCurve() async throws {
        let cluster = try await AskRelayCluster.start(.init(curve: true, transport: .ipc))
        defer { cluster.stop() }
        #expect(cluster.endpoint == "ipc://\(cluster.folder)/broker.ipc")
        let handle = CommunicationHandle(value: "+15550100", kind: .phoneNumber)
        #expect(try cluster.limitsState(of: "c1-1").limitsEnabled)
        try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", limitsEnabled: false, addKnown: [handle]))
        let state = try cluster.limitsState(of: "c1-1")
        #expect(!state.limitsEnabled)
        #expect(state.isKnownHandle(handle))
        try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", limitsEnabled: true, removeKnown: [handle]))
        #expect(try cluster.limitsState(of: "c1-1") == LimitsState())
    }

    @Test("an admin change for an id that is not valid is refused at once, naming the id")
    func invalidAdminChange() async throws {
        let cluster = try await AskRelayCluster.start()
        defer { cluster.stop() }
        let error = await #expect(throws: ClusterError.self) {
            try await cluster.changeLimits(LimitsAdminChange(child: "not valid!", eligible: false))
        }
        #expect(
            error?.description
                == "limits.admin: 'not valid!' is not a valid child id (1-64 characters of A-Z a-z 0-9 . _ -)"
        )
    }

    @Test("advanceClock: refused without drivenClock; with it the broker's question time and cluster.clock move")
    func drivenClock() async throws {
        let real = try await AskRelayCluster.start()
        defer { real.stop() }
        #expect(real.clock == nil)
        let refusal = await #expect(throws: ClusterError.self) { try await real.advanceClock(by: .seconds(1)) }
        #expect(refusal?.description.contains("drivenClock") == true)

        var options = AskRelayCluster.Options(curve: true)
        options.drivenClock = true
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        let clock = try #require(cluster.clock)
        try await cluster.advanceClock(by: .seconds(7200))
        #expect(clock.elapsed == .seconds(7200))
        #expect(cluster.broker.log.contains("clock advanced"))
        // The cluster's center checks an expiration at the driven time: an hour after the real time is past.
        let app = try cluster.makeAskCenter()
        var question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
        question.expirationDate = Date().addingTimeInterval(3600)
        let error = await #expect(throws: AskError.self) { try await app.child("c1-1").ask(question) }
        #expect(error?.caseName == "invalidQuestion", "\(String(describing: error))")
        await app.stop()
    }

    @Test("an admin change sent while no limits worker is registered is applied once one registers")
    func adminChangeWhileLimitsIsDown() async throws {
        let cluster = try await AskRelayCluster.start()
        defer { cluster.stop() }
        // SIGTERM: the worker says BYE, so the broker knows at once that no limits worker is alive and parks
        // the change (with a journal it used to be left in the journal for good).
        #expect(try await cluster.run { try cluster.limits.terminate() } == .exited(0))
        async let changed: Void = cluster.changeLimits(LimitsAdminChange(child: "c1-1", contactSyncSetUp: false))
        try await cluster.run { try cluster.limits.restart() }
        try await changed
        #expect(try !cluster.limitsState(of: "c1-1").contactSyncSetUp)
    }

    @Test("kill -9, restart on the same endpoint and journal, SIGTERM exits 0, SIGSTOP/SIGCONT")
    func faultControl() async throws {
        let cluster = try await AskRelayCluster.start()
        defer { cluster.stop() }
        let firstPID = cluster.broker.pid
        let status = try await cluster.run { try cluster.broker.kill() }
        #expect(status == .signaled(SIGKILL))
        let line = try await cluster.run { try cluster.broker.restart() }
        #expect(line == "ready endpoints=\(cluster.endpoint)")
        #expect(cluster.broker.pid != firstPID)
        #expect(cluster.broker.runs.count == 2)
        // The limits worker registers again with the restarted broker: an admin change goes through.
        try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", eligible: false))
        #expect(try !cluster.limitsState(of: "c1-1").eligible)

        // suspend() returns once the kernel has stopped it.
        try await cluster.run { try cluster.limits.suspend() }
        #expect(ProcessState.state(cluster.limits.pid ?? 0) == "T")
        // resume() returns once it runs again.
        try await cluster.run { try cluster.limits.resume() }
        let running = try #require(ProcessState.state(cluster.limits.pid ?? 0), "limits is gone")
        #expect(running != "T")
        try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", eligible: true))

        let exit = try await cluster.run { try cluster.limits.terminate() }
        #expect(exit == .exited(0))
        // A process that is gone cannot be suspended or resumed: both say so.
        let resumed = await #expect(throws: RelayProcessError.self) {
            try await cluster.run { try cluster.limits.resume() }
        }
        #expect(resumed?.description.contains("limits is not running") == true)
        await #expect(throws: RelayProcessError.self) { try await cluster.run { try cluster.limits.suspend() } }
        try await cluster.run { try cluster.limits.restart() }
        #expect(try cluster.limitsState(of: "c1-1").eligible)
    }

    @Test("the processes die with the process that started the cluster, even on kill -9")
    func processesDieWithTheirStarter() throws {
        let bin = try AskRelayCluster.binDirectory()
        let logs = TempDirectory(prefix: "askrelay-holder")
        defer { logs.cleanup() }
        let holder = try RelayProcess(
            name: "askrelay-cluster-holder",
            executable: bin + "/askrelay-cluster-holder",
            arguments: [bin],
            logPath: logs.path + "/holder.log"
        )
        let ready = try holder.waitUntilReady(timeout: .seconds(60))
        let broker = try #require(ready["broker"].flatMap { pid_t($0) })
        let limits = try #require(ready["limits"].flatMap { pid_t($0) })
        defer { try? FileManager.default.removeItem(atPath: ready["folder"] ?? "/nonexistent") }
        #expect(ProcessState.isAlive(broker) && ProcessState.isAlive(limits))
        try holder.kill()
        // Polled with a deadline: these are not our children, so there is no exit to wait for.
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline && (ProcessState.isAlive(broker) || ProcessState.isAlive(limits)) {
            usleep(10_000)  // allowed: a poll with a deadline
        }
        #expect(!ProcessState.isAlive(broker), "the broker outlived the process that started it")
        #expect(!ProcessState.isAlive(limits), "the limits worker outlived the process that started it")
    }
}

@Suite("AskRelayCluster statistics")
struct ClusterStatsTests {
    @Test("the stats endpoint shows the sessions, with durability off as well")
    func statsWithoutJournal() async throws {
        let cluster = try await AskRelayCluster.start(.init(durability: .off))
        defer { cluster.stop() }
        let stats = try await cluster.stats { $0.sessions["limits"] == 1 && $0.sessions["observer"] == 1 }
        #expect(stats.queued == 0)
        let error = #expect(throws: ClusterError.self) { try cluster.ledger(UUID()) }
        #expect(error?.description.contains("--durability off keeps none") == true)
    }
}

@Suite("AskRelayCluster worker processes", .timeLimit(.minutes(1)))
struct ClusterWorkerTests {
    @Test("an askrelay-parent process with a policy answers a question asked through the cluster's AskCenter")
    func parentProcessAnswers() async throws {
        let cluster = try await AskRelayCluster.start(.init(curve: true))
        defer { cluster.stop() }
        let parent = try await cluster.startParent(["--guardian", "g1-1@f1", "--policy", "deny", "--think", "fixed:0s"])
        #expect(parent.name == "parent-1")
        #expect(parent.readyLine == "ready guardians=1")
        let center = try cluster.makeAskCenter()
        let responses = center.child("c1-1").responses(for: CommunicationTopic.self)
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
        try await center.child("c1-1").ask(question)
        try await center.child("c1-1").send(question.id)
        var iterator = responses.makeAsyncIterator()
        let response = await iterator.next()
        #expect(response?.choice == .decline)
        let entry = try await cluster.waitForLedger(question.id) { $0.state == .answered }
        #expect(entry.answeredBy == "g1-1")
        await center.stop()
        #expect(cluster.logs.map(\.name) == ["broker", "limits", "parent-1", "clients"])
    }

    @Test("with trace on, the broker, limits, a parent process and a center each write trace/<name>.jsonl")
    func traceFiles() async throws {
        var options = AskRelayCluster.Options()
        options.trace = true
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        _ = try await cluster.startParent(["--guardian", "g1-1@f1", "--policy", "approve", "--think", "fixed:0s"])
        let center = try cluster.makeAskCenter()
        let responses = center.child("c1-1").responses(for: CommunicationTopic.self)
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550101", kind: .phoneNumber))
        try await center.child("c1-1").ask(question)
        try await center.child("c1-1").send(question.id)
        var iterator = responses.makeAsyncIterator()
        #expect(await iterator.next()?.choice == .approve)
        await center.stop()
        await cluster.shutdown(removingFolder: false)
        let folder = try #require(cluster.traceFolder)
        #expect(folder == cluster.folder + "/trace")
        let trace = try TraceFolder(path: folder)
        #expect(trace.orderedProcesses == ["askcenter-1", "broker", "limits", "parent-1"])
        // The question's flow: the center sent its ask, the broker routed it, the parent's guardian got the question.
        let flow = trace.flow(question.id.uuidString)
        #expect(Set(flow.map(\.process)) == ["askcenter-1", "broker", "limits", "parent-1"])
        #expect(flow.contains { $0.process == "askcenter-1" && $0.line.event == "sent" && $0.line.kind == "ask" })
        #expect(flow.contains { $0.process == "broker" && $0.line.event == "closed" && $0.line.code == "answered" })
        try? FileManager.default.removeItem(atPath: cluster.folder)
    }
    @Test("a GuardianCenter answers in its question's trace, also when it answers again after a refusal")
    func guardianCenterAnswerTrace() async throws {
        var options = AskRelayCluster.Options()
        options.trace = true
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        let app = try cluster.makeAskCenter()
        let guardians = try cluster.makeGuardianCenter()
        #expect(await guardians.waitUntilRegistered())
        var questions = guardians.questions().makeAsyncIterator()
        let context = try #require(TraceContext(traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550104", kind: .phoneNumber))
        try await app.child("c1-1").ask(question, trace: context)
        try await app.child("c1-1").send(question.id)
        let received = try #require(await questions.next())
        // A choice the question does not have is refused; the answer given again still carries the context.
        do {
            try await received.answer("no-such-choice")
            Issue.record("an unknown choice was accepted")
        } catch {}
        try await received.answer(question.choices[0].id)
        await app.stop()
        await guardians.stop()
        await cluster.shutdown(removingFolder: false)
        defer { try? FileManager.default.removeItem(atPath: cluster.folder) }
        let trace = try TraceFolder(path: try #require(cluster.traceFolder))
        let flow = trace.flow(question.id.uuidString)
        let delivered = try #require(
            flow.first { $0.process == "guardiancenter-1" && $0.line.event == "received" && $0.line.kind == "question" }
        )
        let questionSpan = TraceContext.spanID(
            of: MessageID(uuid: try #require(UUID(uuidString: delivered.line.id ?? "")))
        )
        let answers = flow.filter {
            $0.process == "guardiancenter-1" && $0.line.event == "sent" && $0.line.kind == "answer"
        }
        #expect(answers.count == 2, "\(answers.map(\.line))")
        for answer in answers {
            let carried = try #require(answer.line.trace.flatMap { TraceContext(traceparent: $0) }, "\(answer.line)")
            #expect(carried.traceID == context.traceID && carried.parentID == questionSpan, "\(answer.line)")
        }
    }
}
