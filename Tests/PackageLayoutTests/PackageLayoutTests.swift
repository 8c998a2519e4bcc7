import AskTestKit
import Foundation
import Testing

/// docs/architecture.md's "Targets" tables against Package.swift as SwiftPM reads it (`swift package dump-package`),
/// both ways: a target, product or dependency that one side has and the other lacks fails here; and README.md's
/// "Layout" table has a row for every target under Sources/.
@Suite("Package layout")
struct PackageLayoutTests {
    /// One row of a table: a target (kind, dependencies) or a product (kind, targets).
    struct Entry: Equatable, CustomStringConvertible {
        var kind: String
        var names: Set<String>
        var description: String { "\(kind): " + (names.isEmpty ? "none" : names.sorted().joined(separator: ", ")) }
    }

    struct Layout {
        var targets: [String: Entry] = [:]
        var products: [String: Entry] = [:]
        /// Each target's folder, relative to the package root (Package.swift's `path`, or the default).
        var folders: [String: String] = [:]
    }

    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("docs/architecture.md lists every target and product of Package.swift with the same dependencies")
    func documentedLayoutMatchesPackage() throws {
        let package = try Self.packageLayout()
        let documented = try Self.documentedLayout()
        let targets = Self.differences(package: package.targets, documented: documented.targets, what: "target")
        let products = Self.differences(package: package.products, documented: documented.products, what: "product")
        let found = (targets + products).joined(separator: "\n")
        #expect(found.isEmpty, "docs/architecture.md (## Targets) disagrees with Package.swift:\n\(found)")
    }

    @Test("README.md's Layout table has a row for every target under Sources/")
    func readmeLayoutNamesEveryTarget() throws {
        let package = try Self.packageLayout()
        let text = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let rows = try Self.readmeLayoutPaths(text)
        let folders = Set(package.folders.values.filter { $0.hasPrefix("Sources/") })
        try #require(folders.contains("Sources/AskModel"), "no Sources/ targets read: \(folders.sorted())")
        let missing = folders.filter { folder in !rows.contains { Self.layoutPath($0, covers: folder) } }
        #expect(missing.isEmpty, "README.md (## Layout) has no row for \(missing.sorted().joined(separator: ", "))")
    }

    @Test("the Layout table's paths are read from its first column, a trailing * covering a prefix")
    func readmeLayoutPathsAreRead() throws {
        let text = """
            # AskRelay

            ## Layout

            | path | what |
            |---|---|
            | `Sources/CZeroMQ`, `Sources/CSQLite` | system libraries, not `Sources/Other` |
            | `Sources/askrelay*` | thin executables |

            ## Documentation

            | `Sources/Later` | not in the table |
            """
        let rows = try Self.readmeLayoutPaths(text)
        #expect(rows == ["Sources/CZeroMQ", "Sources/CSQLite", "Sources/askrelay*"])
        #expect(Self.layoutPath("Sources/askrelay*", covers: "Sources/askrelay-broker"))
        #expect(Self.layoutPath("Sources/CSQLite", covers: "Sources/CSQLite"))
        #expect(!Self.layoutPath("Sources/CSQLite", covers: "Sources/CSQLiteExtra"))
        #expect(!Self.layoutPath("Sources/askrelay*", covers: "Sources/AskModel"))
    }

    @Test("a dependency, a target or a product that differs is named")
    func differencesAreNamed() {
        let package = ["A": Entry(kind: "library", names: ["B"]), "C": Entry(kind: "test", names: [])]
        let documented = ["A": Entry(kind: "library", names: ["B", "D"]), "E": Entry(kind: "test", names: [])]
        #expect(
            Self.differences(package: package, documented: documented, what: "target") == [
                "target A: Package.swift has library: B, the doc has library: B, D",
                "target C is in Package.swift but not in the doc",
                "target E is in the doc but not in Package.swift",
            ]
        )
    }

    @Test("every dependency a library or executable target declares is imported by one of its Swift files")
    func declaredDependenciesAreImported() throws {
        let package = try Self.packageLayout()
        var found: [String] = []
        for (name, entry) in package.targets.sorted(by: { $0.key < $1.key })
        where entry.kind == "library" || entry.kind == "executable" {
            guard let folder = package.folders[name] else { continue }
            let files = Self.swiftFiles(in: Self.root.appendingPathComponent(folder))
            if files.isEmpty { continue }  // a C target: its dependencies are headers, not imports
            var imported: Set<String> = []
            for file in files {
                imported.formUnion(Self.importedModules(try String(contentsOf: file, encoding: .utf8)))
            }
            let unused = entry.names.subtracting(imported)
            if !unused.isEmpty {
                found.append(
                    "\(name) depends on \(unused.sorted().joined(separator: ", ")) but no file of it imports that"
                )
            }
        }
        #expect(
            found.isEmpty,
            "Package.swift declares dependencies its targets do not import (drop them, or move what is borrowed):\n\(found.joined(separator: "\n"))"
        )
    }

    @Test("every module of the package a target's Swift files import is among the targets it depends on")
    func importedModulesAreDependedOn() throws {
        let package = try Self.packageLayout()
        try #require(package.targets["AskSimulationTests"] != nil, "Package.swift has no AskSimulationTests")
        var found: [String] = []
        for (name, _) in package.targets.sorted(by: { $0.key < $1.key }) {
            guard let folder = package.folders[name] else { continue }
            var imported: Set<String> = []
            for file in Self.swiftFiles(in: Self.root.appendingPathComponent(folder)) {
                imported.formUnion(Self.importedModules(try String(contentsOf: file, encoding: .utf8)))
            }
            // A module outside the target's dependencies builds only when another target happened to build it first:
            // an incremental build passes, a clean one (CI's) may not.
            let missing = imported.intersection(package.targets.keys)
                .subtracting(Self.dependencyClosure(of: name, in: package)).subtracting([name])
            if !missing.isEmpty {
                found.append("\(name) imports \(missing.sorted().joined(separator: ", ")) but does not depend on it")
            }
        }
        #expect(
            found.isEmpty,
            "Package.swift lacks dependencies its targets import (add them to the target's dependencies):\n\(found.joined(separator: "\n"))"
        )
    }

    @Test("import lines are read with their attributes and kinds")
    func importLinesAreRead() {
        let text = """
            import Foundation
            @testable import AskCLI
            @_exported import func AskModel.parseDuration
              import struct AskLoad.LatencyHistogram
            package import ZeroMQ
            // import AskSimulation
            let imported = "import AskBroker"
            """
        #expect(Self.importedModules(text) == ["Foundation", "AskCLI", "AskModel", "AskLoad", "ZeroMQ"])
        // A multi-line string literal's lines are text (this file's own samples are).
        let quotes = String(repeating: "\"", count: 3)
        let sample = ["import AskBroker", "let sample = \(quotes)", "  import AskLoad", "  \(quotes)", "import ZeroMQ"]
        #expect(Self.importedModules(sample.joined(separator: "\n")) == ["AskBroker", "ZeroMQ"])
    }

    @Test("a client use (askclient-usecheck) depends on AskClient alone and imports no ZeroMQ")
    func clientUseNeedsNoZeroMQ() throws {
        let package = try Self.packageLayout()
        let target = try #require(package.targets["askclient-usecheck"], "Package.swift has no askclient-usecheck")
        #expect(target.names == ["AskClient"], "askclient-usecheck depends on \(target)")
        let folder = try #require(package.folders["askclient-usecheck"])
        let files = Self.swiftFiles(in: Self.root.appendingPathComponent(folder))
        try #require(!files.isEmpty, "no Swift file in \(folder)")
        var imported: Set<String> = []
        for file in files { imported.formUnion(Self.importedModules(try String(contentsOf: file, encoding: .utf8))) }
        // Its code builds centers: it does import the client (else the check would say nothing).
        #expect(imported.contains("AskClient"))
        #expect(imported.isDisjoint(with: ["ZeroMQ", "CZeroMQ"]), "askclient-usecheck imports \(imported.sorted())")
    }

    @Test("AskClient imports ZeroMQ only as internal or package, so no public declaration of it can name a ZeroMQ type")
    func clientImportsZeroMQPrivately() throws {
        let files = Self.swiftFiles(in: Self.root.appendingPathComponent("Sources/AskClient"))
        try #require(!files.isEmpty)
        var importing = 0
        var exported: [String] = []
        for file in files {
            for line in try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
            where Self.importedModules(String(line)).contains("ZeroMQ") {
                importing += 1
                let words = line.split(separator: " ")
                if !(words.first == "internal" || words.first == "package" || words.first == "private"
                    || words.first == "fileprivate")
                {
                    exported.append("\(file.lastPathComponent): \(line)")
                }
            }
        }
        // AskClient does use ZeroMQ (its sockets): without such lines the check below would say nothing.
        #expect(importing > 0)
        #expect(exported.isEmpty, "AskClient imports ZeroMQ publicly:\n\(exported.joined(separator: "\n"))")
    }

    @Test("the wire codec (AskProtocol) and the fuzz target depend on no libzmq, even through another target")
    func wireCodecNeedsNoZeroMQ() throws {
        let package = try Self.packageLayout()
        for name in ["AskProtocol", "askrelay-fuzz", "AskProtocolWireTests"] {
            try #require(package.targets[name] != nil, "Package.swift has no \(name)")
            let reached = Self.dependencyClosure(of: name, in: package)
            #expect(reached.contains("AskModel"), "\(name) reaches \(reached.sorted())")
            #expect(reached.isDisjoint(with: ["ZeroMQ", "CZeroMQ"]), "\(name) reaches \(reached.sorted())")
        }
    }

    /// Every target `name` depends on, directly or through others.
    static func dependencyClosure(of name: String, in layout: Layout) -> Set<String> {
        var reached: Set<String> = []
        var next = Array(layout.targets[name]?.names ?? [])
        while let target = next.popLast() {
            if reached.insert(target).inserted { next += layout.targets[target]?.names ?? [] }
        }
        return reached
    }

    // MARK: - Sources

    static func swiftFiles(in folder: URL) -> [URL] {
        let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
        return (walker?.allObjects as? [URL] ?? []).filter { $0.pathExtension == "swift" }
    }

    /// The modules a Swift file's `import` lines name (`@testable import X`, `import func X.f`, ...).
    static func importedModules(_ text: String) -> Set<String> {
        let accessLevels: Set<Substring> = ["public", "package", "internal", "fileprivate", "private"]
        let kinds: Set<Substring> = ["typealias", "struct", "class", "enum", "protocol", "let", "var", "func"]
        var modules: Set<String> = []
        var inString = false  // inside a multi-line string literal: its lines are text, not imports
        for line in text.split(separator: "\n") {
            if line.components(separatedBy: "\"\"\"").count % 2 == 0 {
                inString.toggle()
                continue
            }
            if inString { continue }
            var words = line.split(separator: " ")[...]
            while let first = words.first, first.hasPrefix("@") || accessLevels.contains(first) {
                words = words.dropFirst()
            }
            guard words.first == "import" else { continue }
            words = words.dropFirst()
            if let kind = words.first, kinds.contains(kind) { words = words.dropFirst() }
            if let path = words.first, let module = path.split(separator: ".").first { modules.insert(String(module)) }
        }
        return modules
    }

    // MARK: - Both sides

    static func differences(package: [String: Entry], documented: [String: Entry], what: String) -> [String] {
        var found: [String] = []
        for name in Set(package.keys).union(documented.keys).sorted() {
            switch (package[name], documented[name]) {
            case (let real?, let doc?) where real != doc:
                found.append("\(what) \(name): Package.swift has \(real), the doc has \(doc)")
            case (_?, nil): found.append("\(what) \(name) is in Package.swift but not in the doc")
            case (nil, _?): found.append("\(what) \(name) is in the doc but not in Package.swift")
            default: break
            }
        }
        return found
    }

    /// The tables under `## Targets` in docs/architecture.md: `| `Name` | kind | `Dep`, `Dep` |` (`—` for none).
    static func documentedLayout() throws -> Layout {
        let text = try String(contentsOf: root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        guard let start = text.range(of: "\n## Targets\n") else {
            throw LayoutError("docs/architecture.md has no '## Targets' section")
        }
        let section = text[start.upperBound...]
        var layout = Layout()
        var table: WritableKeyPath<Layout, [String: Entry]>?
        for line in section.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard line.hasPrefix("|"), cells.count == 3 else { continue }
            switch cells[0] {
            case "Target": table = \.targets
            case "Product": table = \.products
            case _ where cells[0].hasPrefix("---"): continue
            default:
                guard let table else { throw LayoutError("a row before the table's header: \(line)") }
                let names = cells[2] == "—" ? [] : cells[2].split(separator: ",").map { unquoted($0) }
                layout[keyPath: table][unquoted(cells[0][...])] = Entry(kind: cells[1], names: Set(names))
            }
        }
        return layout
    }

    /// The paths in the first column of README.md's `## Layout` table (each in backticks; several to a cell).
    static func readmeLayoutPaths(_ text: String) throws -> [String] {
        guard let start = text.range(of: "\n## Layout\n") else {
            throw LayoutError("README.md has no '## Layout' section")
        }
        var paths: [String] = []
        for line in text[start.upperBound...].split(separator: "\n") {
            if line.hasPrefix("## ") { break }
            guard line.hasPrefix("|"),
                let cell = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().first
            else { continue }
            let quoted = cell.split(separator: "`", omittingEmptySubsequences: false)
            paths += stride(from: 1, to: quoted.count - 1, by: 2).map { String(quoted[$0]) }
        }
        return paths
    }

    /// Whether a Layout row's path names `folder`: the same path, or a prefix of it when the path ends in `*`.
    static func layoutPath(_ path: String, covers folder: String) -> Bool {
        path.hasSuffix("*") ? folder.hasPrefix(path.dropLast()) : path == folder
    }

    static func unquoted(_ cell: Substring) -> String {
        cell.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "`"))
    }

    /// Package.swift as SwiftPM reads it, with a scratch folder of its own (the running `swift test` holds the lock on
    /// .build).
    static func packageLayout() throws -> Layout {
        let folder = TempDirectory(prefix: "layout")
        defer { folder.cleanup() }
        let scratch = folder.url
        let output = scratch.appendingPathComponent("dump.json")
        let errors = scratch.appendingPathComponent("stderr.txt")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let build = scratch.appendingPathComponent("build").path
        process.arguments = ["swift", "package", "--package-path", root.path, "--scratch-path", build, "dump-package"]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errors)
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        guard exited.wait(timeout: .now() + 120) == .success else {
            throw LayoutError("swift package dump-package did not finish within 120 s")
        }
        guard process.terminationStatus == 0 else {
            let message = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
            throw LayoutError("swift package dump-package exited \(process.terminationStatus): \(message)")
        }

        let data = try Data(contentsOf: output)
        guard let json = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let targets = json["targets"] as? [[String: Any]], let products = json["products"] as? [[String: Any]]
        else { throw LayoutError("swift package dump-package printed no targets and products") }

        let kinds = ["system": "system", "regular": "library", "executable": "executable", "test": "test"]
        var layout = Layout()
        for target in targets {
            guard let name = target["name"] as? String, let type = target["type"] as? String else { continue }
            // Each dependency is {"byName" | "target" | "product": [name, ...]}.
            let dependencies = (target["dependencies"] as? [[String: Any]] ?? []).compactMap { dependency in
                dependency.values.first.flatMap { ($0 as? [Any])?.first as? String }
            }
            layout.targets[name] = Entry(kind: kinds[type] ?? type, names: Set(dependencies))
            layout.folders[name] = target["path"] as? String ?? "\(type == "test" ? "Tests" : "Sources")/\(name)"
        }
        for product in products {
            guard let name = product["name"] as? String, let type = product["type"] as? [String: Any] else { continue }
            let kind = type.keys.contains("library") ? "library" : type.keys.first ?? "?"
            layout.products[name] = Entry(kind: kind, names: Set(product["targets"] as? [String] ?? []))
        }
        return layout
    }
}

struct LayoutError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
