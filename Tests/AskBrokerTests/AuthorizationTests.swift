import AskKeys
import AskBroker
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// Who acts in an authorization case. Every actor but `stranger` holds a key listed in principals.json.
enum Actor: String, CaseIterable, Sendable {
    /// The child who owns the question (c1, family f1).
    case child
    /// A child of another family (c2, family f2).
    case otherChild
    /// A guardian of the question's family (g1, f1).
    case guardian
    /// A guardian of another family (g2, f2).
    case otherGuardian
    case limits
    case observer
    /// A valid CURVE key that is not in principals.json.
    case stranger

    var role: SessionRole {
        switch self {
        case .child, .otherChild: .child
        case .guardian, .otherGuardian: .guardian
        case .limits, .stranger: .limits
        case .observer: .observer
        }
    }

    var address: String {
        switch self {
        case .child: "child/c1"
        case .otherChild: "child/c2"
        case .guardian: "guardian/g1"
        case .otherGuardian: "guardian/g2"
        case .limits: "limits/limits-1"
        case .observer: "observer/observer-1"
        case .stranger: "limits/intruder"
        }
    }

    var family: String? {
        switch self {
        case .child, .guardian: "f1"
        case .otherChild, .otherGuardian: "f2"
        default: nil
        }
    }
}

enum Action: String, CaseIterable, Sendable {
    /// Ask a fresh question from the actor's own address.
    case ask
    /// Ask a question claiming to be child/c1.
    case askAsChild
    /// Send c1's presented question to the guardians.
    case send
    /// Cancel c1's presented question.
    case cancel
    /// Answer c1's sent question.
    case answer
    /// Admit c1's question (ask.result), as the limits worker would.
    case admit
    /// Change c1's limits state.
    case adminChange
    /// Register the actor's own address.
    case registerOwn
    /// Register an address the actor's key does not cover.
    case registerOther
}

struct AuthorizationCase: Sendable, CustomTestStringConvertible {
    let actor: Actor
    let action: Action
    /// `nil`: allowed (ACK or WELCOME); otherwise the refusal code; "handshake" when no session can exist.
    let expected: String?
    var testDescription: String { "\(actor.rawValue) \(action.rawValue) → \(expected ?? "allowed")" }
}

/// The matrix: every actor × every action.
let authorizationCases: [AuthorizationCase] = Actor.allCases.flatMap { actor in
    Action.allCases.map { action in
        AuthorizationCase(actor: actor, action: action, expected: expectedOutcome(actor, action))
    }
}

func expectedOutcome(_ actor: Actor, _ action: Action) -> String? {
    let forbidden = ErrorCode.forbidden.rawValue
    if actor == .stranger { return "handshake" }
    switch action {
    case .registerOwn: return nil
    case .registerOther: return forbidden
    case .ask: return actor.role == .child ? nil : forbidden
    case .askAsChild: return actor == .child ? nil : forbidden
    case .send, .cancel: return actor == .child ? nil : forbidden
    case .answer:
        switch actor {
        case .guardian: return nil
        case .otherGuardian: return ErrorCode.notGuardian.rawValue
        default: return forbidden
        }
    case .admit: return actor == .limits ? nil : forbidden
    case .adminChange: return actor == .observer ? nil : forbidden
    }
}

/// A CURVE broker with principals for every actor, and the question of c1 in the state an action needs.
final class SecureWorld {
    let directory = TempDirectory()
    let broker: TestBroker
    let keys: [Actor: CurveKeyPair]
    let serverKey: String
    let context: ZMQContext

    init() throws {
        var keys: [Actor: CurveKeyPair] = [:]
        var entries: [PrincipalEntry] = []
        for actor in Actor.allCases {
            let pair = try CurveKeyPair.generate()
            keys[actor] = pair
            guard actor != .stranger else { continue }
            let id = String(actor.address.split(separator: "/")[1])
            entries.append(PrincipalEntry(publicKey: pair.publicKey, role: actor.role, id: id, family: actor.family))
        }
        let brokerKeys = try CurveKeyPair.generate()
        try KeyFile(keys: brokerKeys, role: "broker", id: "broker").save(path: directory.path + "/broker.key")
        try PrincipalsFile(principals: entries).save(path: directory.path + "/principals.json")
        self.keys = keys
        serverKey = brokerKeys.publicKey
        let path = directory.path
        broker = try TestBroker { configuration in
            configuration.curveSecretFile = path + "/broker.key"
            configuration.principalsFile = path + "/principals.json"
        }
        context = try ZMQContext()
    }

    func peer(_ actor: Actor, monitor: MonitorEvents? = nil) throws -> RawPeer {
        let peer = try RawPeer(
            context: context,
            endpoint: broker.endpoint,
            curve: (keys[actor]!, serverKey),
            monitor: monitor
        )
        try peer.socket.set(.handshakeInterval, 1000)
        return peer
    }

    func stop() {
        broker.stop()
        directory.cleanup()
    }
}

@Suite("Authorization matrix over real CURVE sockets", .timeLimit(.minutes(2)))
struct AuthorizationTests {
    @Test("the matrix has at least 40 cases and covers every role and action")
    func size() {
        #expect(authorizationCases.count >= 40)
        #expect(Set(authorizationCases.map(\.actor)).count == Actor.allCases.count)
    }

    @Test("each role × action × own/other family gets the expected allow or refusal", arguments: authorizationCases)
    func matrix(_ testCase: AuthorizationCase) throws {
        let world = try SecureWorld()
        defer { world.stop() }
        // The cast: c1 (f1) with its limits worker, and the guardians of f1 and f2, all authenticated.
        let child = try world.peer(.child)
        try child.register(role: .child, ["child/c1"], family: "f1")
        let limits = try world.peer(.limits)
        try limits.register(role: .limits, ["limits/limits-1"])
        let guardian = try world.peer(.guardian)
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        let otherGuardian = try world.peer(.otherGuardian)
        try otherGuardian.register(role: .guardian, ["guardian/g2"], family: "f2")
        let cast: [Actor: RawPeer] = [
            .child: child, .limits: limits, .guardian: guardian, .otherGuardian: otherGuardian,
        ]

        // c1's question, brought to the state the action needs.
        let question = AnyPermissionQuestion(
            PermissionQuestion<CommunicationTopic>(
                handle: CommunicationHandle(value: "+15550001111", kind: .phoneNumber)
            )
        )
        try child.expectAck(try child.send(AskRequest(question: question), from: "child/c1", to: "limits"))
        let ask = try limits.expectDelivery(kind: "ask")
        try limits.ack([ask.id!])
        if testCase.action != .admit {
            try limits.expectAck(
                try limits.send(
                    AskResult(questionID: question.id, outcome: .presented),
                    from: "limits/limits-1",
                    to: "child/c1"
                )
            )
            try child.ack([try child.expectDelivery(kind: "ask.result").id!])
        }
        if testCase.action == .answer {
            try child.expectAck(try child.send(SendQuestion(questionID: question.id), from: "child/c1", to: "broker"))
        }

        // The actor: one of the cast, or a fresh connection with its own key.
        let actor: RawPeer
        if let existing = cast[testCase.actor] {
            actor = existing
        } else {
            actor = try world.peer(testCase.actor)
            if testCase.action != .registerOwn && testCase.action != .registerOther {
                try actor.hello(
                    role: testCase.actor.role,
                    endpoints: [EndpointClaim(address: testCase.actor.address, family: testCase.actor.family)]
                )
                guard let reply = try actor.next(timeout: .milliseconds(testCase.actor == .stranger ? 600 : 5000))
                else {
                    #expect(testCase.expected == "handshake", "\(testCase): no session")
                    return
                }
                #expect(reply.command == .welcome, "\(testCase): \(reply)")
            }
        }

        let id: MessageID?
        switch testCase.action {
        case .registerOwn, .registerOther:
            let claim =
                testCase.action == .registerOwn
                ? EndpointClaim(address: testCase.actor.address, family: testCase.actor.family)
                : EndpointClaim(
                    address: testCase.actor.role == .child
                        ? "child/c9" : testCase.actor.role.addressPrefix + "someone-else",
                    family: "f1"
                )
            try actor.hello(role: testCase.actor.role, endpoints: [claim])
            guard let reply = try actor.next(timeout: .milliseconds(testCase.actor == .stranger ? 600 : 5000)) else {
                #expect(testCase.expected == "handshake", "\(testCase): no reply")
                return
            }
            if let expected = testCase.expected {
                #expect(reply.command == .nack && reply.code == expected, "\(testCase): \(reply)")
            } else {
                #expect(reply.command == .welcome, "\(testCase): \(reply)")
            }
            return
        case .ask:
            let fresh = AnyPermissionQuestion(
                PermissionQuestion<CommunicationTopic>(
                    handle: CommunicationHandle(value: "+15550002222", kind: .phoneNumber)
                )
            )
            id = try actor.send(AskRequest(question: fresh), from: testCase.actor.address, to: "limits")
        case .askAsChild:
            let fresh = AnyPermissionQuestion(
                PermissionQuestion<CommunicationTopic>(
                    handle: CommunicationHandle(value: "+15550003333", kind: .phoneNumber)
                )
            )
            id = try actor.send(AskRequest(question: fresh), from: "child/c1", to: "limits")
        case .send:
            id = try actor.send(SendQuestion(questionID: question.id), from: testCase.actor.address, to: "broker")
        case .cancel:
            id = try actor.send(CancelQuestion(questionID: question.id), from: testCase.actor.address, to: "broker")
        case .answer:
            id = try actor.send(
                GuardianAnswer(questionID: question.id, choiceID: PermissionChoice.approve.id),
                from: testCase.actor.address,
                to: "broker"
            )
        case .admit:
            id = try actor.send(
                AskResult(questionID: question.id, outcome: .presented),
                from: testCase.actor.address,
                to: "child/c1"
            )
        case .adminChange:
            id = try actor.send(
                LimitsAdminChange(child: "c1", limitsEnabled: false),
                from: testCase.actor.address,
                to: "limits"
            )
        }
        let reply = try actor.expect {
            ($0.command == .ack && $0.ackIDs.contains(id!)) || ($0.command == .nack && $0.id == id)
        }
        if let expected = testCase.expected {
            #expect(reply.command == .nack && reply.code == expected, "\(testCase): \(reply)")
        } else {
            #expect(reply.command == .ack, "\(testCase): \(reply)")
        }
    }

    @Test("a worker without CURVE cannot even complete the handshake with a CURVE broker")
    func plainClientRefused() throws {
        let world = try SecureWorld()
        defer { world.stop() }
        // The refusal itself is the evidence, seen by a monitor attached before the connection: nothing arriving
        // for a while would pass on a machine too slow to have tried yet.
        let plain = try RawPeer(
            context: world.context,
            endpoint: world.broker.endpoint,
            monitor: [.handshakeSucceeded, .handshakeFailed]
        )
        let events = try #require(plain.monitor)
        try plain.hello(role: .child, endpoints: [EndpointClaim(address: "child/c1", family: "f1")])
        let event = try events.waitFor([.handshakeSucceeded, .handshakeFailed], timeoutMilliseconds: 15_000)
        #expect(event.map { MonitorEvents.handshakeFailed.contains($0.event) } == true, "\(String(describing: event))")
    }

    @Test("revoking a key drops its live session and refuses it from then on")
    func revocation() throws {
        let world = try SecureWorld()
        defer { world.stop() }
        let guardian = try world.peer(.guardian)
        try guardian.register(role: .guardian, ["guardian/g1"], family: "f1")
        var file = try PrincipalsFile.load(path: world.directory.path + "/principals.json")
        for index in file.principals.indices where file.principals[index].id == "g1" {
            file.principals[index].revoked = true
        }
        try file.save(path: world.directory.path + "/principals.json")
        // The broker checks the file once a second: the BYE is the signal that it reloaded (waited for generously:
        // a loaded machine may hold the broker's thread for seconds).
        _ = try guardian.expect(timeout: .seconds(20)) { $0.command == .bye }
        try guardian.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")])
        let reply = try guardian.expect { $0.command == .nack || $0.command == .welcome }
        #expect(reply.command == .nack && reply.code == ErrorCode.forbidden.rawValue, "\(reply)")
        // A new connection with the revoked key fails the handshake.
        let again = try world.peer(.guardian, monitor: [.handshakeSucceeded, .handshakeFailed])
        let events = try #require(again.monitor)
        try again.hello(role: .guardian, endpoints: [EndpointClaim(address: "guardian/g1", family: "f1")])
        let event = try events.waitFor([.handshakeSucceeded, .handshakeFailed], timeoutMilliseconds: 15_000)
        #expect(event?.event == .handshakeFailedAuth, "\(String(describing: event))")
    }
}
