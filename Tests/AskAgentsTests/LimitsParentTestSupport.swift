// Support for LimitsWorkerTests and ParentWorkerTests: ask helpers for a raw child peer.
import AskAgents
import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// Ask-and-send helpers for a child peer.
extension RawPeer {
    /// Sends `ask` and returns the `ask.result`.
    func ask(_ question: AnyPermissionQuestion, child: String) throws -> AskResult {
        let id = try send(AskRequest(question: question), from: "child/\(child)", to: "limits")
        try expectAck(id)
        let result = try expect {
            $0.command == .deliver && $0.kind == AskResult.kind && $0.to == "child/\(child)"
                && (try? $0.decode(AskResult.self).questionID) == question.id
        }
        return try result.decode(AskResult.self)
    }

    /// Asks (must be presented) then sends the question to the guardians.
    func askAndSend(_ question: AnyPermissionQuestion, child: String) throws {
        let result = try ask(question, child: child)
        guard result.outcome == .presented else { throw TestFailure("ask was not presented: \(result.outcome)") }
        let id = try send(SendQuestion(questionID: question.id), from: "child/\(child)", to: "broker")
        try expectAck(id)
    }
}

func phone(_ value: String) -> CommunicationHandle { CommunicationHandle(value: value, kind: .phoneNumber) }
func email(_ value: String) -> CommunicationHandle { CommunicationHandle(value: value, kind: .emailAddress) }

func question(_ handles: [CommunicationHandle], expiresIn: TimeInterval? = nil) -> AnyPermissionQuestion {
    AnyPermissionQuestion(
        topic: .communication(CommunicationTopic(personInformation: handles.map { .init(handle: $0) })),
        expirationDate: expiresIn.map { Date().addingTimeInterval($0) }
    )
}
