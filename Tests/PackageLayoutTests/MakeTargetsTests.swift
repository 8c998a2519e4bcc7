import Foundation
import Testing

/// What each make target installs, read from `make -n` (which prints the commands without running them): the main
/// job installs only what building and running the simulation needs; the tests' packages are `make test`'s.
@Suite("make targets install what they need and no more")
struct MakeTargetsTests {
    /// The commands `make -n TARGET` would run, as one text.
    static func dryRun(_ target: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["make", "-n", "-C", PackageLayoutTests.root.path, target]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        try #require(process.terminationStatus == 0, "make -n \(target) exited \(process.terminationStatus): \(text)")
        return text
    }

    static let testOnly = ["docker-compose", "docker.io", "podman", "python3-yaml", "pip install", "venv"]

    @Test("make simulate installs libzmq3-dev and libsqlite3-dev, no container engine and no pip package")
    func simulateInstallsOnlyItsOwn() throws {
        let simulate = try Self.dryRun("simulate")
        #expect(simulate.contains("libzmq3-dev") && simulate.contains("libsqlite3-dev"), "\(simulate)")
        for name in Self.testOnly { #expect(!simulate.contains(name), "make simulate would install \(name)") }
    }

    @Test("make test installs the tests' packages, PyPI's into .build/venv, not the system Python")
    func testInstallsTheTestPackages() throws {
        let test = try Self.dryRun("test")
        for name in ["libzmq3-dev", "docker-compose", "python3-yaml", "python3-venv"] {
            #expect(test.contains(name), "make test would not install \(name)")
        }
        #expect(test.contains(".build/venv/bin/python3 -m pip install"), "\(test)")
        #expect(!test.contains("python3 -m pip install -q kubernetes"), "pip into the system Python: \(test)")
    }
}
