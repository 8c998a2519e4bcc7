import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// `askclient-usecheck` imports AskClient alone (no ZeroMQ); building it shows the client's public API names no
/// ZeroMQ type. Here it runs against a real broker, so the centers it builds that way are shown to work too.
@Suite("A client use without ZeroMQ")
struct ClientUseCheckTests {
    /// `askclient-usecheck` in the built executables' folder (the one lookup, ``Executables``); the test fails when it
    /// is missing.
    static func executable() throws -> URL {
        URL(fileURLWithPath: try Executables.path(of: "askclient-usecheck", in: try Executables.directory()))
    }

    /// Runs askclient-usecheck with `arguments` to its end (it ends by itself: registered or not within its waits,
    /// it stops its centers and exits); returns what it printed and its exit status.
    static func run(_ arguments: [String]) async throws -> (printed: String, status: Int32) {
        let process = Process()
        process.executableURL = try executable()
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        return try await blocking {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (String(decoding: data, as: UTF8.self), process.terminationStatus)
        }
    }

    @Test("askclient-usecheck registers its child and its guardian with a real broker, then stops them")
    func registersWithBroker() async throws {
        let broker = try TestBroker()
        defer { broker.stop() }
        let (printed, status) = try await Self.run([broker.endpoint])
        #expect(printed == "registered\n")
        #expect(status == 0)
    }

    @Test("without a reachable broker it says it is not registered (the check above can fail)")
    func notRegisteredWithoutBroker() async throws {
        // A port of a broker that was started and stopped: nothing listens there any more.
        let broker = try TestBroker()
        let endpoint = broker.endpoint
        broker.stop()
        let (printed, status) = try await Self.run([endpoint, "1"])
        #expect(printed == "not registered\n")
        #expect(status == 1)
    }
}
