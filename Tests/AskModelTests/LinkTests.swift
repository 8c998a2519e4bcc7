import AskModel
import AskRelayProcesses
import AskTestKit
import Foundation
import Testing

/// The model is Foundation only, and the wire codec is the model plus bytes: a program that depends on AskModel alone,
/// or on AskProtocol alone, links no libzmq.
///
/// SwiftPM links every test target into one test binary (which links libzmq for the other suites), so the checks
/// run on executables built by `swift build`: `askmodel-linkcheck`, whose only dependency is AskModel, and the fuzz
/// replayer `askrelay-fuzz`, whose only dependency is AskProtocol.
@Suite("The model and the wire codec link without libzmq")
struct LinkTests {
    /// `name` in the built executables' folder (AskRelayProcesses' one lookup, ``Executables``: `ASKRELAY_BIN_DIR`,
    /// else next to the test binary or in a parent); the test fails when it is missing.
    static func linkCheckExecutable(_ name: String = "askmodel-linkcheck") throws -> URL {
        URL(fileURLWithPath: try Executables.path(of: name, in: try Executables.directory()))
    }

    /// The shared libraries `executable` loads, as `ldd` prints them; fails unless it is a dynamically linked Swift
    /// program (without Foundation in the list, a missing `libzmq` would prove nothing).
    static func libraries(of executable: URL) throws -> String {
        let (status, libraries) = try run(URL(fileURLWithPath: "/usr/bin/ldd"), [executable.path])
        try #require(status == 0, "ldd \(executable.path) failed:\n\(libraries)")
        try #require(libraries.contains("libFoundation"), "ldd shows no Foundation:\n\(libraries)")
        return libraries
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
        let libraries = try Self.libraries(of: try Self.linkCheckExecutable())
        #expect(!libraries.contains("libzmq"), "a program on AskModel alone links libzmq:\n\(libraries)")
    }

    @Test("ldd of the fuzz replayer, built on the wire codec (AskProtocol) alone, shows no libzmq")
    func wireCodecLinksNoZeroMQ() throws {
        let libraries = try Self.libraries(of: try Self.linkCheckExecutable("askrelay-fuzz"))
        #expect(!libraries.contains("libzmq"), "a program on AskProtocol alone links libzmq:\n\(libraries)")
    }

    @Test("the fuzz replayer parses a SEND's frames without libzmq loaded")
    func wireCodecRunsWithoutZeroMQ() throws {
        let replayer = try Self.linkCheckExecutable("askrelay-fuzz")
        // One fuzz input (docs in Sources/askrelay-fuzz): mode 0 (frames), then [UInt16 LE length][bytes] per frame:
        // the lead (signature, SEND, a header: id, no subject, from child/c1, to limits, kind ask), a body.
        var lead: [UInt8] = [0x41, 0x53, 0x4B, 2, 4] + [UInt8](repeating: 7, count: 16) + [0]
        for field in ["child/c1", "limits", "ask"] { lead += [UInt8(field.utf8.count)] + Array(field.utf8) }
        var input: [UInt8] = [0]
        for frame in [lead, Array("{}".utf8)] {
            input += [UInt8(frame.count), 0] + frame
        }
        let folder = TempDirectory(prefix: "wire-link")
        defer { folder.cleanup() }
        let file = folder.url.appendingPathComponent("send")
        try Data(input).write(to: file)
        let (status, output) = try Self.run(replayer, [file.path])
        #expect(status == 0)
        #expect(output.contains("replayed 1 inputs, no crash"), "\(output)")
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
