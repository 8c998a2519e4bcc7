import AskBasics
import AskKeys
import AskClient
import AskLogging
import AskProtocol
import AskRelayProcesses
import Foundation
import Synchronization
import ZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

/// Real AskRelay processes for one test (or one story): `askrelay-broker` and `askrelay-limits`, and any
/// `askrelay-parent` / `askrelay-child` processes the test adds, in a fresh temporary folder of their own.
///
/// ```swift
/// let cluster = try await AskRelayCluster.start(.init(curve: true))
/// defer { cluster.stop() }
/// let center = try cluster.makeAskCenter()
/// try await cluster.changeLimits(LimitsAdminChange(child: "c1-1", limitsEnabled: false))
/// ```
///
/// Contracts:
/// - **Start.** ``start(_:)`` returns once the broker printed `ready endpoints=...` and the limits worker printed
///   `ready ...` (it is registered with the broker) and the cluster's admin session is registered: signals, never
///   sleeps. The broker listens on `tcp://127.0.0.1:*` (a port the OS picks, read from its ready line) or on an
///   ipc path in the folder; a restarted broker comes back on the same endpoint.
/// - **Executables** are looked up in ``Options/binDirectory``, else in the folder named by `ASKRELAY_BIN_DIR`,
///   else next to the running program and in its parent folders (a test bundle sits in `.build/debug`): the one
///   lookup of ``Executables``; a missing one is a ``ClusterError`` naming where it looked.
/// - **Folder.** ``folder`` holds `broker-data/` (the journal), `limits-data/` (the limits store), `keys/` (with
///   CURVE), `<process>.log` (each process's stderr, kept over restarts), `clients.log` (the clients the
///   factories make) and, with ``Options/trace``, `trace/<process>.jsonl` (``traceFolder``). ``stop(removingFolder:)`` removes it unless told to keep it.
/// - **Cleanup.** Every process is in one process group whose leader is a guard process (`/bin/sh`) that holds
///   the read end of a pipe only this process can write to. When this process ends in any way (exit, crash,
///   kill -9) the pipe closes and the guard kills the whole group with SIGKILL. `PR_SET_PDEATHSIG` is not used:
///   it fires when the spawning *thread* exits, which under Swift concurrency is any pool thread.
///   ``stop(removingFolder:)`` (and `deinit`) SIGTERM what still runs, then release the guard.
/// - **Truth for assertions.** ``ledger(_:)`` reads the question's row from the broker's journal (the state the
///   broker committed before it acknowledged anything; with ``Durability/off`` there is none and it throws);
///   ``stats(timeout:where:)`` reads the broker's statistics snapshot (every second, also without a journal);
///   ``limitsState(of:)`` reads the limits worker's store.
/// - **Blocking.** The synchronous calls (``init(_:)``, ``stop(removingFolder:)``, ``ClusterProcess``'s fault
///   control, ``changeLimitsBlocking(_:timeout:)``) block their thread until their effect is visible; the `async`
///   ones run them on a thread of their own, so a test's cooperative pool keeps running.
public final class AskRelayCluster: Sendable {
    /// The cluster of the running test, set by the AskRelayTesting trait (`@Test(.askRelayCluster())`).
    @TaskLocal public static var current: AskRelayCluster?

    /// The options the cluster was started with.
    public let options: Options
    /// The cluster's temporary folder.
    public let folder: String
    /// The broker's endpoint, for clients (`tcp://127.0.0.1:<port>` or `ipc://...`).
    public let endpoint: String
    /// The broker's statistics PUB endpoint (`ipc://<folder>/stats.ipc`, a JSON snapshot every second).
    public let statsEndpoint: String
    /// The roster: families `f1`..., with their children and guardians.
    public let families: [Family]
    /// The CURVE material, with ``Options/curve``; `nil` without.
    public let curve: CurveMaterial?
    /// The `askrelay-broker` process, with its fault control (kill, restart, suspend, ...).
    public let broker: ClusterProcess
    /// The `askrelay-limits` process, with its fault control.
    public let limits: ClusterProcess
    /// The connection context of the clients the cluster makes (and of any the test makes with it).
    public let context: ClientContext
    /// The executables' folder.
    public let binDirectory: String

    private let supervisor: ProcessSupervisor
    private let group: ProcessGroupGuard
    private let scratch: ScratchFolder
    private let admin: ClusterAdmin
    private let extra = Mutex<[ClusterProcess]>([])
    private let stopped = Mutex(false)
    private let clientLogPath: String
    /// With ``Options/links``: each worker's and center's link to the broker (ClusterLinks.swift).
    let links: ClusterLinks
    /// With ``Options/drivenClock``: the test's copy of the broker's question time, advanced with it by
    /// ``advanceClock(by:timeout:)`` (it starts when the cluster starts, within milliseconds of the broker's).
    public let clock: DrivenClock?

    /// With ``Options/trace``: the folder of the trace files (`<folder>/trace`), one `<name>.jsonl` per process and
    /// per center the factories made; `nil` without.
    public var traceFolder: String? { options.trace ? folder + "/trace" : nil }

    /// Every child of the roster with its family, for `AskCenter`.
    public var children: [ChildIdentity] {
        families.flatMap { family in family.children.map { ChildIdentity(id: $0, family: family.id) } }
    }

    /// Every guardian of the roster as `(id, family)`.
    public var guardians: [(id: String, family: String)] {
        families.flatMap { family in family.guardians.map { (id: $0, family: family.id) } }
    }

    /// Every process started so far: the broker, the limits worker, then the ones added, in order.
    public var processes: [ClusterProcess] { [broker, limits] + extra.withLock { $0 } }

    /// The log of every process (stdout lines, then stderr), and the clients' log, for a failure report.
    public var logs: [ClusterLog] {
        var logs = processes.map { ClusterLog(name: $0.name, path: $0.logPath, text: $0.log) }
        let clients = (try? String(contentsOfFile: clientLogPath, encoding: .utf8)) ?? ""
        logs.append(ClusterLog(name: "clients", path: clientLogPath, text: clients))
        return logs
    }

    /// Starts a cluster without blocking the cooperative pool (the waits run on a thread of their own).
    /// - Throws: ``ClusterError`` when an executable is missing, a process exits or never says ready (with its
    ///   log's tail); everything started is stopped first.
    public static func start(_ options: Options = Options()) async throws -> AskRelayCluster {
        try await onDedicatedThread(name: "askrelay-cluster") { try AskRelayCluster(options) }
    }

    /// Starts a cluster, blocking the calling thread until it is ready (see ``start(_:)``).
    public init(_ options: Options = Options()) throws {
        guard options.families >= 1, options.guardiansPerFamily >= 0, options.childrenPerFamily >= 0 else {
            throw ClusterError("a cluster needs at least one family and no negative roster sizes")
        }
        self.options = options
        let bin = try Self.binDirectory(options.binDirectory)
        binDirectory = bin
        do { scratch = try ScratchFolder(prefix: options.folderPrefix) } catch {
            throw ClusterError("cannot create the cluster folder: \(error)")
        }
        let folder = scratch.path
        self.folder = folder
        clientLogPath = folder + "/clients.log"
        families = (1...options.families).map { f in
            Family(
                id: "f\(f)",
                children: (0..<options.childrenPerFamily).map { "c\(f)-\($0 + 1)" },
                guardians: (0..<options.guardiansPerFamily).map { "g\(f)-\($0 + 1)" }
            )
        }
        statsEndpoint = "ipc://\(folder)/stats.ipc"
        context = try ClientContext()
        supervisor = ProcessSupervisor()
        group = try ProcessGroupGuard()
        links = ClusterLinks(
            enabled: options.links,
            folder: folder,
            ipc: options.transport == .ipc,
            logger: AskLogger(label: "cluster.link", level: .info, sink: FileSink(path: clientLogPath))
        )

        var curve: CurveMaterial?
        if options.curve { curve = try Self.writeKeys(options: options, folder: folder + "/keys") }
        self.curve = curve

        let wanted = options.transport == .tcp ? "tcp://127.0.0.1:*" : "ipc://\(folder)/broker.ipc"
        var brokerArguments = [
            "--endpoint", wanted, "--data-dir", folder + "/broker-data",
            "--durability", options.durability.rawValue,
            "--heartbeat", durationText(options.heartbeat), "--ack-timeout", durationText(options.ackTimeout),
            "--stats-endpoint", statsEndpoint, "--log-level", options.logLevel,
            "--time-scale", "\(options.timeScale)",
        ]
        if let window = options.pendingWindow { brokerArguments += ["--pending-window", durationText(window)] }
        if let retention = options.closedRetention {
            brokerArguments += ["--closed-retention", durationText(retention)]
        }
        if options.drivenClock { brokerArguments.append("--driven-clock") }
        clock = options.drivenClock ? DrivenClock() : nil
        if let curve {
            brokerArguments += [
                "--curve-secret-file", curve.folder + "/" + KeySet.brokerKeyFile,
                "--principals", curve.folder + "/" + KeySet.principalsFileName,
            ]
        }
        if options.trace {
            do {
                try FileManager.default.createDirectory(atPath: folder + "/trace", withIntermediateDirectories: true)
            } catch { throw ClusterError("cannot create the cluster's trace folder: \(error)") }
            brokerArguments += ["--trace-log", folder + "/trace/broker.jsonl"]
        }
        brokerArguments += options.brokerArguments
        var started: [ClusterProcess] = []
        do {
            let broker = try Self.launch(
                "broker",
                executable: "askrelay-broker",
                arguments: brokerArguments,
                bin: bin,
                folder: folder,
                supervisor: supervisor,
                group: group,
                readyTimeout: options.readyTimeout
            )
            started.append(broker)
            let line = try broker.waitUntilReady()
            guard let bound = line.endpoint else {
                throw ClusterError("the broker's ready line names no endpoint: '\(line)'")
            }
            endpoint = bound
            broker.setRestartArguments(brokerArguments.replacingValue(of: "--endpoint", with: bound))
            self.broker = broker

            var limitsArguments = [
                "--broker", try links.endpoint(for: "limits", upstream: bound), "--id", "limits-1", "--data-dir",
                folder + "/limits-data",
                "--heartbeat", durationText(options.heartbeat), "--log-level", options.logLevel,
            ]
            if let curve, let key = curve.keyFile(.limits) {
                limitsArguments += ["--curve-key", key, "--broker-key", curve.brokerPublicFile]
            }
            if options.trace { limitsArguments += ["--trace-log", folder + "/trace/limits.jsonl"] }
            limitsArguments += options.limitsArguments
            let limits = try Self.launch(
                "limits",
                executable: "askrelay-limits",
                arguments: limitsArguments,
                bin: bin,
                folder: folder,
                supervisor: supervisor,
                group: group,
                readyTimeout: options.readyTimeout
            )
            started.append(limits)
            try limits.waitUntilReady()
            self.limits = limits

            let logger = AskLogger(label: "cluster.admin", level: .info, sink: FileSink(path: clientLogPath))
            admin = try ClusterAdmin(
                broker: bound,
                curve: curve?.client(.observer),
                heartbeat: options.heartbeat,
                logger: logger,
                context: context.zmq
            )
        } catch {
            for process in started.reversed() { _ = try? process.kill() }
            links.stopAll()
            group.release()
            throw error
        }
    }

    deinit { shutDown(removingFolder: false) }

    // MARK: Stopping

    /// Stops every process (SIGTERM, then SIGKILL after 10 s), releases the process group and removes the folder
    /// unless `removingFolder` is `false` (keep it to read the logs). Safe to call more than once.
    /// Blocks the calling thread; see ``shutdown(removingFolder:)`` in async code.
    public func stop(removingFolder: Bool = true) { shutDown(removingFolder: removingFolder) }

    /// ``stop(removingFolder:)`` off the cooperative pool.
    public func shutdown(removingFolder: Bool = true) async {
        await onDedicatedThread(name: "askrelay-cluster") { self.stop(removingFolder: removingFolder) }
    }

    private func shutDown(removingFolder: Bool) {
        let first = stopped.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
        admin.stop()
        for process in processes.reversed() where process.isRunning {
            if (try? process.terminate(timeout: .seconds(10))) == nil { _ = try? process.kill() }
        }
        links.stopAll()
        group.release()
        if removingFolder { scratch.remove() }
    }

    // MARK: Driven clock

    /// Moves the broker's driven clock (``Options/drivenClock``) and ``clock`` forward by `duration` (whole
    /// milliseconds), through the observer session's `clock.advance`. Returns once the broker acknowledged it:
    /// by then it has expired every question due at the new time, in the same turn, and the `closed` notices are
    /// on their way, so a test can await them without waiting for any deadline.
    /// - Throws: ``ClusterError`` when the cluster keeps real time, or the broker refuses or does not answer within
    ///   `timeout` (real time).
    public func advanceClock(by duration: Duration, timeout: Duration = .seconds(15)) async throws {
        try await run { try self.advanceClockBlocking(by: duration, timeout: timeout) }
    }

    /// ``advanceClock(by:timeout:)`` blocking the calling thread.
    public func advanceClockBlocking(by duration: Duration, timeout: Duration = .seconds(15)) throws {
        guard let clock else {
            throw ClusterError("advanceClock needs a cluster started with options.drivenClock = true")
        }
        let milliseconds = Int64(duration.milliseconds)
        guard milliseconds >= 0 else { throw ClusterError("advanceClock moves forward only, not by \(duration)") }
        try admin.advanceClock(milliseconds: milliseconds, timeout: timeout)
        clock.advance(by: .milliseconds(milliseconds))
    }

    // MARK: Limits administration

    /// Changes a child's limits state at run time through the limits worker's admin message (`limits.admin`,
    /// sent by the cluster's observer session), and returns once the limits worker has stored it: the broker
    /// acknowledged the message, then the limits store shows every field the change sets. An ask after this
    /// returns sees the change.
    /// - Throws: ``ClusterError`` if the broker refuses it (for example a child id that is not valid) or it is
    ///   not visible within `timeout`.
    public func changeLimits(_ change: LimitsAdminChange, timeout: Duration = .seconds(15)) async throws {
        try await run { try self.changeLimitsBlocking(change, timeout: timeout) }
    }

    /// ``changeLimits(_:timeout:)`` blocking the calling thread.
    public func changeLimitsBlocking(_ change: LimitsAdminChange, timeout: Duration = .seconds(15)) throws {
        guard Address.isValidID(change.child) else {
            throw ClusterError(
                "limits.admin: '\(change.child)' is not a valid child id (1-64 characters of A-Z a-z 0-9 . _ -)"
            )
        }
        let deadline = ContinuousClock.now + timeout
        try admin.send(change, timeout: timeout)
        let store = folder + "/limits-data"
        var last: LimitsState?
        while ContinuousClock.now < deadline {
            if let state = try? StoreReader.limitsState(dataDirectory: store, child: change.child) {
                if StoreReader.shows(change, in: state) { return }
                last = state
            }
            // A poll with a deadline: the store is another process's file and says nothing when it changes.
            usleep(5_000)
        }
        throw ClusterError(
            "the limits worker did not store the change for '\(change.child)' within \(durationText(timeout)) "
                + "(stored: \(last.map { "\($0)" } ?? "nothing")); see \(limits.logPath)"
        )
    }

    /// A child's limits state as the limits worker stored it (its own, else the defaults).
    public func limitsState(of child: String) throws -> LimitsState {
        try StoreReader.limitsState(dataDirectory: folder + "/limits-data", child: child)
    }

    // MARK: Ledger

    /// The broker's record of `question` in its ledger, read from its journal; `nil` when it holds none (not asked
    /// yet, or forgotten after `--closed-retention`).
    /// - Throws: ``ClusterError`` with ``Durability/off`` (no journal).
    public func ledger(_ question: UUID) throws -> QuestionRecord? {
        try StoreReader.question(brokerData: folder + "/broker-data", question: question)
    }

    /// Waits until the ledger entry of `question` satisfies `condition` (polling the journal every 10 ms).
    /// - Returns: that entry. - Throws: ``ClusterError`` naming the last entry seen after `timeout`.
    @discardableResult
    public func waitForLedger(
        _ question: UUID,
        timeout: Duration = .seconds(15),
        until condition: @escaping @Sendable (QuestionRecord) -> Bool
    ) async throws -> QuestionRecord {
        try await run {
            let deadline = ContinuousClock.now + timeout
            var last: QuestionRecord?
            while ContinuousClock.now < deadline {
                if let entry = try self.ledger(question) {
                    if condition(entry) { return entry }
                    last = entry
                }
                usleep(10_000)
            }
            throw ClusterError(
                "question \(question): the ledger did not reach the expected state within \(durationText(timeout)); "
                    + "last: \(last.map(StoreReader.describe) ?? "no entry")"
            )
        }
    }

    // MARK: Clients

    /// The CURVE settings a client of `role` needs (`nil` without CURVE).
    public func clientCurve(_ role: SessionRole) -> (keys: CurveKeyPair, serverKey: String)? {
        curve?.client(role)
    }

    /// A logger writing to the cluster's `clients.log`.
    public func clientLogger(_ label: String, level: AskLogger.Level = .info) -> AskLogger {
        AskLogger(label: label, level: level, sink: FileSink(path: clientLogPath))
    }

    /// An `AskCenter` hosting `children` (default: every child of the roster), connected to the broker with the
    /// cluster's heartbeat and CURVE key (and, with ``Options/drivenClock``, the cluster's ``clock``), logging to
    /// `clients.log`. Stop it (`await center.stop()`) before the
    /// cluster.
    public func makeAskCenter(
        children: [ChildIdentity]? = nil,
        stateDirectory: String? = nil,
        options: AskCenter.Options = AskCenter.Options()
    ) throws -> AskCenter {
        var options = options
        options.heartbeatInterval = self.options.heartbeat
        if options.curve == nil { options.curve = clientCurve(.child) }
        if let clock { options.clock = clock }
        let name = links.nextName("askcenter")
        if options.traceLog == nil { options.traceLog = try traceLog(name) }
        let center = try AskCenter(
            broker: try links.endpoint(for: name, upstream: endpoint),
            children: children ?? self.children,
            stateDirectory: stateDirectory,
            logger: clientLogger("askcenter"),
            context: context,
            options: options
        )
        links.register(center, as: name)
        return center
    }

    /// A `GuardianCenter` hosting `guardians` (default: every guardian of the roster), connected to the broker
    /// with the cluster's heartbeat and CURVE key, logging to `clients.log`. Stop it (`await center.stop()`)
    /// before the cluster.
    public func makeGuardianCenter(
        guardians: [GuardianIdentity]? = nil,
        options: GuardianCenter.Options = GuardianCenter.Options()
    ) throws -> GuardianCenter {
        var options = options
        options.heartbeatInterval = self.options.heartbeat
        if options.curve == nil { options.curve = clientCurve(.guardian) }
        let name = links.nextName("guardiancenter")
        if options.traceLog == nil { options.traceLog = try traceLog(name) }
        let center = try GuardianCenter(
            broker: try links.endpoint(for: name, upstream: endpoint),
            guardians: guardians ?? self.guardians.map { GuardianIdentity(id: $0.id, family: $0.family) },
            logger: clientLogger("guardiancenter"),
            context: context,
            options: options
        )
        links.register(center, as: name)
        return center
    }

    /// With ``Options/trace``, the trace log of the center named `name`; `nil` without.
    private func traceLog(_ name: String) throws -> TraceLog? {
        guard let traceFolder else { return nil }
        return try TraceLog(path: traceFolder + "/\(name).jsonl")
    }

    // MARK: Worker processes

    /// Starts an `askrelay-parent` process with `arguments` (its roster and policy, for example
    /// `["--guardian", "g1-1@f1", "--policy", "approve"]`); the cluster adds `--broker`, `--heartbeat`,
    /// `--log-level`, with CURVE the guardian key and with ``Options/trace`` `--trace-log`. Returns once it printed `ready`.
    public func startParent(_ arguments: [String], name: String? = nil) async throws -> ClusterProcess {
        try await run { try self.startWorker("askrelay-parent", role: .guardian, arguments, name: name) }
    }

    /// Starts an `askrelay-child` process with `arguments` (as ``startParent(_:name:)``, with the child key).
    public func startChild(_ arguments: [String], name: String? = nil) async throws -> ClusterProcess {
        try await run { try self.startWorker("askrelay-child", role: .child, arguments, name: name) }
    }

    /// Starts a worker executable and waits for its `ready` line (blocking).
    public func startWorker(
        _ executable: String,
        role: SessionRole,
        _ arguments: [String],
        name: String? = nil
    ) throws -> ClusterProcess {
        let kind = executable.replacingOccurrences(of: "askrelay-", with: "")
        let name = name ?? "\(kind)-\(extra.withLock { list in list.filter { $0.name.hasPrefix(kind) }.count } + 1)"
        var full = [
            "--broker", try links.endpoint(for: name, upstream: endpoint), "--heartbeat",
            durationText(options.heartbeat), "--log-level", options.logLevel,
        ]
        if let curve, let key = curve.keyFile(role) {
            full += ["--curve-key", key, "--broker-key", curve.brokerPublicFile]
        }
        if let traceFolder { full += ["--trace-log", traceFolder + "/\(name).jsonl"] }
        full += arguments
        let process = try Self.launch(
            name,
            executable: executable,
            arguments: full,
            bin: binDirectory,
            folder: folder,
            supervisor: supervisor,
            group: group,
            readyTimeout: options.readyTimeout
        )
        extra.withLock { $0.append(process) }
        try process.waitUntilReady()
        return process
    }

    /// Runs a blocking call of a cluster process off the cooperative pool, for example
    /// `try await cluster.run { try cluster.broker.kill() }`.
    @discardableResult
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await onDedicatedThread(name: "askrelay-cluster", body)
    }

    // MARK: Helpers

    /// The folder of the askrelay executables: `explicit`, else `ASKRELAY_BIN_DIR`, else the folder of the
    /// running program or one of its parents that holds `askrelay-broker` (``Executables/directory(_:environment:)``).
    /// - Throws: ``ClusterError`` naming where it looked and what to do.
    public static func binDirectory(_ explicit: String? = nil) throws -> String {
        try Executables.directory(explicit)
    }

    static func launch(
        _ name: String,
        executable: String,
        arguments: [String],
        bin: String,
        folder: String,
        supervisor: ProcessSupervisor,
        group: ProcessGroupGuard,
        readyTimeout: Duration
    ) throws -> ClusterProcess {
        let path = try Executables.path(of: executable, in: bin)
        return try ClusterProcess(
            name: name,
            executable: path,
            arguments: arguments,
            logPath: folder + "/\(name).log",
            processGroup: group.processGroup,
            supervisor: supervisor,
            readyTimeout: readyTimeout
        )
    }

    /// Writes the keys as `askrelay keys generate --parent-hosts 1 --child-hosts 1` does.
    static func writeKeys(options: Options, folder: String) throws -> CurveMaterial {
        var plan = KeyGenerator.Plan()
        plan.families = options.families
        plan.guardiansPerFamily = options.guardiansPerFamily
        plan.childrenPerFamily = options.childrenPerFamily
        plan.limits = 1
        plan.observers = 1
        plan.parentHosts = options.guardiansPerFamily > 0 ? 1 : 0
        plan.childHosts = options.childrenPerFamily > 0 ? 1 : 0
        let set = try KeyGenerator.generate(plan)
        try set.write(to: folder)
        func pair(_ file: String) -> CurveKeyPair {
            set.keyFiles[file]?.keyPair ?? CurveKeyPair(publicKey: "", secretKey: "")
        }
        return CurveMaterial(
            folder: folder,
            serverPublicKey: set.broker.publicKey,
            child: pair("child-1.key"),
            guardian: pair("parent-1.key"),
            observer: pair("observer-1.key"),
            limits: pair("limits-1.key")
        )
    }
}

extension [String] {
    /// A copy with the value after `flag` replaced.
    func replacingValue(of flag: String, with value: String) -> [String] {
        var copy = self
        if let index = copy.firstIndex(of: flag), index + 1 < copy.count { copy[index + 1] = value }
        return copy
    }
}
