import AskClient
import AskProtocol
import AskTestSupport
import Foundation
import Testing

@Suite("ContactApprovals state machine")
struct ContactApprovalsTests {
    let alice = CommunicationHandle(value: "+1 555-010-0001", kind: .phoneNumber)
    let bob = CommunicationHandle(value: "Bob@Example.org", kind: .emailAddress)
    let start = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("an unknown handle is notDetermined and may be asked about")
    func notDetermined() {
        let approvals = ContactApprovals(pendingWindow: .seconds(60))
        #expect(approvals.status(for: alice, now: start) == .notDetermined)
        #expect(!approvals.status(for: alice, now: start).isTerminal)
        #expect(!approvals.status(for: alice, now: start).isAuthorized)
    }

    @Test("asking makes handles pending until the window closes, then notDetermined again")
    func pendingWindowExpires() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        let question = UUID()
        let until = approvals.asked(question, handles: [alice, bob], now: start)
        #expect(until == start.addingTimeInterval(60))
        #expect(approvals.status(for: alice, now: start.addingTimeInterval(59)) == .pending(until: until))
        // Compared normalized: another spelling of the same number is the same person.
        #expect(
            approvals.status(for: CommunicationHandle(value: "+15550100001", kind: .phoneNumber), now: start)
                == .pending(until: until)
        )
        #expect(approvals.status(for: bob, now: start.addingTimeInterval(60)) == .notDetermined)
    }

    @Test("a question's own expiry ends the wait earlier than the window")
    func expiryBeforeWindow() {
        var approvals = ContactApprovals(pendingWindow: .seconds(3600))
        let until = approvals.asked(UUID(), handles: [alice], now: start, expirationDate: start.addingTimeInterval(10))
        #expect(until == start.addingTimeInterval(10))
        #expect(approvals.status(for: alice, now: start.addingTimeInterval(11)) == .notDetermined)
    }

    @Test("cancelling ends the wait at once (a cancelled question never gets a response)")
    func cancelEndsWait() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        let question = UUID()
        approvals.asked(question, handles: [alice], now: start)
        approvals.cancelled(question)
        #expect(approvals.status(for: alice, now: start) == .notDetermined)
    }

    @Test("approval grants every handle of the question; denial denies; approval clears a denial")
    func approvalAndDenial() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        let first = PermissionQuestion(handles: [alice, bob])
        approvals.asked(first.id, handles: [alice, bob], now: start)
        approvals.record(PermissionResponse(question: first, choice: .decline))
        #expect(approvals.status(for: alice, now: start) == .denied)
        #expect(approvals.status(for: bob, now: start).isTerminal)
        let second = PermissionQuestion(handle: alice)
        approvals.asked(second.id, handles: [alice], now: start)
        approvals.record(PermissionResponse(question: second, choice: .approve))
        #expect(approvals.status(for: alice, now: start) == .granted)
        #expect(approvals.status(for: alice, now: start).isAuthorized)
        #expect(approvals.status(for: bob, now: start) == .denied)
    }

    @Test("an answer that is not among the question's choices counts as a denial")
    func unknownAnswerDenies() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        let question = PermissionQuestion(handle: bob)
        approvals.asked(question.id, handles: [bob], now: start)
        approvals.record(
            PermissionResponse(
                question: question,
                choice: PermissionChoice(id: "mystery", title: "?", answer: .approval)
            )
        )
        #expect(approvals.status(for: bob, now: start) == .denied)
        approvals.record(UUID(), handles: [alice], answer: nil)
        #expect(approvals.status(for: alice, now: start) == .denied)
    }

    @Test("known handles are granted and stay granted after a denial")
    func knownHandles() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        approvals.markKnown([alice])
        #expect(approvals.status(for: alice, now: start) == .granted)
        approvals.record(UUID(), handles: [alice], answer: .denial)
        #expect(approvals.status(for: alice, now: start) == .granted)
        #expect(approvals.handlesNotGranted.isEmpty)
    }

    @Test(
        "ask errors: limits off grants, no contact sync restricts, not available is unavailable, others change nothing"
    )
    func askErrors() {
        var approvals = ContactApprovals(pendingWindow: .seconds(60))
        approvals.refused(.systemError("x"))
        approvals.refused(.invalidQuestion(InvalidQuestionReason(field: "f", code: .empty, message: "m")))
        #expect(approvals.status(for: alice, now: start) == .notDetermined)
        approvals.refused(.contactSyncNotSetup)
        #expect(approvals.status(for: alice, now: start) == .restricted)
        approvals.refused(.notAvailable)
        #expect(approvals.status(for: alice, now: start) == .unavailable)
        approvals.refused(.communicationLimitsNotEnabled)
        #expect(approvals.status(for: alice, now: start) == .granted)
        approvals.presented()
        #expect(approvals.status(for: alice, now: start) == .notDetermined)
    }
}
