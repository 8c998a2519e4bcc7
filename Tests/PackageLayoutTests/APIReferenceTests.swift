import AskTestKit
import Foundation
import Testing

/// docs/api.md against the public interface of the built AskModel, AskClient, AskRelayCluster and AskRelayTesting,
/// both ways: the symbols `make api-docs` would list now (its script, Tests/APIDocs/api-docs.py, run into a temporary
/// file: swift-symbolgraph-extract on the debug build's modules, a few seconds, no compiling, no network) against
/// the symbols the committed page lists. A symbol is its module, its type (or extended type) and its declaration,
/// so a changed signature shows as one missing and one stale.
@Suite("API reference")
struct APIReferenceTests {
    static let modules = ["AskBasics", "AskModel", "AskClient", "AskRelayCluster", "AskRelayTesting"]

    /// One listed symbol: a type (its heading) or a member (a bullet under its type's heading).
    struct Symbol: Hashable, Comparable, CustomStringConvertible {
        var module: String
        /// The type's dotted path; for a member, the path of its type ("" for a top-level function or value).
        var parent: String
        /// A member's declaration as the page shows it; nil for a type.
        var declaration: String?

        var description: String {
            guard let declaration else { return "\(module): type \(parent)" }
            return "\(module): \(parent.isEmpty ? "top level" : parent): \(declaration)"
        }

        static func < (lhs: Symbol, rhs: Symbol) -> Bool { lhs.description < rhs.description }
    }

    @Test(
        "docs/api.md lists every public symbol of AskModel, AskClient, AskRelayCluster and AskRelayTesting, and no other"
    )
    func referenceListsThePublicInterface() throws {
        let folder = TempDirectory(prefix: "api-reference")
        defer { folder.cleanup() }
        let generated = try Self.generate(into: folder.appending("api.md"))
        let built = Self.symbols(inPage: generated)
        for module in Self.modules {
            // The script found the module and the parser reads its page: else the comparison below proves nothing.
            #expect(built.contains { $0.module == module }, "no symbol of \(module) in the generated page")
        }
        let page = try String(
            contentsOf: PackageLayoutTests.root.appendingPathComponent("docs/api.md"),
            encoding: .utf8
        )
        let found = Self.differences(built: built, documented: Self.symbols(inPage: page))
        if !found.isEmpty {
            Issue.record(
                """
                docs/api.md is not the public interface of the built modules: run `make api-docs` and commit \
                docs/api.md (\(found.count) difference\(found.count == 1 ? "" : "s")):
                \(found.joined(separator: "\n"))
                """
            )
        }
    }

    @Test("a symbol missing from the page and a symbol the modules no longer have are each named")
    func differencesAreNamed() {
        let built = Self.symbols(
            inPage: """
                ## AskModel

                ### Top-level functions and values

                - `func parseDuration(_ text: String) -> Duration?` — Parses.

                ### `Address`

                `struct Address` *(structure)*

                - `static let broker: Address` — The broker.
                - `` case `default` `` *(requirement)*

                ### `Date` (extension)

                - `var wireMilliseconds: Int64? { get }`
                """
        )
        #expect(
            built == [
                Symbol(module: "AskModel", parent: "", declaration: "func parseDuration(_ text: String) -> Duration?"),
                Symbol(module: "AskModel", parent: "Address", declaration: nil),
                Symbol(module: "AskModel", parent: "Address", declaration: "static let broker: Address"),
                Symbol(module: "AskModel", parent: "Address", declaration: "case `default`"),
                Symbol(module: "AskModel", parent: "Date", declaration: "var wireMilliseconds: Int64? { get }"),
            ]
        )
        let documented = Self.symbols(
            inPage: """
                ## AskModel

                ### `Address`

                - `static let broker: Address`
                - `static let limits: Address`
                """
        )
        #expect(
            Self.differences(built: built, documented: documented) == [
                "missing from docs/api.md: AskModel: Address: case `default`",
                "missing from docs/api.md: AskModel: Date: var wireMilliseconds: Int64? { get }",
                "missing from docs/api.md: AskModel: top level: func parseDuration(_ text: String) -> Duration?",
                "in docs/api.md but no longer public: AskModel: Address: static let limits: Address",
            ]
        )
    }

    @Test("make api-docs builds the modules and runs the generator into docs/api.md")
    func makeTargetRunsTheGenerator() throws {
        let commands = try MakeTargetsTests.dryRun("api-docs")
        #expect(commands.contains("build --target AskRelayTesting"), "\(commands)")
        #expect(commands.contains("Tests/APIDocs/api-docs.py"), "\(commands)")
    }

    /// The page `make api-docs` would write, written to `path` instead of docs/api.md (with `--missing-docs`, as
    /// docs/contributing.md shows it: its list goes to the output read here, shown only if the script fails).
    static func generate(into path: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", PackageLayoutTests.root.appendingPathComponent("Tests/APIDocs/api-docs.py").path,
            "--modules-dir", modulesFolder, "--output", path, "--missing-docs",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        try #require(
            process.terminationStatus == 0,
            "Tests/APIDocs/api-docs.py exited \(process.terminationStatus): \(text)"
        )
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    /// The built modules: the Modules folder next to the running test program (the build this test belongs to),
    /// else the checkout's debug build.
    static var modulesFolder: String {
        if let program = Bundle.main.executableURL?.resolvingSymlinksInPath() {
            let next = program.deletingLastPathComponent().appendingPathComponent("Modules")
            if FileManager.default.fileExists(atPath: next.appendingPathComponent("AskModel.swiftmodule").path) {
                return next.path
            }
        }
        return PackageLayoutTests.root.appendingPathComponent(".build/debug/Modules").path
    }

    /// The symbols a page lists, read from its structure: `## Module`, `### `Type`` (a type; with "(extension)"
    /// after it, a type of another module that the module extends), `### ` without code (top-level functions and
    /// values), and under each, `- `declaration`` bullets.
    static func symbols(inPage page: String) -> Set<Symbol> {
        var found: Set<Symbol> = []
        var module: String?
        var parent: String?
        for line in page.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("## ") {
                module = String(line.dropFirst(3)).trimmingCharacters(in: .whitespaces)
                parent = nil
            } else if line.hasPrefix("### "), let module {
                let heading = String(line.dropFirst(4))
                guard let path = firstCodeSpan(in: heading) else {
                    parent = ""
                    continue
                }
                parent = path
                if !heading.hasSuffix("(extension)") { found.insert(Symbol(module: module, parent: path)) }
            } else if line.hasPrefix("- "), let module, let parent,
                let declaration = firstCodeSpan(in: String(line.dropFirst(2)), atStart: true)
            {
                found.insert(Symbol(module: module, parent: parent, declaration: declaration))
            }
        }
        return found
    }

    /// The text of the first code span of `text` (a run of backticks to the next run of as many; one space stripped
    /// on each side when both are there), or nil; with `atStart`, only a span that starts the text.
    static func firstCodeSpan(in text: String, atStart: Bool = false) -> String? {
        guard let open = text.firstIndex(of: "`"), !atStart || open == text.startIndex else { return nil }
        let fence = text[open...].prefix { $0 == "`" }
        var search = fence.endIndex
        while let close = text[search...].range(of: String(fence)) {
            let after = text[close.upperBound...]
            let before = close.lowerBound == text.startIndex ? nil : text[text.index(before: close.lowerBound)]
            if after.first != "`" && before != "`" {
                var content = text[fence.endIndex..<close.lowerBound]
                if content.hasPrefix(" ") && content.hasSuffix(" ") && content.count > 2 {
                    content = content.dropFirst().dropLast()
                }
                return String(content)
            }
            search = after.startIndex
        }
        return nil
    }

    /// Each symbol one side has and the other lacks, missing ones first.
    static func differences(built: Set<Symbol>, documented: Set<Symbol>) -> [String] {
        built.subtracting(documented).sorted().map { "missing from docs/api.md: \($0)" }
            + documented.subtracting(built).sorted().map { "in docs/api.md but no longer public: \($0)" }
    }
}
