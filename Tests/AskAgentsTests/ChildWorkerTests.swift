@testable import AskAgents
import AskClient
import AskTestSupport
import AskBroker
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import Testing
import ZeroMQ

@Suite("Child worker: generation and flows", .serialized, .timeLimit(.minutes(3)))
struct ChildWorkerTests {
    @Test("contacts are the same for the same seed and child, different otherwise, and valid")
    func contactsDeterministic() throws {
        let one = ContactGenerator.contacts(for: "c0-0", seed: 42, count: 50, knownRatio: 0.3)
        let again = ContactGenerator.contacts(for: "c0-0", seed: 42, count: 50, knownRatio: 0.3)
        let otherSeed = ContactGenerator.contacts(for: "c0-0", seed: 43, count: 50, knownRatio: 0.3)
        let otherChild = ContactGenerator.contacts(for: "c0-1", seed: 42, count: 50, knownRatio: 0.3)
        #expect(one == again)
        #expect(one != otherSeed)
        #expect(one != otherChild)
        #expect(Set(one.map(\.handle.normalized)).count == 50)
        #expect(Set(one.map(\.handle.kind)) == Set(CommunicationHandle.Kind.allCases))
        let known = one.filter(\.known).count
        #expect(known > 5 && known < 30)
        for contact in one {
            try PermissionQuestion(handle: contact.handle).validate()
        }
    }

    @Test("generated children are <prefix><f>-<c> in family f<f>, 1-based like generated guardians")
    func generatedChildren() throws {
        let children = ContactGenerator.children(families: 2, childrenPerFamily: 2, idPrefix: "k")
        #expect(children.map(\.id) == ["k1-1", "k1-2", "k2-1", "k2-2"])
        #expect(children.map(\.family) == ["f1", "f1", "f2", "f2"])
        let guardians = try Roster.generate(families: 2, guardiansPerFamily: 1, idPrefix: "g")
        #expect(
            Set(guardians.map(\.family)) == Set(children.map(\.family)),
            "children and guardians share family names"
        )
    }

    @Test("flow plans are deterministic by seed")
    func plansDeterministic() {
        let configuration = ChildWorkerConfiguration(broker: "tcp://127.0.0.1:1", children: [])
        let contacts = ContactGenerator.contacts(for: "c", seed: 7, count: 8, knownRatio: 0)
        func plans(_ seed: UInt64) -> [AnyQuestionTopic] {
            var random = SeededGenerator(seed: seed, stream: "flows/c")
            return (0..<20).map { _ in
                let plan = FlowPlan.make(
                    using: &random,
                    contacts: contacts,
                    configuration: configuration,
                    approvals: ContactApprovals()
                )
                return plan.question.topic
            }
        }
        #expect(plans(7) == plans(7))
        #expect(plans(7) != plans(8))
    }

    @Test("a worker plays every flow against a broker, a limits service and guardians, and records each once")
    func flowsEndToEnd() async throws {
        let broker = try TestBroker()
        let records = TempDirectory()
        defer {
            broker.stop()
            broker.directory.cleanup()
            records.cleanup()
        }
        let context = try ZMQContext()
        let children = ContactGenerator.children(families: 2, childrenPerFamily: 2, idPrefix: "k")
        var configuration = ChildWorkerConfiguration(broker: broker.endpoint, children: children)
        configuration.seed = 9
        configuration.flows = 6
        configuration.think = .milliseconds(1)
        configuration.cancelProbability = 0.3
        configuration.knownRatio = 0.3
        configuration.invalidRatio = 0.15
        configuration.recordsPath = records.path + "/child.jsonl"
        configuration.stateDirectory = records.path + "/state"
        configuration.center.heartbeatInterval = .milliseconds(200)
        // The limits peer knows what the simulation would seed: every contact generated as known.
        var knownSet = Set<CommunicationHandle>()
        for child in children {
            for contact in ContactGenerator.contacts(
                for: child.id,
                seed: 9,
                count: configuration.contactsPerChild,
                knownRatio: 0.3
            ) where contact.known {
                knownSet.insert(contact.handle.normalized)
            }
        }
        let responder = try await Responder.start(endpoint: broker.endpoint, context: context, known: knownSet)
        defer { responder.stop() }

        let worker = try ChildWorker(configuration: configuration, logger: .silent(), context: context)
        #expect(await worker.waitUntilRegistered(timeout: .seconds(5)))
        let summary = await worker.run()
        await worker.stop()
        let (written, unreadable) = JSONLinesWriter.read(ChildFlowRecord.self, path: configuration.recordsPath!)
        #expect(unreadable == 0)
        #expect(written.count == 24)
        #expect(summary.flows == 24)
        #expect(summary.strayResponses == 0)
        let outcomes = Set(written.map(\.outcome))
        #expect(outcomes.isSubset(of: [.approved, .denied, .cancelled, .knownHandle, .refused]))
        #expect(outcomes.contains(.approved) || outcomes.contains(.denied))
        for record in written {
            switch record.outcome {
            case .approved, .denied:
                #expect(record.responsesSurfaced == 1)
                #expect(record.sentAt != nil && record.respondedAt != nil && record.choiceID != nil)
            case .cancelled:
                #expect(record.responsesSurfaced == 0)
                #expect(responder.questionsSeen.contains(record.question!) == false)
            case .knownHandle:
                #expect(record.question == nil)
            case .refused:
                #expect(record.askError == "invalidQuestion")
            default:
                Issue.record("unexpected outcome \(record.outcome)")
            }
        }
        // Every question the guardians saw was answered and surfaced exactly once.
        let answered = Set(written.filter { $0.outcome == .approved || $0.outcome == .denied }.compactMap(\.question))
        #expect(answered == responder.questionsSeen)
    }
}

/// Raw limits and guardian peers on a thread of their own: present every ask, answer known-handle queries from a
/// set, and have the family's guardian answer every question (approve, decline, approve, ...).
final class Responder: Sendable {
    private let stopping = Atomic(false)
    private let seen = Mutex(Set<UUID>())
    private let finished = DispatchSemaphore(value: 0)

    var questionsSeen: Set<UUID> { seen.withLock { $0 } }

    static func start(endpoint: String, context: ZMQContext, known: Set<CommunicationHandle>) async throws -> Responder
    {
        let responder = Responder()
        let peers = try await blocking {
            let limits = try RawPeer(context: context, endpoint: endpoint)
            try limits.register(role: .limits, ["limits/L1"])
            let guardians = try RawPeer(context: context, endpoint: endpoint)
            try guardians.hello(
                role: .guardian,
                endpoints: [
                    EndpointClaim(address: "guardian/g1", family: "f1"),
                    EndpointClaim(address: "guardian/g2", family: "f2"),
                ]
            )
            _ = try guardians.expect { $0.command == .welcome }
            return (limits, guardians)
        }
        let thread = Thread {
            responder.serve(limits: peers.0, guardians: peers.1, known: known)
            responder.finished.signal()
        }
        thread.start()
        return responder
    }

    private func serve(limits: RawPeer, guardians: RawPeer, known: Set<CommunicationHandle>) {
        var approve = true
        while !stopping.load(ordering: .relaxed) {
            do {
                if let message = try limits.next(timeout: .milliseconds(10)), message.command == .deliver,
                    let id = message.id
                {
                    try limits.ack([id])
                    if message.kind == "ask" {
                        let request = try message.decode(AskRequest.self)
                        _ = try limits.send(
                            AskResult(questionID: request.question.id, outcome: .presented),
                            from: "limits/L1",
                            to: message.from
                        )
                    } else if message.kind == "limits.query" {
                        let query = try message.decode(KnownHandlesQuery.self)
                        let reply = KnownHandlesReply(known: query.handles.filter { known.contains($0.normalized) })
                        _ = try limits.send(reply, from: "limits/L1", to: message.from)
                    }
                }
                if let message = try guardians.next(timeout: .milliseconds(10)), message.command == .deliver,
                    let id = message.id
                {
                    try guardians.ack([id])
                    if message.kind == "question" {
                        let question = try message.decode(GuardianQuestion.self)
                        seen.withLock { _ = $0.insert(question.question.id) }
                        let choice = approve ? PermissionChoice.approve : PermissionChoice.decline
                        approve.toggle()
                        _ = try guardians.send(
                            GuardianAnswer(questionID: question.question.id, choiceID: choice.id),
                            from: message.to,
                            to: "broker"
                        )
                    }
                }
            } catch {
                Issue.record("responder: \(error)")
                return
            }
        }
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        finished.wait()
    }
}
