import AskRelayProcesses
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("ReadyLine: the one ready line, printed and parsed")
struct ReadyLineTests {
    @Test("printed as the executables print it: fields in order, a missing value left out")
    func printed() {
        #expect(
            ReadyLine(["endpoints": "tcp://127.0.0.1:5555,ipc:///tmp/b.ipc", "metrics": nil]).text
                == "ready endpoints=tcp://127.0.0.1:5555,ipc:///tmp/b.ipc"
        )
        #expect(
            ReadyLine(["id": "limits-1", "children": "3", "metrics": "127.0.0.1:9100"]).text
                == "ready id=limits-1 children=3 metrics=127.0.0.1:9100"
        )
        #expect(ReadyLine([:]).text == "ready")
    }

    @Test("parsed with typed accessors; other lines are not ready lines")
    func parsed() throws {
        let line = try #require(ReadyLine(parsing: "ready endpoints=tcp://127.0.0.1:40123,ipc:///x metrics=h:1"))
        #expect(line.endpoints == ["tcp://127.0.0.1:40123", "ipc:///x"])
        #expect(line.endpoint == "tcp://127.0.0.1:40123")
        #expect(line.metrics == "h:1")
        #expect(line.id == nil)
        #expect(ReadyLine(parsing: "ready id=limits-1 children=0")?.id == "limits-1")
        #expect(ReadyLine(parsing: "ready id=limits-1 children=0")?["children"] == "0")
        #expect(ReadyLine(parsing: "ready note= x")?["note"] == "")
        #expect(ReadyLine(parsing: "ready")?.fields.isEmpty == true)
        #expect(ReadyLine(parsing: "readying") == nil)
        #expect(ReadyLine(parsing: "not ready") == nil)
        let printed = ReadyLine(["frontend": "tcp://a:1", "backend": "tcp://b:2"])
        #expect(ReadyLine(parsing: printed.text) == printed)
        #expect(ReadyLine(parsing: printed.text)?["backend"] == "tcp://b:2")
        let port = 5555
        #expect(ReadyLine(parsing: "ready endpoints=tcp://h:5555") == "ready endpoints=tcp://h:\(port)")
    }
}

@Suite("Executables: the one lookup of the askrelay executables")
struct ExecutablesTests {
    @Test("an explicit folder, else ASKRELAY_BIN_DIR, else next to the running program or a parent")
    func order() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-bin")
        defer { scratch.remove() }
        let holding = scratch.path + "/bin"
        try FileManager.default.createDirectory(atPath: holding, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(
            atPath: holding + "/askrelay-broker",
            contents: Data("#!/bin/sh\n".utf8),
            attributes: [.posixPermissions: 0o755]
        )
        #expect(try Executables.directory(holding, environment: [:]) == holding)
        #expect(try Executables.directory(environment: ["ASKRELAY_BIN_DIR": holding]) == holding)
        // An explicit folder wins over the variable.
        #expect(throws: RelayProcessError.self) {
            try Executables.directory(scratch.path, environment: ["ASKRELAY_BIN_DIR": holding])
        }
        // Without either: the test bundle's folder (.build/debug) or a parent holds the executables.
        let found = try Executables.directory(environment: [:])
        #expect(FileManager.default.isExecutableFile(atPath: found + "/askrelay-broker"))
        #expect(Executables.programDirectory.hasPrefix(found))
        #expect(try Executables.path(of: "askrelay-broker", in: holding) == holding + "/askrelay-broker")
    }

    @Test("a folder without the executables is one error naming where it looked and the fix")
    func notFound() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-empty")
        defer { scratch.remove() }
        let error = #expect(throws: RelayProcessError.self) {
            try Executables.directory(environment: ["ASKRELAY_BIN_DIR": scratch.path])
        }
        #expect(
            error?.description
                == "askrelay-broker not found in \(scratch.path); run `swift build` in the AskRelay checkout (a dependent "
                + "package's own build does not build the askrelay executables), or set ASKRELAY_BIN_DIR to the folder "
                + "holding them (that checkout's .build/debug)"
        )
        #expect(Executables.directoryOrFirstCandidate(environment: ["ASKRELAY_BIN_DIR": scratch.path]) == scratch.path)
        let missing = #expect(throws: RelayProcessError.self) {
            try Executables.path(of: "askrelay-limits", in: scratch.path)
        }
        #expect(missing?.description.hasPrefix("askrelay-limits not found in \(scratch.path);") == true)
    }
}

@Suite("ScratchFolder")
struct ScratchFolderTests {
    @Test("made private under the temporary folder, removed with its contents once")
    func makeAndRemove() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-scratch")
        #expect((scratch.path as NSString).lastPathComponent.hasPrefix("askrelay-scratch-"))
        let attributes = try FileManager.default.attributesOfItem(atPath: scratch.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
        _ = FileManager.default.createFile(atPath: scratch.path + "/file", contents: Data("x".utf8))
        #expect(scratch.remove())
        #expect(!FileManager.default.fileExists(atPath: scratch.path))
        #expect(!scratch.remove())
    }
}

@Suite("RelayProcess with real processes", .timeLimit(.minutes(1)))
struct RelayProcessTests {
    /// A shell that logs, prints a ready line with its pid, then blocks until signalled; a SIGTERM ends it with exit 0.
    static let server = [
        "-c", "trap 'exit 0' TERM; echo 'to the log' >&2; echo \"ready id=sh pid=$$\"; while :; do sleep 1; done",
    ]

    @Test("ready line typed; SIGTERM's exit; restart with the same arguments; kill")
    func faultControl() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-relay")
        defer { scratch.remove() }
        let process = try RelayProcess(
            name: "sh",
            executable: "/bin/sh",
            arguments: Self.server,
            logPath: scratch.path + "/sh.log",
            readyTimeout: .seconds(20)
        )
        defer { process.stop() }
        let ready = try process.waitUntilReady()
        #expect(ready.id == "sh")
        #expect(ready["pid"] == "\(process.pid ?? 0)")
        #expect(process.ready == ready)
        #expect(try process.terminate(timeout: .seconds(20)) == .exited(0))
        #expect(process.log.contains("to the log"))
        let again = try process.restart()
        #expect(again["pid"] == "\(process.pid ?? 0)")
        #expect(process.runs.count == 2)
        #expect(throws: RelayProcessError.self) { try process.restart() }
        #expect(try process.kill() == .signaled(SIGKILL))
        #expect(ProcessExitStatus.signaled(SIGKILL).code == SIGKILL)
    }

    @Test("exits before its ready line: an error at once with its exit and its log's tail")
    func exitsBeforeReady() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-relay")
        defer { scratch.remove() }
        let process = try RelayProcess(
            name: "early",
            executable: "/bin/sh",
            arguments: ["-c", "echo 'no broker given' >&2; exit 64"],
            logPath: scratch.path + "/early.log",
            readyTimeout: .seconds(600)
        )
        let error = #expect(throws: RelayProcessError.self) { try process.waitUntilReady() }
        let text = error?.description ?? ""
        #expect(text.contains("exited (exit 64)") && text.contains("no broker given") && !text.contains("within"))
        #expect(text.contains("stderr of early (\(scratch.path)/early.log)"))
    }

    @Test("one ProcessLaunch: its name defaults to the executable's, its environment and stderr reach the process")
    func launch() throws {
        let scratch = try ScratchFolder(prefix: "askrelay-relay")
        defer { scratch.remove() }
        var launch = ProcessLaunch(
            executable: "/bin/sh",
            arguments: ["-c", "echo \"$GREETING\" >&2; echo \"ready home=${HOME:-none}\""],
            environment: ["GREETING": "hello", "ASKRELAY_FAMILIES": "9"],
            replacingEnvironment: true
        )
        #expect(launch.name == "sh")
        #expect(launch.startingEnvironment == ["GREETING": "hello", "ASKRELAY_FAMILIES": "9"])
        launch.replacingEnvironment = false
        #expect(launch.startingEnvironment["GREETING"] == "hello")
        // Ours without ASKRELAY_*, then what the launch adds (an ASKRELAY_ variable it names included).
        #expect(launch.startingEnvironment["PATH"] == ProcessInfo.processInfo.environment["PATH"])
        #expect(launch.startingEnvironment["ASKRELAY_FAMILIES"] == "9")
        launch.replacingEnvironment = true
        launch.logPath = scratch.path + "/sh.log"
        let process = try RelayProcess(launch)
        defer { process.stop() }
        #expect(try process.waitUntilReady(timeout: .seconds(20)) == "ready home=none")
        #expect(process.process.launch == launch)
        _ = try process.process.waitForEnd(timeout: .seconds(20))
        #expect(process.log.contains("hello"))
    }

    @Test("a missing executable is an error naming it")
    func missing() {
        let error = #expect(throws: RelayProcessError.self) {
            try RelayProcess(executable: "/nonexistent/askrelay-broker", arguments: [])
        }
        #expect(error?.description.hasPrefix("askrelay-broker could not be started:") == true)
    }
}
