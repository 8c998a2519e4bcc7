@testable import AskAgents
import AskProtocol
import AskTestSupport
import Foundation
import SQLite
import Testing

/// The limits store writes a child's state only when a change changes it.
struct LimitsStoreTests {
    @Test func aChangeThatChangesNothingWritesNothing() throws {
        let data = TempDirectory()
        defer { data.cleanup() }
        let known = CommunicationHandle(value: "+14155550100", kind: .phoneNumber)
        let (store, _) = try LimitsStore.open(directory: data.path, seed: nil, reset: false)
        let opened = store.database.totalChanges

        try store.update("c1") { $0.learn([known]) }
        #expect(store.database.totalChanges == opened + 1, "a new handle is written")
        try store.update("c1") { $0.learn([known]) }
        #expect(store.database.totalChanges == opened + 1, "learning it again writes nothing")
        #expect(store.state(of: "c1").knownHandles == [known.normalized])

        // A child without a state of its own whose change leaves the defaults as they are gets no row either.
        try store.update("c2") { $0.learn([]) }
        #expect(store.database.totalChanges == opened + 1)
        #expect(store.children["c2"] == nil)
        try store.update("c2") { $0.eligible = false }
        #expect(store.database.totalChanges == opened + 2)
        #expect(store.state(of: "c2").eligible == false)
    }
}
