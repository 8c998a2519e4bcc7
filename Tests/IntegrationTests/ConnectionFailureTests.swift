import AskKeys
import AskProtocol
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// Workers as real processes against a real CURVE broker: the docs' commands work as written, refusals that can
/// never succeed end the process with one line, and a connection that gets no session says why, once.
@Suite("connection failures people can read", .timeLimit(.minutes(3)), .serialized)
struct ConnectionFailureTests {
    /// `askrelay keys generate` as docs/security.md runs it, and a CURVE broker on those keys.
    final class CurveWorld: @unchecked Sendable {  // @unchecked: built once, then only read.
        let directory = TempDirectory()
        let keys: String
        let broker: RelayProcess
        let endpoint: String

        init() throws {
            keys = directory.path + "/keys"
            let generate = try RelayProcess(
                "askrelay",
                [
                    "keys", "generate", "--out", keys, "--families", "100", "--guardians", "2", "--children", "1",
                    "--parent-hosts", "2", "--child-hosts", "2",
                ],
                logDirectory: directory.path
            )
            guard try generate.wait(timeout: .seconds(20)).code == 0 else {
                throw ProcessFailure("askrelay keys generate failed")
            }
            broker = try RelayProcess(
                "askrelay-broker",
                [
                    "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory.path + "/data", "--heartbeat", "200ms",
                    "--curve-secret-file", keys + "/broker.key", "--principals", keys + "/principals.json",
                ],
                logDirectory: directory.path
            )
            endpoint = try broker.readyEndpoint()
        }

        func parent(_ arguments: [String], broker: String? = nil, heartbeat: String = "200ms") throws -> RelayProcess {
            try RelayProcess(
                "askrelay-parent",
                ["--broker", broker ?? endpoint, "--heartbeat", heartbeat] + arguments,
                logDirectory: directory.path
            )
        }

        deinit {
            broker.kill9()
            directory.cleanup()
        }
    }

    static func stderr(_ process: RelayProcess) -> String {
        (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
    }

    /// Waits (re-reading the log every 50 ms, up to `timeout`) until `lines` lines of the process's stderr contain
    /// `text` and every one of `also`. - Returns: the log then.
    static func waitForLog(
        _ process: RelayProcess,
        _ text: String,
        also: [String] = [],
        lines: Int = 1,
        timeout: Duration = .seconds(15)
    ) throws -> String {
        let deadline = ContinuousClock.now + timeout
        let tick = DispatchSemaphore(value: 0)
        let texts = [text] + also
        while true {
            let log = stderr(process)
            let found = log.split(separator: "\n").lazy.filter { line in texts.allSatisfy { line.contains($0) } }
            if found.prefix(lines).count == lines { return log }
            guard ContinuousClock.now < deadline else {
                throw ProcessFailure(
                    "\(process.name) logged \(found.count) of \(lines) lines with \(texts); stderr:\n\(log.suffix(2000))"
                )
            }
            _ = tick.wait(timeout: .now() + .milliseconds(50))
        }
    }

    @Test("docs/security.md: a parent given only its key hosts the key's guardians; --families 100 is refused up front")
    func securityDocCommands() throws {
        let world = try CurveWorld()
        let keyed = try world.parent([
            "--curve-key", world.keys + "/parent-1.key", "--broker-key", world.keys + "/broker.public",
        ])
        defer { keyed.kill9() }
        #expect(try keyed.waitForLine(startingWith: "ready") == "ready guardians=100")

        let families = try world.parent([
            "--families", "100", "--curve-key", world.keys + "/parent-1.key", "--broker-key",
            world.keys + "/broker.public",
        ])
        defer { families.kill9() }
        #expect(try families.wait(timeout: .seconds(10)).code == 64)
        let message = Self.stderr(families)
        #expect(message.contains("may serve 100 address(es), not 'guardian/g2-1'"), "\(message)")
        #expect(!Self.stderr(world.broker).contains("hello refused"), "refused before it connected")
    }

    @Test("a child's key given to askrelay-parent says it is a child's key")
    func childKeyToParent() throws {
        let world = try CurveWorld()
        let parent = try world.parent([
            "--curve-key", world.keys + "/child-1.key", "--broker-key", world.keys + "/broker.public",
        ])
        defer { parent.kill9() }
        #expect(try parent.wait(timeout: .seconds(10)).code == 64)
        let message = Self.stderr(parent)
        #expect(message.contains("is the key of a child ('child-1'), not of a guardian"), "\(message)")
        #expect(!message.contains("listed twice"), "\(message)")
    }

    @Test("a HELLO the broker refuses 'forbidden' ends the worker with exit 69 after one attempt")
    func forbiddenExits() throws {
        let world = try CurveWorld()
        // A key file without its address list (as older files were): the worker cannot check up front.
        let path = world.keys + "/parent-1.key"
        var file = try JSONDecoder().decode(KeyFile.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        file.endpoints = nil
        let bare = world.directory.path + "/bare.key"
        try JSONEncoder().encode(file).write(to: URL(fileURLWithPath: bare))
        let parent = try world.parent([
            "--families", "100", "--curve-key", bare, "--broker-key", world.keys + "/broker.public",
        ])
        defer { parent.kill9() }
        #expect(try parent.wait(timeout: .seconds(10)).code == 69)
        let message = Self.stderr(parent)
        #expect(message.contains("forbidden: the key of 'parent-1' may not serve 'guardian/g2-1'"), "\(message)")
        let refusals = Self.stderr(world.broker).components(separatedBy: "hello refused by principal").count - 1
        #expect(refusals == 1, "one HELLO, one refusal (was one every 500 ms, forever)")
    }

    @Test("a revoked key ends the worker: exit 69, saying the key is revoked")
    func revokedKeyExits() throws {
        let world = try CurveWorld()
        let parent = try world.parent([
            "--curve-key", world.keys + "/parent-2.key", "--broker-key", world.keys + "/broker.public",
        ])
        defer { parent.kill9() }
        _ = try parent.waitForLine(startingWith: "ready")
        let revoke = try RelayProcess(
            "askrelay",
            ["keys", "revoke", "--dir", world.keys, "--id", "parent-2"],
            logDirectory: world.directory.path
        )
        #expect(try revoke.wait(timeout: .seconds(20)).code == 0)
        #expect(try parent.wait(timeout: .seconds(20)).code == 69)
        let message = Self.stderr(parent)
        #expect(message.contains("askrelay-parent: the broker at") && message.contains("revoked"), "\(message)")
    }

    @Test("askrelay-child with a key the broker does not list exits 69 with the reason, no 'ready' or 'done' line")
    func childWithUnlistedKey() throws {
        let world = try CurveWorld()
        let other = world.directory.path + "/other-keys"
        let generate = try RelayProcess(
            "askrelay",
            ["keys", "generate", "--out", other, "--families", "1"],
            logDirectory: world.directory.path
        )
        #expect(try generate.wait(timeout: .seconds(20)).code == 0)
        let child = try RelayProcess(
            "askrelay-child",
            [
                "--broker", world.endpoint, "--heartbeat", "200ms", "--curve-key", other + "/child-c1-1.key",
                "--broker-key", world.keys + "/broker.public",
            ],
            logDirectory: world.directory.path
        )
        defer { child.kill9() }
        #expect(try child.wait(timeout: .seconds(20)).code == 69)
        #expect(child.output.isEmpty, "\(child.output)")
        let expected = "askrelay-child: the broker at \(world.endpoint) refused this worker's CURVE key"
        #expect(Self.stderr(child).contains(expected))
    }

    @Test(
        "a session that never comes says why, once: plain against CURVE, wrong broker key, nothing listening",
        arguments: ["plain", "wrong-broker-key", "no-broker"]
    )
    func namesTheCause(_ mistake: String) throws {
        let world = try CurveWorld()
        let arguments: [String]
        let expected: String
        var broker: String?
        switch mistake {
        case "plain":
            arguments = ["--guardian", "g1-1@f1"]
            expected = "runs CURVE: give this worker --curve-key and --broker-key"
        case "wrong-broker-key":
            // parent-2.key holds a valid key pair, just not the broker's.
            arguments = ["--curve-key", world.keys + "/parent-1.key", "--broker-key", world.keys + "/parent-2.key"]
            expected = "--broker-key is probably not its public key"
        default:
            broker = "tcp://127.0.0.1:1"
            arguments = ["--guardian", "g1-1@f1"]
            expected = "nothing accepts connections at tcp://127.0.0.1:1"
        }
        // The worker's heartbeat sets its silence windows (3 heartbeats, doubled after each silence while no session
        // comes, up to 8×): at 100 ms the reconnects below come within 4 s instead of 8. No session ever forms, so
        // its heartbeat need not be the broker's.
        let parent = try world.parent(arguments, broker: broker, heartbeat: "100ms")
        defer { parent.kill9() }
        _ = try Self.waitForLog(parent, expected)
        // Two more reconnects later it has still said it only once.
        let reconnects = Self.stderr(parent).components(separatedBy: "broker silent; reconnecting").count - 1
        let deadline = ContinuousClock.now + .seconds(15)
        let tick = DispatchSemaphore(value: 0)
        while Self.stderr(parent).components(separatedBy: "broker silent; reconnecting").count - 1 < reconnects + 2 {
            guard ContinuousClock.now < deadline else { throw ProcessFailure("no further reconnects") }
            _ = tick.wait(timeout: .now() + .milliseconds(50))
        }
        let log = Self.stderr(parent)
        #expect(log.components(separatedBy: expected).count - 1 == 1, "said once:\n\(log.suffix(3000))")
        #expect(log.components(separatedBy: "no session with the broker").count - 1 == 1, "\(log.suffix(3000))")
    }
}
