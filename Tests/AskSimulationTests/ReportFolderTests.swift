import AskTestKit
import Foundation
import SQLite
import Testing

@testable import AskSimulation

@Suite("A report folder is new or empty; --clean empties only what askrelay wrote")
struct ReportFolderTests {
    let scratch = TempDirectory(prefix: "askrelay-report-folder")
    var root: String { scratch.path }

    func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test(
        "the folder a report path is in, for one-character and bare names too (Foundation's deletingLastPathComponent crashed on 'r')",
        arguments: [
            ("r", ""), ("rr", ""), ("r/", ""), ("a/b", "a"), ("a/b/", "a"), ("/r", "/"), ("/", "/"), ("/a/b/c", "/a/b"),
            ("./r", "."),
        ]
    )
    func parentOfAPath(_ path: String, _ parent: String) {
        #expect(ReportFolder.parent(of: path) == parent)
    }

    @Test("created with its parents; an empty one is fine; a used one is refused, then emptied by clean")
    func lifecycle() throws {
        defer { scratch.cleanup() }
        let folder = root + "/a/b"
        try ReportFolder.prepare(folder, clean: false)
        #expect(FileManager.default.fileExists(atPath: folder))
        try ReportFolder.prepare(folder, clean: false)
        try FileManager.default.createDirectory(atPath: folder + "/logs", withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: folder + "/report.json"))
        try FileManager.default.createDirectory(atPath: folder + "/child-3-state", withIntermediateDirectories: true)
        let refused = try #require(message { try ReportFolder.prepare(folder, clean: false) })
        #expect(refused.contains("'\(folder)' is not empty (it holds child-3-state, logs, report.json)"), "\(refused)")
        try ReportFolder.prepare(folder, clean: true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).isEmpty)
    }

    @Test("clean leaves a folder alone that holds anything askrelay does not write")
    func foreignFiles() throws {
        defer { scratch.cleanup() }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/report.json"))
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/thesis.tex"))
        let refused = try #require(message { try ReportFolder.prepare(root, clean: true) })
        #expect(refused.contains("also holds thesis.tex"), "\(refused)")
        #expect(FileManager.default.fileExists(atPath: root + "/report.json"))
    }

    @Test("a file, or a path under a file, is named in one message")
    func files() throws {
        defer { scratch.cleanup() }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let file = root + "/file"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        #expect(
            message { try ReportFolder.prepare(file, clean: true) }
                == "'\(file)' is a file, not a folder: give --report-dir a new or empty folder"
        )
        let under = try #require(message { try ReportFolder.prepare(file + "/x/y", clean: false) })
        #expect(
            under
                == "cannot create the report folder '\(file)/x/y': '\(file)' is a file, not a folder: give --report-dir another path"
        )
    }
}

@Suite("A report folder a live run holds is never emptied")
struct ReportFolderLockTests {
    let scratch = TempDirectory(prefix: "askrelay-report-lock")
    var root: String { scratch.path }

    func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("a folder whose simulate.lock a live run holds is refused with its pid, with and without clean")
    func heldFolderIsRefused() throws {
        defer { scratch.cleanup() }
        let live = try OwnerLock.claim(folder: root, name: "simulate.lock", what: "the report folder")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/scenario.json"))
        try FileManager.default.createDirectory(atPath: root + "/keys", withIntermediateDirectories: true)
        for clean in [true, false] {
            let refused = try #require(message { try ReportFolder.prepare(root, clean: clean) })
            #expect(refused.contains("'\(root)' is in use by process \(getpid())"), "\(refused)")
            #expect(!refused.contains("--clean to empty"), "\(refused)")
        }
        #expect(FileManager.default.fileExists(atPath: root + "/scenario.json"))
        #expect(FileManager.default.fileExists(atPath: root + "/keys"))
        withExtendedLifetime(live) {}
    }

    @Test("claim with clean keeps the lock file it holds and empties the rest; the lock is held until released")
    func cleanKeepsTheLock() throws {
        defer { scratch.cleanup() }
        try FileManager.default.createDirectory(atPath: root + "/logs", withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/report.json"))
        var lock: OwnerLockHolder? = OwnerLockHolder(try ReportFolder.claim(root, clean: true))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root) == ["simulate.lock"])
        #expect(message { _ = try ReportFolder.claim(root, clean: true) }?.contains("in use by process") == true)
        lock = nil
        _ = try ReportFolder.claim(root, clean: true)
        withExtendedLifetime(lock) {}
    }

    @Test("clean takes a folder a sharded run wrote (broker-data-b0, limits-data-b1)")
    func shardedLayout() throws {
        defer { scratch.cleanup() }
        for name in ["broker-data-b0", "broker-data-b1", "limits-data-b0", "limits-data-b1", "logs"] {
            try FileManager.default.createDirectory(atPath: root + "/" + name, withIntermediateDirectories: true)
        }
        try ReportFolder.prepare(root, clean: true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root).isEmpty)
        try FileManager.default.createDirectory(atPath: root + "/broker-data-x", withIntermediateDirectories: true)
        #expect(message { try ReportFolder.prepare(root, clean: true) }?.contains("also holds broker-data-x") == true)
    }

    @Test("a shrink folder: clean takes only what askrelay shrink writes")
    func shrinkFolder() throws {
        defer { scratch.cleanup() }
        try FileManager.default.createDirectory(atPath: root + "/replay-01/logs", withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/shrink.json"))
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/minimal-scenario.json"))
        let refused = try #require(
            message { try ReportFolder.prepare(root, clean: false, flag: "--shrink-dir", contents: .shrink) }
        )
        #expect(refused.contains("give --shrink-dir a new or empty folder, or add --clean"), "\(refused)")
        try ReportFolder.prepare(root, clean: true, flag: "--shrink-dir", contents: .shrink)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root).isEmpty)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: root + "/report.json"))
        let foreign = try #require(
            message { try ReportFolder.prepare(root, clean: true, flag: "--shrink-dir", contents: .shrink) }
        )
        #expect(foreign.contains("also holds report.json"), "\(foreign)")
    }
}

/// Lets a test drop a claim by setting the optional to nil.
final class OwnerLockHolder {
    let lock: AnyObject
    init(_ lock: AnyObject) { self.lock = lock }
}
