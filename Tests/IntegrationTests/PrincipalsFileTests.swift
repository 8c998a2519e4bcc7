import AskKeys
import AskTestSupport
import AskProtocol
import AskRelayProcesses
import Foundation
import Testing

/// principals.json as a person leaves it: cut short or with a typo. Every reader of the file (`askrelay keys list`,
/// `askrelay keys add`, the broker at start) names the file, the line and the column, as scenario and story files
/// do, and says what to do.
@Suite("principals.json that is not JSON: its readers name the line and column", .serialized, .timeLimit(.minutes(2)))
struct PrincipalsFileTests {
    /// A key folder from `askrelay keys generate` whose principals.json is cut in the middle of its fifth line, and
    /// the message every reader must give for it.
    struct TruncatedKeys {
        /// The temporary folder holding `keys` and the logs, removed by ``cleanup()``.
        let directory = TempDirectory(prefix: "principals")
        var folder: URL { directory.url }
        let keys: String
        let principals: String
        let message: String

        init() throws {
            let folder = directory.path
            keys = folder + "/keys"
            let generate = try RelayProcess("askrelay", ["keys", "generate", "--out", keys], logDirectory: folder)
            guard try generate.wait(timeout: .seconds(20)).code == 0 else {
                throw ProcessFailure("askrelay keys generate failed")
            }
            principals = keys + "/principals.json"
            let text = try String(contentsOfFile: principals, encoding: .utf8)
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            let fifth = lines[4]
            let cut = lines[..<4].joined(separator: "\n") + "\n" + fifth.prefix(fifth.count / 2)
            try Data(cut.utf8).write(to: URL(fileURLWithPath: principals))
            let column = fifth.prefix(fifth.count / 2).count + 1
            message = "principals file \(principals): not valid JSON at line 5, column \(column): "
        }

        func cleanup() { directory.cleanup() }

        func stderr(of process: RelayProcess) -> String {
            (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
        }
    }

    @Test("askrelay keys list and keys add: the line and column, what to do, and nothing written")
    func keysCommands() throws {
        let keys = try TruncatedKeys()
        defer { keys.cleanup() }
        let before = try FileManager.default.contentsOfDirectory(atPath: keys.keys).sorted()
        let list = try RelayProcess("askrelay", ["keys", "list", "--dir", keys.keys], logDirectory: keys.folder.path)
        #expect(try list.wait(timeout: .seconds(20)).code == 1)
        #expect(keys.stderr(of: list).contains(keys.message), "\(keys.stderr(of: list))")
        #expect(keys.stderr(of: list).contains("askrelay keys generate"), "\(keys.stderr(of: list))")
        #expect(!keys.stderr(of: list).contains("DecodingError"), "\(keys.stderr(of: list))")
        let add = try RelayProcess(
            "askrelay",
            ["keys", "add", "--dir", keys.keys, "--role", "observer", "--id", "observer-9"],
            logDirectory: keys.folder.path
        )
        #expect(try add.wait(timeout: .seconds(20)).code == 1)
        #expect(keys.stderr(of: add).contains(keys.message), "\(keys.stderr(of: add))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: keys.keys).sorted() == before)
    }

    @Test("the broker refuses to start on it, naming the line and column")
    func broker() throws {
        let keys = try TruncatedKeys()
        defer { keys.cleanup() }
        let broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "ipc://\(keys.folder.path)/broker.ipc", "--data-dir", keys.folder.path + "/data",
                "--curve-secret-file", keys.keys + "/broker.key", "--principals", keys.principals,
            ],
            logDirectory: keys.folder.path
        )
        defer { broker.kill9() }
        #expect(try broker.wait(timeout: .seconds(20)).code != 0)
        #expect(keys.stderr(of: broker).contains(keys.message), "\(keys.stderr(of: broker))")
        #expect(!keys.stderr(of: broker).contains("DecodingError"), "\(keys.stderr(of: broker))")
    }

    @Test("JSON that is not a principals file: the field named as a path, not a DecodingError")
    func wrongShape() throws {
        let scratch = TempDirectory(prefix: "principals")
        defer { scratch.cleanup() }
        let path = scratch.appending("principals.json")
        try Data(#"{"version": 1, "principals": [{"publicKey": "x", "id": "a"}]}"#.utf8).write(
            to: URL(fileURLWithPath: path)
        )
        #expect {
            try PrincipalsFile.load(path: path)
        } throws: { error in
            "\(error)" == "principals file \(path): missing field 'principals[0].role'; fix the file or write it again "
                + "with 'askrelay keys generate'"
        }
    }
}
