import Foundation
import Testing

@testable import AskSimulation

@Suite("A report folder is new or empty; --clean empties only what askrelay wrote")
struct ReportFolderTests {
    let root = NSTemporaryDirectory() + "askrelay-report-folder-" + UUID().uuidString

    func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("created with its parents; an empty one is fine; a used one is refused, then emptied by clean")
    func lifecycle() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
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
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/report.json"))
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/thesis.tex"))
        let refused = try #require(message { try ReportFolder.prepare(root, clean: true) })
        #expect(refused.contains("also holds thesis.tex"), "\(refused)")
        #expect(FileManager.default.fileExists(atPath: root + "/report.json"))
    }

    @Test("a file, or a path under a file, is named in one message")
    func files() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
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
