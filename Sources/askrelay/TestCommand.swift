import AskCLI
import AskSimulation
import AskStories
import Foundation

/// `askrelay test PATH...`: plays story files against fresh real processes and reports like a test runner.
/// See docs/stories.md.
struct TestCommand: Command {
    static let name = "test"
    static let abstract = "play story files against fresh broker and limits processes; JUnit XML for CI"
    static let positionalHelp: String? = "PATH..."
    static let discussion = """
        Each PATH is a story file or a folder (every *.json in it, sorted). Every story is read and checked first;
        a bad one stops the run before anything starts. Each story then gets a fresh askrelay-broker and
        askrelay-limits (found next to askrelay), its children played in-process with AskCenter and its guardians
        over a connection of their own. One line per story (PASS/FAIL), the failing step with what it expected and
        what came, and a summary line.
        Exit codes: 0 every story passed, 1 a story failed, 2 the processes could not be started, 64 bad usage or a
        bad story (the file and the field are named). See docs/stories.md.
        """
    static let options: [OptionSpec] = [
        .value(
            "junit",
            "FILE",
            env: "ASKRELAY_TEST_JUNIT",
            help: "write JUnit XML (one testcase per story) to FILE"
        ),
        .value(
            "logs",
            "DIR",
            env: "ASKRELAY_TEST_LOGS",
            help: "keep each story's process logs in a folder under DIR (default: a new temporary folder)"
        ),
    ]

    let stories: [Story]
    let junit: String?
    let logs: String?

    init(arguments: Arguments) throws {
        guard !arguments.positionals.isEmpty else {
            throw UsageError("give one or more story files or folders, e.g. askrelay test docs/stories")
        }
        do {
            stories = try Story.files(arguments.positionals).map { try Story.load(path: $0) }
        } catch let error as StoryError {
            throw UsageError("\(error)")
        }
        junit = arguments.string("junit")
        logs = arguments.string("logs")
    }

    /// Before anything starts: the JUnit file's folder must be writable, and a run never mixes its logs with another
    /// run's, so `--logs` must be a new or empty folder.
    func validate() throws {
        if let junit {
            let parent = (junit as NSString).deletingLastPathComponent
            var isFolder: ObjCBool = false
            let folder = parent.isEmpty ? "." : parent
            guard FileManager.default.fileExists(atPath: folder, isDirectory: &isFolder), isFolder.boolValue,
                FileManager.default.isWritableFile(atPath: folder)
            else {
                throw UsageError("--junit '\(junit)': '\(folder)' is not a folder this run can write into")
            }
        }
        guard let logs else { return }
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: logs, isDirectory: &isFolder) else { return }
        guard isFolder.boolValue else {
            throw UsageError("--logs '\(logs)' is a file; give --logs a new or empty folder")
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: logs)) ?? []
        if !names.isEmpty {
            throw UsageError(
                "the logs folder '\(logs)' is not empty (it holds \(names.sorted().prefix(3).joined(separator: ", "))"
                    + "\(names.count > 3 ? ", ..." : "")), and a run must not mix its logs with "
                    + "another run's: give --logs a new or empty folder"
            )
        }
    }

    func run() async throws -> Int32 {
        let folder: String
        if let logs {
            folder = logs
        } else {
            folder = (NSTemporaryDirectory() as NSString).appendingPathComponent(
                "askrelay-test-\(ProcessInfo.processInfo.processIdentifier)-\(Int(Date().timeIntervalSince1970))"
            )
        }
        let environment = ProcessInfo.processInfo.environment
        let binDirectory = environment["ASKRELAY_BIN_DIR"] ?? ProcessSupervisor.executableDirectory.path
        // The story decides what its processes do, not the caller's ASKRELAY_* variables (ASKRELAY_MAX_QUEUE,
        // ASKRELAY_CURVE_KEY, ...), which every process the cluster starts would otherwise inherit. Read above,
        // removed before any process or thread of a story exists.
        for name in environment.keys where name.hasPrefix("ASKRELAY_") { unsetenv(name) }
        let run = await StoryRunner(binDirectory: binDirectory, logsDirectory: folder).run(stories) { printLine($0) }
        if let junit {
            do {
                try Data(StoryReport.junit(run.results, seconds: run.seconds).utf8).write(
                    to: URL(fileURLWithPath: junit)
                )
            } catch {
                printError("askrelay test: cannot write the JUnit file '\(junit)': \(error)")
                return ExitCode.failure
            }
        }
        return run.exitCode
    }
}
