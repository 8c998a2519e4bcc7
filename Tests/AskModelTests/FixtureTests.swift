import AskModel
import Foundation
import Testing

/// Golden fixtures: `Fixtures/<name>.json` holds exactly the encoder's output for a sample value.
///
/// To regenerate after an intentional format change, run
/// `ASKRELAY_REGENERATE_FIXTURES=1 swift test --filter AskModelTests.FixtureTests`, review the diff, and
/// commit it. Without the variable the tests only compare.
@Suite("Golden fixtures")
struct FixtureTests {
    static let sourceDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures")
    static let regenerate = ProcessInfo.processInfo.environment["ASKRELAY_REGENERATE_FIXTURES"] == "1"

    static func bundledDirectory() throws -> URL {
        try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
    }

    @Test("fixture decodes to the sample and re-encodes byte-identically", arguments: Samples.fixtures)
    func fixture(_ fixture: Fixture) throws {
        if Self.regenerate {
            try Data(fixture.encode()).write(to: Self.sourceDirectory.appendingPathComponent(fixture.fileName))
        }
        let directory = Self.regenerate ? Self.sourceDirectory : try Self.bundledDirectory()
        let bytes = try [UInt8](Data(contentsOf: directory.appendingPathComponent(fixture.fileName)))
        let (equal, reencoded) = try fixture.decodeAndReencode(bytes)
        #expect(equal, "\(fixture.fileName) does not hold the sample value")
        #expect(reencoded == bytes, "\(fixture.fileName) is not the canonical encoding")
        #expect(try fixture.encode() == bytes)
    }

    @Test("there is one fixture per message kind and no stray files")
    func inventory() throws {
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: Self.bundledDirectory().path))
        for kind in MessageKind.allCases {
            #expect(names.contains(kind.rawValue + ".json"), "missing fixture for \(kind.rawValue)")
        }
        #expect(names == Set(Samples.fixtures.map(\.fileName)))
    }

    @Test("docs/protocol-messages.md quotes every fixture byte for byte")
    func documentationIsCurrent() throws {
        let doc = Self.sourceDirectory.deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/protocol-messages.md")
        let text = try String(contentsOf: doc, encoding: .utf8)
        for fixture in Samples.fixtures {
            let json = String(decoding: try fixture.encode(), as: UTF8.self)
            #expect(text.contains("```json\n" + json + "\n```"), "docs lack the \(fixture.fileName) example")
        }
        for kind in MessageKind.allCases {
            #expect(text.contains("| `\(kind.rawValue)` |"), "docs lack the \(kind.rawValue) row")
        }
    }
}
