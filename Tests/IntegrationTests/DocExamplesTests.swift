import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// Every fenced `sh` block of README.md and docs/*.md runs as written against the release build, so that a
/// documented command that fails fails `make test`. How a block is run, and why a few are not, is in
/// docs/contributing.md ("Documented examples"); the lists below are the only exceptions.
@Suite("documented sh examples run against the release build", .serialized, .timeLimit(.minutes(15)))
struct DocExamplesTests {
    @Test("every sh block of the document runs, in order, in one fresh folder", arguments: DocExamples.documents)
    func document(_ document: String) throws {
        let release = Repository.root.appendingPathComponent(".build/release")
        for executable in ["askrelay", "askrelay-broker", "askrelay-limits", "askrelay-parent", "askrelay-child"] {
            guard FileManager.default.isExecutableFile(atPath: release.appendingPathComponent(executable).path) else {
                let missing = "\(release.path)/\(executable)"
                Issue.record("no release build: \(missing) is missing; run `swift build -c release` (make test does)")
                return
            }
        }
        let blocks = try DocExamples.blocks(in: document)
        let commands = try DocExamples.variablesByCommand()
        let folder = try DocExamples.makeFolder()
        defer { folder.cleanup() }
        for block in blocks {
            let exceptions = DocExamples.exceptions.filter { $0.matches(block) }
            if let skip = exceptions.lazy.compactMap(\.skipReason).first {
                print("\(block.location): skipped: \(skip)")
                continue
            }
            let foreign = DocExamples.foreignVariables(for: DocExamples.body(of: block), commands: commands)
            let started = ContinuousClock.now
            let result = try DocExamples.run(block, exceptions: exceptions, in: folder, foreign: foreign)
            // One line per block, so a slow example is found in the test log (docs/contributing.md).
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            print("\(block.location): ran in \(String(format: "%.1f", seconds)) s")
            if let failure = result.failure {
                // A block that failed elsewhere may not have reached its known-failing lines.
                Issue.record(Comment(rawValue: failure))
                continue
            }
            for known in exceptions {
                guard let (branch, intermittent) = known.knownFailing else { continue }
                // Once the fix is merged the line passes, and withKnownIssue reports that no issue was recorded
                // (unless the failure is intermittent: then a pass says nothing).
                let comment: Comment = "\(block.location): '\(known.contains)' fails until \(branch): \(known.reason)"
                withKnownIssue(comment, isIntermittent: intermittent) {
                    for line in result.knownFailures where line.contains(known.contains) {
                        Issue.record(
                            Comment(rawValue: "\(block.location): known failing: \(line)\n\(result.outputTail)")
                        )
                    }
                }
            }
        }
    }

    @Test(
        "the value given to other commands' variables is refused by every command that reads it",
        arguments: [
            "askrelay-broker", "askrelay-limits", "askrelay-parent", "askrelay-child", "askrelay simulate",
            "askrelay load",
        ]
    )
    func foreignValueIsRefused(_ path: String) throws {
        // Positive evidence for the blocks above: a block passes with these variables set only if no process it
        // starts, directly or through simulate, load or a cluster, read one.
        let variables = try #require(try DocExamples.variablesByCommand().first { $0.path == path }?.variables)
        #expect(!variables.isEmpty)
        let words = path.split(separator: " ").map(String.init)
        let run = Tool.run(
            Executables.built.appendingPathComponent(words[0]).path,
            Array(words.dropFirst()),
            environment: Tool.cleanEnvironment.merging(variables.map { ($0, DocExamples.foreignValue) }) { $1 }
        )
        #expect(run.status == 64, "\(path): \(run.stderr)")
        #expect(run.stderr.contains("environment variable ASKRELAY_"), "\(path): \(run.stderr)")
    }

    @Test("a block runs the commands it names: their variables are its own, every other command's are foreign")
    func foreignVariablesOfABlock() throws {
        let commands = [
            (path: "askrelay simulate", variables: Set(["ASKRELAY_FAMILIES", "ASKRELAY_SEED"])),
            (path: "askrelay-parent", variables: Set(["ASKRELAY_FAMILIES", "ASKRELAY_POLICY"])),
            (path: "askrelay load", variables: Set(["ASKRELAY_LOAD_MODE"])),
            (path: "askrelay-broker", variables: Set(["ASKRELAY_MAX_QUEUE"])),
        ]
        let foreign = DocExamples.foreignVariables(
            for: [".build/release/askrelay simulate --scenario x.json &", "echo ASKRELAY_MAX_QUEUE is set above"],
            commands: commands
        )
        #expect(Set(foreign.keys) == ["ASKRELAY_POLICY", "ASKRELAY_LOAD_MODE"])
        #expect(DocExamples.runs("askrelay-broker", in: "(askrelay-broker --endpoint x) &"))
        #expect(!DocExamples.runs("askrelay-broker", in: "cat askrelay-broker.log"))
        #expect(!DocExamples.runs("askrelay load", in: "askrelay loader"))
        let aliased = DocExamples.foreignVariables(
            for: ["B=.build/release/askrelay", "$B load --mode flows", "${B} loader"],
            commands: commands
        )
        #expect(Set(aliased.keys) == ["ASKRELAY_FAMILIES", "ASKRELAY_SEED", "ASKRELAY_POLICY", "ASKRELAY_MAX_QUEUE"])
    }

    @Test("every exception and substitution names a block that exists, so the lists cannot go stale")
    func exceptionsMatchBlocks() throws {
        let blocks = try DocExamples.documents.flatMap { try DocExamples.blocks(in: $0) }
        for exception in DocExamples.exceptions {
            #expect(
                blocks.contains { exception.matches($0) },
                "no sh block in \(exception.file) contains '\(exception.contains)'"
            )
        }
        for substitution in DocExamples.substitutions {
            let used = blocks.contains { block in block.lines.contains { substitution.apply(to: $0) != nil } }
            #expect(used, "no sh block has a line matching the substitution /\(substitution.pattern)/")
        }
    }

    @Test("blocks are found with their line, a failing block names its file, line and output, and its processes end")
    func runnerReportsAndCleansUp() throws {
        let folder = try DocExamples.makeFolder()
        defer { folder.cleanup() }
        let markdown = """
            text
            ```json
            {"not": "run"}
            ```
            ```
            echo not run either
            ```
            ```sh
            mkfifo ready
            sh -c 'trap "echo stopped by SIGTERM > term; exit 0" TERM; echo > ready; while :; do sleep 1; done' &
            echo "started $!" > pid
            read -r _ < ready
            echo about to fail
            false
            echo never
            ```
            """
        let path = folder.root.appendingPathComponent("sample.md").path
        try markdown.write(toFile: path, atomically: true, encoding: .utf8)
        let blocks = try DocExamples.blocks(inFile: path, named: "sample.md")
        #expect(blocks.count == 1)
        let block = try #require(blocks.first)
        #expect(block.line == 8)
        #expect(block.lines.count == 7)
        let result = try DocExamples.run(block, exceptions: [], in: folder)
        let failure = try #require(result.failure)
        #expect(failure.hasPrefix("sample.md:8: exited 1"), "\(failure)")
        #expect(failure.contains("    false\n"), "the block as run")
        #expect(result.outputTail.contains("about to fail"))
        #expect(!result.outputTail.contains("never"))
        // The background loop was in the block's session, was sent SIGTERM at the end, and is gone. The block reads
        // from the fifo until the loop has set its trap, so the SIGTERM cannot come before the trap does.
        let term = try? String(contentsOf: folder.work.appendingPathComponent("term"), encoding: .utf8)
        #expect(term == "stopped by SIGTERM\n", "the block's background process did not see SIGTERM")
        let pidText = try String(contentsOf: folder.work.appendingPathComponent("pid"), encoding: .utf8)
        let pid = try #require(Int32(pidText.split(separator: " ")[1].trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(pid, 0) != 0 || ProcessState.isZombie(pid), "the block's background process \(pid) still runs")
    }
}

extension DocExamplesTests {
    @Test("a failed background command fails its block; no signal is blocked; a known failure does not stop a block")
    func backgroundAndKnownFailures() throws {
        let folder = try DocExamples.makeFolder()
        defer { folder.cleanup() }
        // The loop ends once the shell has reaped the background command, so its status is known at the end.
        let background = DocBlock(
            file: "b.md",
            line: 3,
            lines: ["sh -c 'exit 3' & pid=$!", "while kill -0 \"$pid\" 2>/dev/null; do :; done"]
        )
        let failure = try #require(try DocExamples.run(background, exceptions: [], in: folder).failure)
        #expect(failure.hasPrefix("b.md:3: exited 3"), "\(failure)")
        #expect(failure.contains("a command started in the background exited 3"))

        // A command of a block starts with no signal blocked, as from a terminal: `kill` and the cleanup's SIGTERM
        // reach it (a test runner's thread blocks SIGTERM, and a process spawned from it would inherit that).
        let mask = DocBlock(file: "m.md", line: 1, lines: ["grep '^SigBlk:' /proc/self/status", "false"])
        let masked = try DocExamples.run(mask, exceptions: [], in: folder)
        #expect(masked.outputTail.contains("SigBlk:\t0000000000000000"), "\(masked.outputTail)")

        let known = DocException(file: "k.md", contains: "exit 5", treatment: .knownFailing(branch: "x"), reason: "r")
        let block = DocBlock(file: "k.md", line: 1, lines: ["sh -c 'exit 5'", "echo after"])
        let result = try DocExamples.run(block, exceptions: [known], in: folder)
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.knownFailures == ["sh -c 'exit 5'"])
        #expect(result.outputTail.contains("after"))
    }
}

/// One fenced ```sh block: where it is, and its lines.
struct DocBlock: Sendable, CustomStringConvertible {
    var file: String
    /// 1-based line of the opening fence.
    var line: Int
    var lines: [String]
    var location: String { "\(file):\(line)" }
    var text: String { lines.joined(separator: "\n") }
    var description: String { location }
}

/// What is done differently for a block: each entry says why.
struct DocException: Sendable {
    enum Treatment: Sendable {
        /// Not run.
        case skip
        /// A command that runs until stopped: it passes when it is still running after this long (its flags and
        /// files were accepted), and is then stopped.
        case keepsRunning(seconds: Int)
        /// Run with a longer time limit than `DocExamples.defaultLimit`.
        case timeLimit(seconds: Int)
        /// The lines containing `contains` fail until another branch's fix is merged: each runs in an `if`, so the
        /// rest of the block still runs, and its failure is a known issue; once it passes the test says so.
        case knownFailing(branch: String, intermittent: Bool = false)
    }

    var file: String
    /// A piece of the block's text that identifies it (line numbers move when the prose around it changes).
    var contains: String
    var treatment: Treatment
    var reason: String

    func matches(_ block: DocBlock) -> Bool { block.file == file && block.text.contains(contains) }

    var skipReason: String? {
        if case .skip = treatment { return reason }
        return nil
    }

    var knownFailing: (branch: String, intermittent: Bool)? {
        if case .knownFailing(let branch, let intermittent) = treatment { return (branch, intermittent) }
        return nil
    }
}

/// A line of a block replaced before it runs: the test runs against the release build `make test` has built, and
/// stands in for a few commands that would rebuild, recurse into the test suite, or run for minutes.
struct DocSubstitution: Sendable {
    var pattern: String
    var replacement: String
    var reason: String

    /// The replaced line, or nil when the pattern does not match the whole line.
    func apply(to line: String) -> String? {
        guard let expression = try? NSRegularExpression(pattern: "^" + pattern + "$") else { return nil }
        let range = NSRange(line.startIndex..., in: line)
        guard expression.firstMatch(in: line, range: range) != nil else { return nil }
        return expression.stringByReplacingMatches(in: line, range: range, withTemplate: replacement)
    }
}

enum DocExamples {
    /// The documents whose sh blocks run: README.md and every docs/*.md.
    static let documents: [String] = {
        let docs =
            (try? FileManager.default.contentsOfDirectory(atPath: Repository.root.appendingPathComponent("docs").path))
            ?? []
        return ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
    }()

    static let defaultLimit = 60

    /// A trailing `# comment` kept after a substitution (`(\s+#.*)?` is group 1 wherever it is used).
    private static let comment = #"(\s+#.*)?"#

    static let substitutions: [DocSubstitution] = [
        DocSubstitution(
            pattern: #"swift build -c release"# + comment,
            replacement: ": swift build -c release$1",
            reason: "the examples run against the release build that make test has just built"
        ),
        DocSubstitution(
            pattern: #"make simulate ARGS="([^"]*)""# + #"(\s+#.*)?"#,
            replacement: ".build/release/askrelay simulate $1$2",
            reason: "make simulate is `make release` and then this command"
        ),
        DocSubstitution(
            pattern: #"make simulate"# + comment,
            replacement: ": make simulate$1",
            reason: """
                make simulate is `make release` and then `.build/release/askrelay simulate`, the defaults' run of \
                about 25 s, which docs/simulation.md's first block runs as written
                """
        ),
        DocSubstitution(
            pattern: #"make test"# + comment,
            replacement: ": make test$1",
            reason: "it is the run this test is part of"
        ),
        DocSubstitution(
            pattern: #"make bench-compare BASE=\S+( ROUNDS=[0-9]+)?"# + comment,
            replacement: ": make bench-compare$2",
            reason: """
                builds another revision in release and measures for minutes; BenchCompareTests runs \
                scripts/bench-compare.py, what the target runs, with the release build as both builds
                """
        ),
        DocSubstitution(
            pattern: #"sudo python3 scripts/shard-capacity\.py .*"#,
            replacement: ": shard-capacity",
            reason: """
                four shard counts, three rounds of 12 s each: minutes on a quiet machine; ShardCapacityTests runs \
                the script briefly for k = 1, 2
                """
        ),
        DocSubstitution(
            pattern: #"make fuzz"# + comment,
            replacement: ": make fuzz$1",
            reason: "10 minutes; make test runs the same target for 60 s (fuzz-smoke)"
        ),
        DocSubstitution(
            pattern: #"make power-test( POWER_CUTS=[0-9]+)?"# + comment,
            replacement: ": make power-test$1$2",
            reason: "minutes of power cuts; make test runs the same suites with 6 cuts per mode"
        ),
    ]

    static let exceptions: [DocException] = [
        DocException(
            file: "docs/deployment.md",
            contains: "sudo install -m 0755",
            treatment: .skip,
            reason: "installs into /usr/local/bin of the machine running the tests"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "sudo useradd",
            treatment: .skip,
            reason: "creates a system user on the machine running the tests"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "sudo install -d",
            treatment: .skip,
            reason: """
                writes /etc/askrelay and /var/lib/askrelay (deploymentUnitsStart starts the units' commands from a \
                temporary folder)
                """
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "systemctl",
            treatment: .skip,
            reason: "needs systemd as the init system (deploymentUnitsStart starts the units' commands without it)"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "docker compose",
            treatment: .skip,
            reason: "needs a container engine and builds the image (ComposeTests checks the compose file)"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "sudo -u askrelay sqlite3",
            treatment: .skip,
            reason: "needs the service user and the journal of a broker installed as above"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "make deploy-test",
            treatment: .skip,
            reason: "needs a container engine; run by make deploy-test"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "kubectl create secret",
            treatment: .skip,
            reason: """
                needs a Kubernetes cluster (KubernetesManifestTests validates the manifests offline; make deploy-test \
                plays them under podman)
                """
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "docker run",
            treatment: .skip,
            reason: "needs a container engine and the Compose volume"
        ),
        DocException(
            file: "docs/deployment.md",
            contains: "--filter MultiHostTests",
            treatment: .skip,
            reason: "runs a test suite, which make test runs itself"
        ),
        DocException(
            file: "docs/protocol-messages.md",
            contains: "ASKRELAY_REGENERATE_FIXTURES",
            treatment: .skip,
            reason: "runs a test suite, which make test runs itself, and rewrites the checked-in fixtures"
        ),
        DocException(
            file: "docs/reliability.md",
            contains: "swift test",
            treatment: .skip,
            reason: "runs test suites, which make test runs itself"
        ),
        DocException(
            file: "docs/testing.md",
            contains: "swift package init",
            treatment: .skip,
            reason: "the tutorial's steps; make test plays the whole page in a folder of its own (make package-test)"
        ),
        DocException(
            file: "docs/testing.md",
            contains: "swift test",
            treatment: .skip,
            reason: "the tutorial's steps; make test plays the whole page in a folder of its own (make package-test)"
        ),
        DocException(
            file: "docs/testing.md",
            contains: "askrelay\" test stories",
            treatment: .skip,
            reason: "the tutorial's steps; make test plays the whole page in a folder of its own (make package-test)"
        ),
        DocException(
            file: "docs/simulation.md",
            contains: "ip netns exec",
            treatment: .skip,
            reason: "needs root and network namespaces made by hand (MultiHostTests runs the same command line)"
        ),
        DocException(
            file: "docs/workers.md",
            contains: "askrelay-parent --broker",
            treatment: .keepsRunning(seconds: 3),
            reason: "a parent worker serves until SIGTERM"
        ),
        DocException(
            file: "docs/workers.md",
            contains: "askrelay-child --broker",
            treatment: .keepsRunning(seconds: 3),
            reason: "the child waits for a broker, which this example does not start"
        ),
        DocException(
            file: "docs/simulation.md",
            contains: "askrelay simulate",
            treatment: .timeLimit(seconds: 400),
            reason: "five simulations of 15-40 s each on a shared 2-core machine"
        ),
        DocException(
            file: "README.md",
            contains: "make simulate",
            treatment: .timeLimit(seconds: 180),
            reason: "the default simulation takes 20-40 s, more on a loaded machine"
        ),
        DocException(
            file: "docs/stories.md",
            contains: "askrelay test docs/stories",
            treatment: .skip,
            reason: """
                AskRelayTestCommandTests.docsStoriesPass runs this command on docs/stories in make test and checks \
                its PASS lines, its summary and out.xml (every story against fresh processes: half a minute or more)
                """
        ),
    ]

    /// The sh blocks of a document of the checkout (`README.md`, `docs/x.md`).
    static func blocks(in document: String) throws -> [DocBlock] {
        try blocks(inFile: Repository.root.appendingPathComponent(document).path, named: document)
    }

    static func blocks(inFile path: String, named name: String) throws -> [DocBlock] {
        let lines = try String(contentsOfFile: path, encoding: .utf8).components(separatedBy: "\n")
        var blocks: [DocBlock] = []
        var open: DocBlock?
        var inOtherFence = false
        for (index, line) in lines.enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var block = open {
                if trimmed == "```" {
                    blocks.append(block)
                    open = nil
                } else {
                    block.lines.append(line)
                    open = block
                }
            } else if inOtherFence {
                // Only a bare fence closes a fenced block; a "```sh" line inside another block is its text.
                if trimmed == "```" { inOtherFence = false }
            } else if trimmed == "```sh" {
                open = DocBlock(file: name, line: index + 1, lines: [])
            } else if trimmed.hasPrefix("```") {
                inOtherFence = true
            }
        }
        return blocks
    }

    struct Folder {
        /// Removed at the end (``cleanup()``): holds `work` and the scripts and logs.
        let directory: TempDirectory
        var root: URL { directory.url }
        /// The blocks' working directory: `.build` and `docs` link to the checkout's.
        var work: URL { root.appendingPathComponent("work") }

        func cleanup() { directory.cleanup() }
    }

    static func makeFolder() throws -> Folder {
        let folder = Folder(directory: TempDirectory(prefix: "askrelay-docs"))
        let root = folder.root
        let work = folder.work
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("scripts"),
            withIntermediateDirectories: true
        )
        for name in [".build", "docs"] {
            try FileManager.default.createSymbolicLink(
                at: work.appendingPathComponent(name),
                withDestinationURL: Repository.root.appendingPathComponent(name)
            )
        }
        return folder
    }

    /// What every command refuses in any of its variables; given to the variables of the commands a block does not
    /// run (``foreignVariables(for:commands:)``).
    static let foreignValue = "foreign-value-of-another-command"

    /// Every command's and subcommand's `ASKRELAY_*` variables, from its `--help`.
    static func variablesByCommand() throws -> [(path: String, variables: Set<String>)] {
        try HelpDocsTests.commands().map { command in (command.path, Set(command.options.compactMap(\.environment))) }
    }

    /// The variables of the commands `body` does not run, each set to ``foreignValue``: a documented command must
    /// pass with other commands' settings in its environment, and so must every process it starts (a variable of
    /// `askrelay simulate`'s, `ASKRELAY_FAMILIES`, once reached the parents it started). A variable that the block
    /// names itself, or that a command it runs reads too, is left out.
    static func foreignVariables(
        for body: [String],
        commands: [(path: String, variables: Set<String>)]
    ) -> [String: String] {
        let text = expandingCommandVariables(body.joined(separator: "\n"))
        var own: Set<String> = []
        var all: Set<String> = []
        for command in commands {
            all.formUnion(command.variables)
            if runs(command.path, in: text) { own.formUnion(command.variables) }
        }
        let foreign = all.subtracting(own).filter { !text.contains($0) }
        return Dictionary(uniqueKeysWithValues: foreign.map { ($0, foreignValue) })
    }

    /// Whether `text` runs the command `path` (`askrelay simulate`, `askrelay-broker`): its words as a command, not
    /// inside another word or file name.
    static func runs(_ path: String, in text: String) -> Bool {
        let words = path.split(separator: " ").map { NSRegularExpression.escapedPattern(for: String($0)) }
        let pattern = "(^|[\\s/;|&(])" + words.joined(separator: "\\s+") + "(?=$|[\\s;|&)])"
        return text.range(of: pattern, options: .regularExpression) != nil
    }

    /// `text` with the shell variables it sets to a command (`B=.build/release/askrelay`) replaced by that command
    /// where they are used (`$B load` → `.build/release/askrelay load`).
    static func expandingCommandVariables(_ text: String) -> String {
        var expanded = text
        let assignment = /(?m)(?:^|[\s;])([A-Za-z_][A-Za-z0-9_]*)=([^\s;'"]*askrelay[a-z-]*)(?=$|[\s;])/
        for match in text.matches(of: assignment) {
            let (name, command) = (String(match.output.1), String(match.output.2))
            expanded = expanded.replacingOccurrences(of: "${\(name)}", with: command)
            expanded = expanded.replacingOccurrences(
                of: "\\$\(name)(?![A-Za-z0-9_])",
                with: NSRegularExpression.escapedTemplate(for: command),
                options: .regularExpression
            )
        }
        return expanded
    }

    /// A block's lines as run: every substitution applied.
    static func body(of block: DocBlock) -> [String] {
        block.lines.map { line in substitutions.lazy.compactMap { $0.apply(to: line) }.first ?? line }
    }

    /// The environment of a block: the test's, without ASKRELAY_* settings, with the release build first on PATH
    /// (for examples that call `askrelay ...` as if installed), and ``quickMeasurements``.
    static var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { key, _ in !key.hasPrefix("ASKRELAY_") }
        environment.merge(quickMeasurements) { $1 }
        let release = Repository.root.appendingPathComponent(".build/release").path
        environment["PATH"] = release + ":" + (environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin")
        return environment
    }

    /// Benchmarks and load runs measure briefly: a block shows that the command runs and prints its figures, not
    /// what they are (`make bench` measures). A flag written in a block still wins over its variable.
    static let quickMeasurements = [
        "ASKRELAY_BENCH_ROUNDS": "1", "ASKRELAY_BENCH_SECONDS": "0.2", "ASKRELAY_LOAD_DURATION": "1s",
        "ASKRELAY_LOAD_WARMUP": "200ms",
    ]

    private static let sessionMarker = "doc-example-session "
    private static let exitMarker = "doc-example-exit "

    struct BlockResult {
        /// nil when the block passed, else a message naming the file, the block's line and its output.
        var failure: String?
        /// The known-failing lines that failed.
        var knownFailures: [String]
        var outputTail: String
    }

    private static let knownFailureMarker = "doc-example-known-failure "

    /// Runs one block under `setsid bash -euo pipefail` in `folder.work`, then ends every process left in its
    /// session. A command started in the background (`&`) that has already exited non-zero when the block ends
    /// fails the block too.
    /// - Parameter foreign: variables added to the block's environment (``foreignVariables(for:commands:)``).
    static func run(
        _ block: DocBlock,
        exceptions: [DocException],
        in folder: Folder,
        foreign: [String: String] = [:]
    ) throws -> BlockResult {
        var limit = defaultLimit
        var keepsRunning: Int?
        for exception in exceptions {
            switch exception.treatment {
            case .timeLimit(let seconds): limit = seconds
            case .keepsRunning(let seconds): keepsRunning = seconds
            case .skip, .knownFailing: break
            }
        }
        let body = body(of: block)
        let known = exceptions.filter { $0.knownFailing != nil }.map(\.contains)
        let scriptBody = body.enumerated().flatMap { index, line -> [String] in
            guard known.contains(where: { line.contains($0) }) else { return [line] }
            return ["if ! (", line, "); then echo \"\(knownFailureMarker)\(index)\"; fi"]
        }
        let name = "\(block.file.replacingOccurrences(of: "/", with: "_"))-\(block.line)"
        let script = folder.root.appendingPathComponent("scripts/\(name).sh")
        let jobs = folder.root.appendingPathComponent("scripts/\(name).jobs").path
        let prelude = [
            // The shell is the session leader: its pid is the session id, printed first for the cleanup.
            "echo \"\(sessionMarker)$$\"",
            // The shell says when it exits, and how: Process learns of the exit only once every process that
            // inherited its stdout has gone too, which a background server of the block never does by itself.
            "trap 'echo \"\(exitMarker)$?\"' EXIT",
            "exec 2>&1",
            "cd '\(folder.work.path)'",
        ]
        // `jobs -p` into a file, not `$(jobs -p)`: a command substitution's subshell does not list every job.
        let epilogue = [
            "jobs -p > '\(jobs)'",
            "while read -r pid; do",
            "  if ! kill -0 \"$pid\" 2>/dev/null; then",
            "    status=0; wait \"$pid\" || status=$?",
            "    if [ \"$status\" != 0 ]; then",
            "      echo \"a command started in the background exited $status\"; exit \"$status\"",
            "    fi",
            "  fi",
            "done < '\(jobs)'",
        ]
        try (prelude + scriptBody + epilogue).joined(separator: "\n").appending("\n")
            .write(to: script, atomically: true, encoding: .utf8)
        let started = ContinuousClock.now
        let logs = folder.root.path
        let process = try withDefaultSignalMask {
            try RelayProcess(
                "setsid",
                ["--wait", "/bin/bash", "-euo", "pipefail", script.path],
                logDirectory: logs,
                executableURL: URL(fileURLWithPath: "/usr/bin/setsid"),
                environment: environment.merging(foreign) { $1 }
            )
        }
        let session: Int32?
        do {
            let line = try process.waitForLine(startingWith: sessionMarker, timeout: .seconds(20))
            session = Int32(line.dropFirst(sessionMarker.count))
        } catch {
            session = nil
        }
        let waited = keepsRunning ?? limit
        let exitLine = try? process.waitForLine(startingWith: exitMarker, timeout: .seconds(waited))
        let elapsed = ContinuousClock.now - started
        if let session { endSession(session) }
        if (try? process.wait(timeout: .seconds(10)).code) == nil { process.kill9() }
        let exited = exitLine != nil
        let status = exitLine.flatMap { Int32($0.dropFirst(exitMarker.count)) } ?? -1

        let verdict: String?
        switch (keepsRunning, exited) {
        case (.some(let seconds), true):
            verdict = "exited \(status) within \(seconds) s; it should keep running until stopped"
        case (.some, false):
            verdict = nil
        case (nil, false):
            verdict = "did not finish within its time limit of \(limit) s"
        case (nil, true):
            verdict = status == 0 ? nil : "exited \(status)"
        }
        let output = process.output.filter { !$0.hasPrefix(sessionMarker) && !$0.hasPrefix(exitMarker) }
        let knownFailures = output.filter { $0.hasPrefix(knownFailureMarker) }.compactMap { line in
            Int(line.dropFirst(knownFailureMarker.count)).flatMap { body.indices.contains($0) ? body[$0] : nil }
        }
        let stderr = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
        let tail =
            "output (last 80 lines):\n" + output.suffix(80).map { "    " + $0 }.joined(separator: "\n")
            + (stderr.isEmpty ? "" : "\nsetsid: \(stderr)")
        guard let verdict else { return BlockResult(failure: nil, knownFailures: knownFailures, outputTail: tail) }
        let seconds = elapsed / .seconds(1)
        let failure = """
            \(block.location): \(verdict) after \(String(format: "%.1f", seconds)) s
            block, as run:
            \(body.map { "    " + $0 }.joined(separator: "\n"))
            \(tail)
            """
        return BlockResult(failure: failure, knownFailures: knownFailures, outputTail: tail)
    }

    /// Runs `launch` on a thread of its own that blocks no signal. A child process starts with the signal mask of
    /// the thread that spawned it, and the test runner's threads block SIGTERM among others: a block started from
    /// one of them could not be stopped by `kill`, nor could the commands it starts.
    static func withDefaultSignalMask(_ launch: @escaping @Sendable () throws -> RelayProcess) throws -> RelayProcess {
        let outcome = LaunchOutcome()
        let thread = Thread {
            var none = sigset_t()
            sigemptyset(&none)
            pthread_sigmask(SIG_SETMASK, &none, nil)
            outcome.finish(Result { try launch() })
        }
        thread.start()
        return try outcome.wait().get()
    }

    /// SIGTERM to every process of the session (a drain, as a person's Ctrl-C or `kill` would), then SIGKILL to
    /// whatever is left after 15 s.
    static func endSession(_ session: Int32) {
        for signal in [SIGTERM, SIGKILL] {
            let members = sessionMembers(session)
            if members.isEmpty { return }
            for pid in members { kill(pid, signal) }
            let deadline = ContinuousClock.now + .seconds(signal == SIGTERM ? 15 : 5)
            while !sessionMembers(session).isEmpty && ContinuousClock.now < deadline {
                // A poll with a deadline, not a readiness wait: these processes are not our children, so no wait()
                // or termination handler tells us when they end, and /proc is all there is to read.
                Thread.sleep(forTimeInterval: 0.05)  // allowed: see above
            }
        }
    }

    /// Live (not zombie) processes whose session id is `session`, from /proc/<pid>/stat.
    static func sessionMembers(_ session: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> Int32? in
            guard let pid = Int32(entry), let fields = ProcessState.statFields(pid) else { return nil }
            // After "pid (comm)": state ppid pgrp session ...
            guard fields.count > 3, fields[0] != "Z", Int32(fields[3]) == session else { return nil }
            return pid
        }
    }
}

/// docs/deployment.md's systemd units start as written: each unit's `ExecStart` runs with its `EnvironmentFile`, both
/// taken from the page, with `/usr/local/bin` as the release build and `/etc/askrelay` and `/var/lib/askrelay` in a
/// temporary folder (systemd itself is not needed: it only starts the same command line). The units start the way
/// the page's `systemctl enable --now` line does: the broker, the limits worker, parent@1, parent@2, child@1...4.
extension DocExamplesTests {
    @Test("the systemd units of docs/deployment.md start as written and stop cleanly on SIGTERM")
    func deploymentUnitsStart() throws {
        let page = try DeploymentPage(Repository.root.appendingPathComponent("docs/deployment.md").path)
        let folder = TempDirectory(prefix: "askrelay-units")
        defer { folder.cleanup() }
        let root = folder.url
        let release = Repository.root.appendingPathComponent(".build/release").path
        func rewrite(_ text: String) -> String {
            text.replacingOccurrences(of: "/usr/local/bin", with: release)
                .replacingOccurrences(of: "/etc/askrelay", with: root.path + "/etc/askrelay")
                .replacingOccurrences(of: "/var/lib/askrelay", with: root.path + "/var/lib/askrelay")
        }
        // What the page says to put in place before the first start.
        let etc = root.appendingPathComponent("etc/askrelay")
        try FileManager.default.createDirectory(at: etc, withIntermediateDirectories: true)
        for (path, content) in page.files {
            try rewrite(content).write(toFile: rewrite(path), atomically: true, encoding: .utf8)
        }
        for needed in ["/etc/askrelay/broker.env", "/etc/askrelay/parent.env", "/etc/askrelay/child.env"] {
            #expect(page.files[needed] != nil, "docs/deployment.md shows no \(needed)")
        }
        // StateDirectory=askrelay (systemd makes it) and the records folder the page has you create.
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("var/lib/askrelay/records"),
            withIntermediateDirectories: true
        )

        let instances: [(unit: String, instance: String?, ready: String)] =
            [("askrelay-broker.service", nil, "ready endpoints="), ("askrelay-limits.service", nil, "ready id=")]
            + ["1", "2"].map { ("askrelay-parent@.service", $0, "ready guardians=") }
            + ["1", "2", "3", "4"].map { ("askrelay-child@.service", $0, "ready children=") }
        var started: [RelayProcess] = []
        defer { for process in started.reversed() { process.stop(grace: .seconds(10)) } }
        for (unitName, instance, ready) in instances {
            let unit = try #require(page.units[unitName], "docs/deployment.md has no unit \(unitName)")
            var command = rewrite(unit.execStart).replacingOccurrences(of: "%H", with: "host1")
            if let instance { command = command.replacingOccurrences(of: "%i", with: instance) }
            let words = command.split(separator: " ").map(String.init)
            var environment = Tool.cleanEnvironment
            for file in unit.environmentFiles {
                guard let text = try? String(contentsOfFile: rewrite(file.path), encoding: .utf8) else {
                    #expect(
                        file.optional,
                        "\(unitName): EnvironmentFile \(file.path) is not optional and the page does not show it"
                    )
                    continue
                }
                for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                    let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
                    if parts.count == 2 { environment[parts[0]] = parts[1] }
                }
            }
            let name = unitName.replacingOccurrences(of: "@.service", with: "@" + (instance ?? ""))
                .replacingOccurrences(of: ".service", with: "")
            let process = try RelayProcess(
                name,
                Array(words.dropFirst()),
                logDirectory: root.path,
                executableURL: URL(fileURLWithPath: words[0]),
                environment: environment
            )
            started.append(process)
            // A worker waits for the broker; each must print its ready line (a usage error exits 64 at once).
            _ = try process.waitForLine(startingWith: ready, timeout: .seconds(60))
        }
        for process in started.reversed() {
            #expect(process.stop(grace: .seconds(20)) == .exited(0), "\(process.name) did not exit 0 on SIGTERM")
        }
        let records = try FileManager.default.contentsOfDirectory(
            atPath: root.appendingPathComponent("var/lib/askrelay/records").path
        )
        #expect(Set(records).isSuperset(of: ["parent-1.jsonl", "child-1.jsonl"]), "records: \(records)")
    }
}

/// The result of a launch on another thread, handed back once.
final class LaunchOutcome: @unchecked Sendable {  // @unchecked: `result` is written before `done` is signalled.
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<RelayProcess, any Error>?

    func finish(_ result: Result<RelayProcess, any Error>) {
        self.result = result
        done.signal()
    }

    func wait() -> Result<RelayProcess, any Error> {
        done.wait()
        return result ?? .failure(ProcessFailure("the launch thread gave no result"))
    }
}

/// The systemd units and configuration files shown in docs/deployment.md.
struct DeploymentPage {
    struct Unit {
        var execStart: String
        var environmentFiles: [(path: String, optional: Bool)]
    }

    /// By file name (`askrelay-broker.service`, `askrelay-parent@.service`).
    var units: [String: Unit] = [:]
    /// Files under /etc/askrelay shown as "`/etc/askrelay/<name>`, for example:" followed by a fenced block.
    var files: [String: String] = [:]

    init(_ path: String) throws {
        let lines = try String(contentsOfFile: path, encoding: .utf8).components(separatedBy: "\n")
        var index = 0
        while index < lines.count {
            let line = lines[index]
            // "`/etc/systemd/system/askrelay-broker.service`:" or "`/etc/askrelay/broker.env`, for example:"
            // The fence follows on the next line, or after one blank line.
            let fence = index + 1 < lines.count && lines[index + 1].isEmpty ? index + 2 : index + 1
            guard line.hasPrefix("`/"), let close = line.dropFirst().firstIndex(of: "`"),
                fence < lines.count, lines[fence].hasPrefix("```")
            else {
                index += 1
                continue
            }
            let named = String(line[line.index(after: line.startIndex)..<close])
            var body: [String] = []
            index = fence + 1
            while index < lines.count && lines[index] != "```" {
                body.append(lines[index])
                index += 1
            }
            if named.hasPrefix("/etc/systemd/system/") {
                let exec =
                    body.first { $0.hasPrefix("ExecStart=") }.map { String($0.dropFirst("ExecStart=".count)) } ?? ""
                let files = body.filter { $0.hasPrefix("EnvironmentFile=") }.map {
                    entry -> (path: String, optional: Bool) in
                    let value = entry.dropFirst("EnvironmentFile=".count)
                    return value.hasPrefix("-") ? (String(value.dropFirst()), true) : (String(value), false)
                }
                units[String(named.dropFirst("/etc/systemd/system/".count))] = Unit(
                    execStart: exec,
                    environmentFiles: files
                )
            } else if named.hasPrefix("/etc/askrelay/") {
                files[named] = body.joined(separator: "\n") + "\n"
            }
            index += 1
        }
    }
}
