// Support for LimitsWorkerTests and ParentWorkerTests: an event collector and ask helpers for a raw child peer.
import AskAgents
import AskBroker
import AskLogging
import AskProtocol
import AskTestSupport
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// Collects events from a worker's thread; tests wait for one with a deadline.
final class LPEvents<Event: Sendable>: Sendable {
    private let events = Mutex<[Event]>([])
    private let signal = DispatchSemaphore(value: 0)

    func add(_ event: Event) {
        events.withLock { $0.append(event) }
        signal.signal()
    }

    var all: [Event] { events.withLock { $0 } }

    /// The first event after the first `skip` matching `matches` (seen before or arriving within `timeout`).
    func wait(after skip: Int = 0, timeout: Duration = .seconds(5), _ matches: (Event) -> Bool) throws -> Event {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = events.withLock({ $0.dropFirst(skip).first(where: matches) }) { return found }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw TestFailure("no matching event within \(timeout); got \(all)") }
            _ = signal.wait(timeout: .now() + .milliseconds(Int(min(left, .milliseconds(100)).seconds * 1000) + 1))
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

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
