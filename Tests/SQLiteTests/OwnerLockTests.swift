import AskTestKit
import Foundation
import SQLite
import Testing

@Suite("OwnerLock: one owner per folder")
struct OwnerLockTests {
    @Test("a second claim is refused with this pid, and freed when the first owner goes")
    func secondClaimRefused() throws {
        let scratch = TempDirectory(prefix: "ownerlock")
        let folder = scratch.path
        var first: OwnerLock? = try OwnerLock.claim(folder: folder + "/data", name: "x.lock", what: "the test folder")
        let error = #expect(throws: OwnerLockError.self) {
            _ = try OwnerLock.claim(folder: folder + "/data", name: "x.lock", what: "the test folder")
        }
        #expect(error?.code == .held)
        #expect(error?.holder == getpid())
        #expect(error?.message.contains("the test folder \(folder)/data is in use by process \(getpid())") == true)
        _ = first
        first = nil
        _ = try OwnerLock.claim(folder: folder + "/data", name: "x.lock", what: "the test folder")
    }

    @Test("a file where a folder belongs, and a folder under a file, give one readable sentence")
    func unusableFolders() throws {
        let scratch = TempDirectory(prefix: "ownerlock")
        let folder = scratch.path
        let file = folder + "/plain"
        try "x".write(toFile: file, atomically: true, encoding: .utf8)
        let isFile = #expect(throws: OwnerLockError.self) { try OwnerLock.prepareFolder(file, what: "the data dir") }
        #expect(isFile?.code == .unusable)
        let expected = "the data dir \(file): is a file, not a folder; give a folder (it is created if missing)"
        #expect(isFile?.message == expected)
        let under = #expect(throws: OwnerLockError.self) {
            try OwnerLock.prepareFolder(file + "/a/b", what: "the data dir")
        }
        #expect(under?.message == "the data dir \(file)/a/b: cannot be created: \(file) is a file, not a folder")
    }

    // A bare name ("d") is where Foundation's deletingLastPathComponent crashed the broker.
    @Test(
        "parent folders are computed from the text alone",
        arguments: [
            ("d", "."), ("a/b", "a"), ("/a", "/"), ("/a/b/", "/a"), ("./x", "."), ("/", "/"),
        ]
    )
    func parents(_ path: String, _ parent: String) {
        #expect(OwnerLock.parentFolder(of: path) == parent)
    }
}
