import AskRelayTesting
import AskTestKit
import Foundation
import Synchronization
import Testing

/// The running test's cluster (the `.askRelayCluster()` trait starts it).
func currentCluster() throws -> AskRelayCluster { try #require(AskRelayCluster.current) }

/// A handle the tests ask about.
let friend = CommunicationHandle(value: "+15550100", kind: .phoneNumber)

/// Polls `condition` every 10 ms until it holds or `timeout` passes. - Returns: whether it held.
func eventually(within timeout: Duration = .seconds(15), _ condition: () async throws -> Bool) async rethrows
    -> Bool
{
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))  // allowed: a poll with a deadline
    }
    return try await condition()
}

/// The ask a test expects to fail: its `AskError`, or `nil` when it was presented.
func askError(_ session: ChildSession, _ question: PermissionQuestion<CommunicationTopic>) async -> AskError? {
    do {
        try await session.ask(question)
        return nil
    } catch { return error }
}

/// The guardian refusal code of an answer, or `nil` when the broker took it.
func answerRefusal(_ guardians: GuardianCenter, _ id: UUID, _ choice: String, as guardian: String) async
    -> ErrorCode?
{
    do {
        try await guardians.answer(questionID: id, choiceID: choice, as: guardian)
        return nil
    } catch { return error.code }
}

/// The questions a guardian center receives.
func questions(of guardians: GuardianCenter) -> Collected<GuardianCenter.Question> {
    Collected(guardians.events()) { if case .question(let question) = $0 { question } else { nil } }
}

/// Runs `body` with an `AskCenter` hosting the cluster's children and a `GuardianCenter` hosting its guardians,
/// and stops both however `body` ends.
func withClients(
    _ cluster: AskRelayCluster,
    _ body: (AskCenter, GuardianCenter) async throws -> Void
) async throws {
    let children = try cluster.makeAskCenter()
    let guardians: GuardianCenter
    do { guardians = try cluster.makeGuardianCenter() } catch {
        await children.stop()
        throw error
    }
    do { try await body(children, guardians) } catch {
        await children.stop()
        await guardians.stop()
        throw error
    }
    await children.stop()
    await guardians.stop()
}

/// Positive evidence that nothing more came for a child: a marker question about a handle of its own, asked by
/// `child`, sent, and approved by `guardian`. Its question and response travel the paths a late question or response
/// would have (the broker's ordered queue for each recipient, one connection each), so once its response came,
/// whatever was queued before it came first. A window of waiting proves nothing on a slow machine; this does.
/// - Returns: the question ids of the responses `responses` holds once the marker's came, in order.
func responsesThroughMarker(
    _ responses: Collected<PermissionResponse<CommunicationTopic>>,
    children: AskCenter,
    guardians: GuardianCenter,
    child: String = "c1-1",
    guardian: String = "g1-1"
) async throws -> [UUID] {
    let handle = CommunicationHandle(value: "+1555\(UInt32.random(in: 1_000_000...9_999_999))", kind: .phoneNumber)
    let marker = PermissionQuestion(handle: handle)
    let delivered = questions(of: guardians)
    try await children.child(child).ask(marker)
    try await children.child(child).send(marker.id)
    try #require(await delivered.first { $0.id == marker.id } != nil, "the marker question never reached \(guardian)")
    try await guardians.answer(questionID: marker.id, choiceID: PermissionChoice.approve.id, as: guardian)
    try #require(await responses.first { $0.question.id == marker.id } != nil, "the marker's response never came")
    return responses.all.map(\.question.id)
}
