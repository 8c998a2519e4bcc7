import AskCLI
import AskRelayProcesses
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
        SIGINT or SIGTERM stops the story playing (INTERRUPTED) and the run: the summary so far and the JUnit file
        still come. Without --logs, the run's temporary folder is removed when every story passed, else kept and
        named. Exit codes: 0 every story passed, 1 a story failed, 2 the processes could not be started, 64 bad
        usage or a bad story (the file and the field are named), 130 interrupted. See docs/stories.md.
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
            help: "keep each story's process logs in a folder under DIR (else a temporary one, removed if all pass)"
        ),
    ]

    let stories: [Story]
    let junit: String?
    let logs: String?
    /// Where `--junit` and `--logs` came from (the flag, or its environment variable), for error messages.
    let junitOrigin: String
    let logsOrigin: String

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
        junitOrigin = arguments.origin("junit")
        logsOrigin = arguments.origin("logs")
    }

    /// Before anything starts: the JUnit file must be one this run can write, and a run never mixes its logs with
    /// another run's, so `--logs` must be a new or empty folder.
    func validate() throws {
        if let junit { try Self.checkWritable(junit, origin: junitOrigin) }
        guard let logs else { return }
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: logs, isDirectory: &isFolder) else { return }
        guard isFolder.boolValue else {
            throw UsageError("\(logsOrigin) '\(logs)' is a file; give --logs a new or empty folder")
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: logs)) ?? []
        if !names.isEmpty {
            throw UsageError(
                "\(logsOrigin): the logs folder '\(logs)' is not empty (it holds "
                    + "\(names.sorted().prefix(3).joined(separator: ", "))\(names.count > 3 ? ", ..." : "")), and a run "
                    + "must not mix its logs with another run's: give --logs a new or empty folder"
            )
        }
    }

    /// Checks that `path` names a file this run can write (written only at the end, after every story): not a
    /// folder, in a folder that exists, and writable. Writability is tried, not inferred from permission bits (root
    /// passes those everywhere, a read-only mount or /proc fails them for everyone); the file is left as it was.
    static func checkWritable(_ path: String, origin: String) throws {
        var isFolder: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
        if exists && isFolder.boolValue {
            throw UsageError(
                "\(origin) '\(path)' is a folder; give --junit the path of a file, such as \(path)/junit.xml"
            )
        }
        if !exists {
            let parent = (path as NSString).deletingLastPathComponent
            let folder = parent.isEmpty ? "." : parent
            var parentIsFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: folder, isDirectory: &parentIsFolder) else {
                throw UsageError(
                    "\(origin) '\(path)': the folder '\(folder)' does not exist; create it, or give a path in a "
                        + "folder that exists"
                )
            }
            guard parentIsFolder.boolValue else {
                throw UsageError("\(origin) '\(path)': '\(folder)' is a file, not a folder")
            }
        }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw UsageError(
                "\(origin) '\(path)' cannot be written (\(String(cString: strerror(errno)))); give a path in a folder "
                    + "this run can write into"
            )
        }
        close(descriptor)
        if !exists { unlink(path) }
    }

    func run() async throws -> Int32 {
        let folder: String
        /// The run's temporary folder (without `--logs`).
        var scratch: ScratchFolder?
        if let logs {
            folder = logs
            do { try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: true) } catch {
                throw UsageError("\(logsOrigin) '\(logs)' cannot be made: \(error.localizedDescription)")
            }
        } else {
            let made = try ScratchFolder(prefix: "askrelay-test")
            scratch = made
            folder = made.path
        }
        let environment = ProcessInfo.processInfo.environment
        // Looked up before the ASKRELAY_* variables go (ASKRELAY_BIN_DIR among them); a folder without the
        // executables is each story's error, naming it.
        let binDirectory = Executables.directoryOrFirstCandidate(environment: environment)
        // The story decides what its processes do, not the caller's ASKRELAY_* variables (ASKRELAY_MAX_QUEUE,
        // ASKRELAY_CURVE_KEY, ...), which every process the cluster starts would otherwise inherit. Read above,
        // removed before any process or thread of a story exists.
        for name in environment.keys where name.hasPrefix("ASKRELAY_") { unsetenv(name) }
        // SIGINT/SIGTERM stop the story playing and the run, which still reports and writes its JUnit file; a second
        // one exits at once (the story's processes die with their process group).
        let interruption = StoryInterruption()
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
            if interruption.interrupt(signal) {
                printError("askrelay test: \(signalName(signal)): stopping the story playing (again to exit at once)")
            } else {
                printError("askrelay test: \(signalName(signal)) again: exiting without the summary")
                exit(StoryRun.interruptedExitCode)
            }
        }
        defer { withExtendedLifetime(signals) {} }
        let runner = StoryRunner(binDirectory: binDirectory, logsDirectory: folder, interruption: interruption)
        let run = await runner.run(stories, output: { printLine($0) }, progress: { printError("askrelay test: \($0)") })
        if let junit {
            do {
                try Data(StoryReport.junit(run.results, seconds: run.seconds).utf8).write(
                    to: URL(fileURLWithPath: junit)
                )
            } catch {
                printError("askrelay test: cannot write the JUnit file '\(junit)': \(error.localizedDescription)")
                return ExitCode.failure
            }
        }
        // Every story passed: nobody needs the logs of a temporary folder (a --logs folder was asked for; it stays).
        if run.exitCode == 0, let scratch {
            scratch.remove()
            return run.exitCode
        }
        // A folder that stays: each story's trace files merged into its trace.json, for Perfetto.
        let stories = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        for story in stories.sorted() where FileManager.default.fileExists(atPath: folder + "/\(story)/trace") {
            do { _ = try TraceMerge.write(folder: folder + "/\(story)") } catch {
                printError("askrelay test: \(story): trace.json could not be written: \(error)")
            }
        }
        return run.exitCode
    }
}
