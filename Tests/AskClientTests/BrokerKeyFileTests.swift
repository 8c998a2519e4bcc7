import AskKeys
import AskProtocol
import AskTestSupport
import Foundation
import Testing
import ZeroMQ

/// `--broker-key` takes a file, never the key itself: a path can be 40 characters of the Z85 alphabet, and a flag
/// that guessed between the two read such a path as a key (issue: `simulate --report-dir "$(mktemp -d)/s"`).
@Suite("--broker-key is always a file")
struct BrokerKeyFileTests {
    /// A folder under /tmp whose `keys/broker.public` is a path of exactly 40 characters, each in Z85's alphabet.
    func fortyCharacterPath() throws -> (folder: String, file: String) {
        let suffix = "/keys/broker.public"
        let prefix = "/tmp/k40-"
        let random = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let folder = prefix + random.prefix(40 - suffix.count - prefix.count)
        let file = folder + suffix
        try #require(file.utf8.count == 40)
        try #require((try? Z85.decode(file)) != nil, "\(file) is not Z85 text")
        try FileManager.default.createDirectory(atPath: folder + "/keys", withIntermediateDirectories: true)
        return (folder, file)
    }

    @Test("a key file at a 40-character Z85 path gives the key it holds, not its path")
    func fortyCharacterPathIsReadAsAFile() throws {
        let (folder, file) = try fortyCharacterPath()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let keys = try CurveKeyPair.generate()
        try (keys.publicKey + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try CurveClientSettings.brokerPublicKey(file: file) == keys.publicKey)
    }

    @Test("a key given as the value, a folder, a missing file and a file without a key are refused, naming the flag")
    func notAFileIsRefused() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let key = try CurveKeyPair.generate().publicKey
        let junk = directory.path + "/junk"
        try "not a key".write(toFile: junk, atomically: true, encoding: .utf8)
        for (value, expected) in [
            (key, "no readable file there"), (directory.path, "no readable file there"),
            (directory.path + "/missing", "no readable file there"), (junk, "holds no public key"),
        ] {
            #expect {
                try CurveClientSettings.brokerPublicKey(file: value)
            } throws: { error in
                let text = "\(error)"
                return text.contains("--broker-key \(value): \(expected)") && text.contains("keys/broker.public")
            }
        }
    }
}
