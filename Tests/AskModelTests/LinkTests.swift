import AskModel
import Foundation
import Testing

/// The model is Foundation only: a program that depends on AskModel alone links no libzmq.
///
/// SwiftPM links every test target into one test binary (which links libzmq for the other suites), so the check
/// runs on `askmodel-linkcheck`, an executable whose only dependency is AskModel, built by `swift build`.
@Suite("The model links without libzmq")
struct LinkTests {
    /// `askmodel-linkcheck` in the build folder next to the test binary; the test fails when it is missing.
    static func linkCheckExecutable() throws -> URL {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var found: URL?
        while found == nil, url.path != "/" {
            url.deleteLastPathComponent()
            let candidate = url.appendingPathComponent("askmodel-linkcheck")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { found = candidate }
        }
        return try #require(
            found,
            "askmodel-linkcheck is not built next to \(CommandLine.arguments[0]); run `swift build --build-tests`"
        )
    }

    /// Runs a program to its end; returns its exit status and stdout.
    static func run(_ executable: URL, _ arguments: [String] = [], input: [UInt8] = []) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        stdin.fileHandleForWriting.write(Data(input))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    @Test("ldd of a program built on AskModel alone shows Foundation and no libzmq")
    func noZeroMQ() throws {
        let executable = try Self.linkCheckExecutable()
        let (status, libraries) = try Self.run(URL(fileURLWithPath: "/usr/bin/ldd"), [executable.path])
        try #require(status == 0, "ldd \(executable.path) failed:\n\(libraries)")
        // A dynamically linked Swift program: without this line the check below would pass for the wrong reason.
        #expect(libraries.contains("libFoundation"), "ldd shows no Foundation:\n\(libraries)")
        #expect(!libraries.contains("libzmq"), "a program on AskModel alone links libzmq:\n\(libraries)")
    }

    @Test("the program decodes, validates and re-encodes a question without libzmq loaded")
    func runsWithoutZeroMQ() throws {
        let executable = try Self.linkCheckExecutable()
        let canonical = try WireJSON.encode(Samples.appUpdateQuestion)
        let (status, output) = try Self.run(executable, input: canonical)
        #expect(status == 0)
        #expect(output == "valid " + String(decoding: canonical, as: UTF8.self) + "\n")

        var blank = Samples.appUpdateQuestion
        blank.topic = .init(SignificantAppUpdateTopic(description: " "))
        let (refused, reason) = try Self.run(executable, input: try WireJSON.encode(blank))
        #expect(refused == 1)
        #expect(reason == "invalid topic.description empty\n")
    }
}
