import AskCLI
import AskClient
import AskLogging
import AskProtocol
import AskRelayProcesses
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// The workload of `askrelay load --mode flows`: complete ask flows by children hosted in this process.
public struct FlowLoadOptions: Sendable, Codable, Equatable {
    /// Logical children (`child/c<f>-<k>`), hosted by ``AskCenter``s of this process.
    public var endpoints = 100
    /// Broker connections (one ``AskCenter`` each); children are dealt round-robin.
    public var connections = 1
    /// Families `f1`...`fN`; child `i` (0-based) is in family `f<i mod N + 1>`. Default: min(endpoints, 100).
    public var families = 100
    /// Guardians per family, split over ``parents`` processes.
    public var guardiansPerFamily = 1
    /// `askrelay-parent` processes; family `f` is hosted by process `(f - 1) mod parents + 1`.
    public var parents = 1
    /// Flows in flight over all children (closed loop).
    public var inflight = 100
    /// Open loop: flows started per second; overrides `inflight` when set.
    public var rate: Double?
    /// Open loop: flows in flight at most. A start due while this many are in flight is not made: it is counted
    /// as dropped (the generator could not start it on schedule), so a slow system cannot hide behind a good p99.
    public var maxInflight = 10_000
    public var durationSeconds: Double = 5
    public var warmupSeconds: Double = 1
    /// After the measured window, how long to wait for flows still in flight.
    public var drainSeconds: Double = 2
    /// The children this process hosts, as indices into the ``endpoints`` (nil: all): a load host's share of a
    /// coordinated run (``LoadCoordinator``), so the hosts' children never share an address.
    public var hostedFirst: Int?
    public var hostedCount: Int?
    /// `--trace`: every process of the run, and the load's own centers, write trace files (docs/tracing.md), so the
    /// run measures what tracing costs. `nil` or `false`: off.
    public var trace: Bool?
    /// Where the load's centers write their trace files (`load-<n>.jsonl`); set by the run from ``FlowServices``.
    public var traceDirectory: String? = nil

    public init() {}

    enum CodingKeys: String, CodingKey {
        case endpoints, connections, families, guardiansPerFamily = "guardians_per_family", parents, inflight, rate
        case maxInflight = "max_inflight"
        case durationSeconds = "duration_s", warmupSeconds = "warmup_s", drainSeconds = "drain_s"
        case hostedFirst = "hosted_first", hostedCount = "hosted_count", trace
    }

    /// Indices of the hosted children.
    public var hosted: Range<Int> {
        let first = hostedFirst ?? 0
        return first..<(first + (hostedCount ?? endpoints - first))
    }

    /// Load host `index`'s share (0-based, of `hosts`) of this workload: a slice of the children (as even as
    /// possible), the in-flight count and the maximum split the same way, the rate divided by `hosts`; every other
    /// option (families, connections per host, phases) unchanged.
    public func share(_ index: Int, of hosts: Int) -> FlowLoadOptions {
        func part(_ total: Int) -> (first: Int, count: Int) {
            let base = total / hosts
            let extra = total % hosts
            return (index * base + Swift.min(index, extra), base + (index < extra ? 1 : 0))
        }
        var share = self
        let children = part(endpoints)
        share.hostedFirst = children.first
        share.hostedCount = children.count
        share.inflight = part(inflight).count
        share.maxInflight = part(maxInflight).count
        share.rate = rate.map { $0 / Double(hosts) }
        return share
    }

    public var isOpenLoop: Bool { rate != nil }

    public func problems() -> [String] {
        var problems: [String] = []
        if endpoints < 1 { problems.append("--endpoints must be at least 1") }
        if connections < 1 || connections > endpoints {
            problems.append("--connections must be between 1 and --endpoints")
        }
        if hosted.lowerBound < 0 || hosted.upperBound > endpoints || connections > hosted.count {
            problems.append("a load host's \(hosted.count) children cannot fill \(connections) connections")
        }
        if families < 1 || families > endpoints { problems.append("--families must be between 1 and --endpoints") }
        if guardiansPerFamily < 1 { problems.append("--guardians-per-family must be at least 1") }
        if parents < 1 || parents > families { problems.append("--parents must be between 1 and --families") }
        if inflight < 1 { problems.append("--inflight must be at least 1") }
        if maxInflight < 1 { problems.append("--max-inflight must be at least 1") }
        if let rate, !(rate > 0 && rate.isFinite) { problems.append("--rate must be a positive number") }
        if !(durationSeconds > 0) { problems.append("--duration must be positive") }
        if warmupSeconds < 0 { problems.append("--warmup must not be negative") }
        return problems
    }

    /// The hosted children, in order.
    public var children: [ChildIdentity] {
        hosted.map { index in
            let family = index % families + 1
            return ChildIdentity(id: "c\(family)-\(index / families + 1)", family: "f\(family)")
        }
    }

    /// The guardian roster of parent process `process` (1-based): `{id, family}` entries.
    public func roster(process: Int) -> [(id: String, family: String)] {
        var entries: [(id: String, family: String)] = []
        for family in stride(from: process, through: families, by: parents) {
            for guardian in 1...guardiansPerFamily { entries.append(("g\(family)-\(guardian)", "f\(family)")) }
        }
        return entries
    }
}

/// The figures of one flows run.
public struct FlowLoadResult: Sendable, Codable, Equatable {
    /// `closed` (fixed in flight) or `open` (fixed start rate, latency from the intended start time).
    public var loop: String
    /// Flows started (warm-up, measured window).
    public var started: Int
    /// Flows whose response reached the child.
    public var completed: Int
    /// Flows that failed (ask refused or failed, send refused, unexpected response); the first few in `errorSamples`.
    public var errors: Int
    /// Flows neither completed nor failed when the run ended (after the drain).
    public var inFlightAtEnd: Int
    /// Completions inside the measured window.
    public var measuredCompleted: Int
    public var measuredSeconds: Double
    /// Flows completed per second inside the measured window.
    public var throughput: Double
    /// ask() call → send sheet presented (limits admitted), flows started in the window.
    /// Open loop: starts not made because ``FlowLoadOptions/maxInflight`` flows were in flight at their time.
    public var dropped = 0
    /// Open loop: starts made more than ``FlowLoad/lateStartBound`` after their intended time (the generator fell
    /// behind; their latency still counts from the intended time).
    public var lateStarts = 0
    public var askToPresented: LatencySummary
    /// send() call → response surfaced to the child.
    public var sendToResponse: LatencySummary
    /// Intended start (open loop) or start (closed loop) → response surfaced.
    public var endToEnd: LatencySummary
    public var errorSamples: [String]
    /// The three stages' latencies against percentile (``LatencySpectrum``), for load.html.
    public var askToPresentedSpectrum: [SpectrumPoint]?
    public var sendToResponseSpectrum: [SpectrumPoint]?
    public var endToEndSpectrum: [SpectrumPoint]?
    /// The three stages' histograms, every recorded value (lossless), so runs of several load hosts merge exactly.
    public var histograms: FlowHistograms?

    enum CodingKeys: String, CodingKey {
        case loop, started, completed, errors, inFlightAtEnd = "in_flight_at_end", measuredCompleted =
            "measured_completed"
        case measuredSeconds = "measured_s", throughput = "throughput_flows_s", askToPresented = "ask_to_presented"
        case sendToResponse = "send_to_response", endToEnd = "end_to_end", errorSamples = "error_samples"
        case dropped, lateStarts = "late_starts"
        case askToPresentedSpectrum = "ask_to_presented_spectrum", sendToResponseSpectrum = "send_to_response_spectrum"
        case endToEndSpectrum = "end_to_end_spectrum", histograms
    }
}

/// A flows run's latency histograms (JSON `ask_to_presented`, `send_to_response`, `end_to_end`).
public struct FlowHistograms: Sendable, Codable, Equatable {
    public var askToPresented = LatencyHistogram()
    public var sendToResponse = LatencyHistogram()
    public var endToEnd = LatencyHistogram()

    public init() {}

    enum CodingKeys: String, CodingKey {
        case askToPresented = "ask_to_presented", sendToResponse = "send_to_response", endToEnd = "end_to_end"
    }

    public mutating func merge(_ other: FlowHistograms) {
        askToPresented.merge(other.askToPresented)
        sendToResponse.merge(other.sendToResponse)
        endToEnd.merge(other.endToEnd)
    }
}

extension FlowLoadResult {
    /// Builds a result's latency figures from its histograms.
    init(counts result: FlowLoadResult, histograms: FlowHistograms) {
        self = result
        self.histograms = histograms
        askToPresented = histograms.askToPresented.summary
        sendToResponse = histograms.sendToResponse.summary
        endToEnd = histograms.endToEnd.summary
        askToPresentedSpectrum = LatencySpectrum.points(histograms.askToPresented)
        sendToResponseSpectrum = LatencySpectrum.points(histograms.sendToResponse)
        endToEndSpectrum = LatencySpectrum.points(histograms.endToEnd)
    }

    /// One result of several load hosts' runs of one coordinated workload: the counts added, the histograms merged
    /// bucket by bucket (so the percentiles are those of one histogram fed every host's flows), the throughput the
    /// sum of the hosts' measured completions over the (common) window.
    /// - Throws: ``RelayLoadError`` when a result carries no histograms.
    public static func merged(_ results: [FlowLoadResult]) throws -> FlowLoadResult {
        guard let first = results.first else { throw RelayLoadError("no load host reported a result") }
        var histograms = FlowHistograms()
        var total = first
        total.started = 0
        total.completed = 0
        total.errors = 0
        total.inFlightAtEnd = 0
        total.measuredCompleted = 0
        total.dropped = 0
        total.lateStarts = 0
        total.errorSamples = []
        for (index, result) in results.enumerated() {
            guard let theirs = result.histograms else {
                throw RelayLoadError("load host \(index + 1)'s result has no histograms to merge")
            }
            histograms.merge(theirs)
            total.started += result.started
            total.completed += result.completed
            total.errors += result.errors
            total.inFlightAtEnd += result.inFlightAtEnd
            total.measuredCompleted += result.measuredCompleted
            total.dropped += result.dropped
            total.lateStarts += result.lateStarts
            total.errorSamples += result.errorSamples.map { "host \(index + 1): \($0)" }
        }
        total.errorSamples = Array(total.errorSamples.prefix(10))
        total.throughput = Double(total.measuredCompleted) / first.measuredSeconds
        return FlowLoadResult(counts: total, histograms: histograms)
    }
}

/// Runs ask flows through a running broker, limits worker and parent processes.
///
/// Children live in ``AskCenter``s of this process. A flow: `ask` (one-person communication question) → the limits
/// worker presents it → `send` → the family's guardians answer → the response is surfaced to the child.
public enum FlowLoad {
    /// The person every flow asks about (the same one, so the limits worker's known handles stay small).
    static let handle = CommunicationHandle(value: "+1 415 555 0100", kind: .phoneNumber)
    /// An open-loop start made later than this after its intended time counts as late.
    public static let lateStartBound: UInt64 = 10_000_000

    /// Runs one measurement against `brokers` (one broker, or sharded ones: each connection opens one center per
    /// shard of its children's families). Blocking: call it on a dedicated thread.
    /// - Parameters:
    ///   - stop: when requested, no flow starts any more and there is no drain: the measured window ends there.
    ///   - progress: called about once a second from the calling thread.
    public static func run(
        brokers: BrokerList,
        options: FlowLoadOptions,
        context: ClientContext? = nil,
        startAt: (() throws -> UInt64)? = nil,
        stop: LoadStop = LoadStop(),
        progress: ((RelayLoadProgress) -> Void)? = nil
    ) throws -> FlowLoadResult {
        if let problem = options.problems().first { throw RelayLoadError(problem) }
        let context = try context ?? ClientContext()
        let logger = AskLogger(label: "load", level: .warning)
        let children = options.children
        var centerOptions = AskCenter.Options()
        centerOptions.workerName = "askrelay-load[\(getpid())]"
        centerOptions.askTimeout = .seconds(30)
        centerOptions.sheetTimeout = .seconds(30)
        var connections: [ShardedConnections<AskCenter>] = []
        do {
            for connection in 0..<options.connections {
                let mine = children.enumerated().filter { $0.offset % options.connections == connection }
                    .map(\.element)
                var centerOptions = centerOptions
                if let folder = options.traceDirectory {
                    centerOptions.traceLog = try TraceLog(path: folder + "/load-\(connection + 1).jsonl")
                }
                connections.append(
                    try AskCenter.sharded(
                        brokers: brokers,
                        children: mine,
                        stateDirectory: nil,
                        logger: logger,
                        context: context,
                        options: centerOptions
                    )
                )
            }
        } catch {
            let opened = connections.flatMap { $0.opened.map(\.member) }
            waitingForAsync { for center in opened { await center.stop() } }
            throw error
        }
        // Every child's shard is open already (``AskCenter/sharded``), so `member` only looks it up.
        let centers = connections.flatMap { $0.opened.map(\.member) }
        let sessions = try children.enumerated().map {
            try connections[$0.offset % options.connections].member(forFamily: $0.element.family).child($0.element.id)
        }
        let tracker = FlowTracker()
        defer {
            tracker.cancelAll()
            let stopCenters = centers
            waitingForAsync { for center in stopCenters { await center.stop() } }
        }
        let allCenters = centers
        let registered = waitingForAsync { () async -> Bool in
            for center in allCenters where !(await center.waitUntilRegistered(timeout: .seconds(15))) { return false }
            return true
        }
        guard registered else { throw RelayLoadError("the ask centers did not register with the broker within 15 s") }
        // One consumer per center surfaces responses to the flows waiting for them.
        // Every task of a center runs on its connection thread (``AskCenter/executor``): a call and its result then
        // cost no thread switch in this process, which is most of the generator's CPU per flow otherwise.
        for center in centers {
            let stream = center.responses(for: CommunicationTopic.self)
            Task(executorPreference: center.executor) {
                for await response in stream {
                    tracker.respond(
                        response.response.question.id,
                        choice: response.response.choice,
                        at: monotonicNanoseconds()
                    )
                }
            }
        }

        // A coordinated run's start comes from the coordinator, once every load host has registered.
        let start = try startAt?() ?? monotonicNanoseconds() + 10_000_000
        let measureStart = start + UInt64(options.warmupSeconds * 1e9)
        let measureEnd = measureStart + UInt64(options.durationSeconds * 1e9)
        let drainEnd = measureEnd + UInt64(options.drainSeconds * 1e9)
        let window = FlowWindow(measureStart: measureStart, measureEnd: measureEnd, stop: stop)
        let stats = FlowStats()
        let pacer = DispatchSemaphore(value: 0)
        var lastProgress = start
        /// Once a second (and, `last`, at the end, so the throughput samples cover the drain).
        func report(_ now: UInt64, last: Bool = false) {
            guard now &- lastProgress >= 1_000_000_000 || last else { return }
            lastProgress = now
            let phase = now < measureStart ? "warm-up" : now < measureEnd ? "measuring" : "draining"
            progress?(
                RelayLoadProgress(
                    elapsedSeconds: Double(now &- start) / 1e9,
                    completed: stats.completed.load(ordering: .relaxed),
                    sent: stats.started.load(ordering: .relaxed),
                    errors: stats.errors.load(ordering: .relaxed),
                    phase: phase
                )
            )
        }
        while monotonicNanoseconds() < start { _ = pacer.wait(timeout: .now() + .milliseconds(1)) }

        var dropped = 0
        var lateStarts = 0
        if let rate = options.rate {
            // Open loop: every flow starts at its intended time (late starts keep their intended stamp).
            let interval = 1e9 / rate
            var number: UInt64 = 0
            while true {
                let due = start + UInt64(Double(number) * interval)
                guard due < measureEnd && !stop.isRequested else { break }
                let now = monotonicNanoseconds()
                if due > now {
                    report(now)
                    _ = pacer.wait(timeout: DispatchTime(uptimeNanoseconds: min(due, now + 100_000_000)))
                    continue
                }
                let session = sessions[Int(number % UInt64(sessions.count))]
                number += 1
                let inFlight =
                    stats.started.load(ordering: .relaxed) - stats.completed.load(ordering: .relaxed)
                    - stats.errors.load(ordering: .relaxed)
                if inFlight >= options.maxInflight {
                    dropped += 1
                    continue
                }
                if now - due > lateStartBound { lateStarts += 1 }
                stats.started.add(1, ordering: .relaxed)
                Task(executorPreference: session.center.executor) {
                    await runFlow(session, intended: due, tracker: tracker, window: window, stats: stats)
                }
            }
        } else {
            // Closed loop: `inflight` loops, each starting its next flow when the previous one ends.
            for loop in 0..<options.inflight {
                Task(executorPreference: sessions[loop % sessions.count].center.executor) {
                    var turn = 0
                    while true {
                        let now = monotonicNanoseconds()
                        guard now < measureEnd && !stop.isRequested else { break }
                        let session = sessions[(loop + turn * options.inflight) % sessions.count]
                        turn += 1
                        stats.started.add(1, ordering: .relaxed)
                        guard await runFlow(session, intended: now, tracker: tracker, window: window, stats: stats)
                        else { break }
                    }
                }
            }
            while monotonicNanoseconds() < measureEnd && !stop.isRequested {
                report(monotonicNanoseconds())
                _ = pacer.wait(timeout: .now() + .milliseconds(100))
            }
        }
        // Drain: wait for the flows still in flight.
        while true {
            let now = monotonicNanoseconds()
            report(now)
            let open =
                stats.started.load(ordering: .relaxed) - stats.completed.load(ordering: .relaxed)
                - stats.errors.load(ordering: .relaxed)
            if open <= 0 || now >= drainEnd || stop.isRequested { break }
            _ = pacer.wait(timeout: .now() + .milliseconds(10))
        }
        report(monotonicNanoseconds(), last: true)
        let totals = stats.snapshot()
        let started = stats.started.load(ordering: .relaxed)
        let completed = stats.completed.load(ordering: .relaxed)
        let errors = stats.errors.load(ordering: .relaxed)
        let measuredSeconds = window.end > measureStart ? Double(window.end - measureStart) / 1e9 : 0
        return FlowLoadResult(
            loop: options.isOpenLoop ? "open" : "closed",
            started: started,
            completed: completed,
            errors: errors,
            inFlightAtEnd: started - completed - errors,
            measuredCompleted: totals.measuredCompleted,
            measuredSeconds: measuredSeconds,
            throughput: measuredSeconds > 0 ? Double(totals.measuredCompleted) / measuredSeconds : 0,
            dropped: dropped,
            lateStarts: lateStarts,
            askToPresented: totals.ask.summary,
            sendToResponse: totals.send.summary,
            endToEnd: totals.endToEnd.summary,
            errorSamples: totals.errorSamples,
            askToPresentedSpectrum: LatencySpectrum.points(totals.ask),
            sendToResponseSpectrum: LatencySpectrum.points(totals.send),
            endToEndSpectrum: LatencySpectrum.points(totals.endToEnd),
            histograms: {
                var histograms = FlowHistograms()
                histograms.askToPresented = totals.ask
                histograms.sendToResponse = totals.send
                histograms.endToEnd = totals.endToEnd
                return histograms
            }()
        )
    }

    /// One flow; returns `false` when the run is over (the tracker was cancelled).
    @discardableResult
    static func runFlow(
        _ child: ChildSession,
        intended: UInt64,
        tracker: FlowTracker,
        window: FlowWindow,
        stats: FlowStats
    ) async -> Bool {
        let question = PermissionQuestion<CommunicationTopic>(handle: FlowLoad.handle)
        let id = question.id
        let askStart = monotonicNanoseconds()
        do {
            try await child.ask(question)
        } catch {
            if tracker.isCancelled { return false }
            stats.fail("ask \(child.id): \(error)")
            return true
        }
        let presented = monotonicNanoseconds()
        tracker.expect(id)
        do {
            try await child.send(id)
        } catch {
            if tracker.isCancelled { return false }
            tracker.forget(id)
            stats.fail("send \(child.id): \(error)")
            return true
        }
        guard let (answered, choice) = await tracker.wait(for: id) else { return false }
        if choice.id != PermissionChoice.approve.id {
            stats.fail("response \(child.id): choice \(choice.id), expected approve")
            return true
        }
        stats.complete(
            intended: intended,
            askStart: askStart,
            presented: presented,
            sendStart: presented,
            answered: answered,
            window: window
        )
        return true
    }
}

/// The measured window of a run, in monotonic nanoseconds.
struct FlowWindow: Sendable {
    var measureStart: UInt64
    var measureEnd: UInt64
    var stop = LoadStop()
    /// The window's end: `measureEnd`, or the stop when the run was interrupted before it.
    var end: UInt64 { min(measureEnd, stop.requestedAt) }
}

/// Counters and histograms shared by every flow of a run.
final class FlowStats: Sendable {
    struct Totals: Sendable {
        var measuredCompleted = 0
        var ask = LatencyHistogram()
        var send = LatencyHistogram()
        var endToEnd = LatencyHistogram()
        var errorSamples: [String] = []
    }

    let started = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    private let totals = Mutex(Totals())

    func fail(_ message: String) {
        totals.withLock { if $0.errorSamples.count < 10 { $0.errorSamples.append(message) } }
        errors.add(1, ordering: .relaxed)
    }

    func complete(
        intended: UInt64,
        askStart: UInt64,
        presented: UInt64,
        sendStart: UInt64,
        answered: UInt64,
        window: FlowWindow
    ) {
        totals.withLock { totals in
            let end = window.end
            if intended >= window.measureStart && intended < end {
                totals.ask.record(presented &- askStart)
                totals.send.record(answered >= sendStart ? answered - sendStart : 0)
                totals.endToEnd.record(answered >= intended ? answered - intended : 0)
            }
            if answered >= window.measureStart && answered < end { totals.measuredCompleted += 1 }
        }
        completed.add(1, ordering: .relaxed)
    }

    func snapshot() -> Totals { totals.withLock { $0 } }
}

/// Matches surfaced responses to the flows waiting for them (a response may come before its flow waits).
final class FlowTracker: Sendable {
    typealias Waiter = CheckedContinuation<(UInt64, PermissionChoice)?, Never>
    enum Entry {
        case expected
        case waiting(Waiter)
        case answered(UInt64, PermissionChoice)
    }

    private let state = Mutex<(entries: [UUID: Entry], cancelled: Bool)>(([:], false))

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    func expect(_ id: UUID) { state.withLock { _ = $0.entries[id] = .expected } }
    func forget(_ id: UUID) { state.withLock { _ = $0.entries.removeValue(forKey: id) } }

    func respond(_ id: UUID, choice: PermissionChoice, at time: UInt64) {
        let waiter: Waiter? = state.withLock { state in
            switch state.entries[id] {
            case .waiting(let waiter):
                state.entries.removeValue(forKey: id)
                return waiter
            case .expected, nil:
                // nil: the send's ACK has not been seen yet by the flow (or the flow is unknown): keep it for later.
                state.entries[id] = .answered(time, choice)
                return nil
            case .answered:
                return nil
            }
        }
        waiter?.resume(returning: (time, choice))
    }

    func wait(for id: UUID) async -> (UInt64, PermissionChoice)? {
        await withCheckedContinuation { (continuation: Waiter) in
            let ready: (UInt64, PermissionChoice)?? = state.withLock { state in
                if state.cancelled { return .some(nil) }
                if case .answered(let time, let choice) = state.entries[id] {
                    state.entries.removeValue(forKey: id)
                    return .some((time, choice))
                }
                state.entries[id] = .waiting(continuation)
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Ends every wait with `nil` (the run is over).
    func cancelAll() {
        let waiters: [Waiter] = state.withLock { state in
            state.cancelled = true
            let waiters = state.entries.values.compactMap { entry -> Waiter? in
                if case .waiting(let waiter) = entry { return waiter }
                return nil
            }
            state.entries.removeAll()
            return waiters
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }
}

/// Runs `body` on the cooperative pool and blocks the calling (dedicated) thread until it returns.
func waitingForAsync<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let result = OneShot<T>()
    Task.detached { result.fulfill(await body()) }
    return result.wait()!
}

/// The processes a flows run needs: the broker (unless one is given), one `askrelay-limits` and the
/// `askrelay-parent`s (policy approve, think fixed:0ms), each started and waited for (its `ready` line) in that
/// order, and all stopped by ``stop()`` (SIGTERM, then SIGKILL after 5 s), which the deinit also calls.
public final class FlowServices: @unchecked Sendable {  // @unchecked: owned by the one thread that runs the benchmark.
    /// The brokers the run uses: the started one, or the external list (`--broker` is a list of one).
    public let brokers: BrokerList
    public let brokerProcess: RelayProcess?
    public private(set) var processes: [RelayProcess] = []
    /// Name → pid of every process started (`broker`, `limits`, `parent-<n>`).
    public private(set) var pids: [String: Int32] = [:]
    public let directory: String
    /// With ``FlowLoadOptions/trace``: the folder every process writes its trace file to (removed with the rest).
    public let traceDirectory: String?
    private let scratch: ScratchFolder

    /// - Parameters:
    ///   - executables: the folder of askrelay-broker, askrelay-limits and askrelay-parent.
    ///   - externalBrokers: use these brokers instead of starting one; with several (sharded), one limits worker
    ///     per shard (`--brokers LIST --shard-name bK`) and the parents with `--brokers LIST`.
    ///   - logDirectory: each process's stderr goes to `<name>.log` here (`broker`, `limits`, `limits-bK`,
    ///     `parent-<n>`); nil: to ours.
    public init(
        executables: URL,
        options: FlowLoadOptions,
        durability: String,
        externalBrokers: BrokerList?,
        logLevel: String = "warning",
        logDirectory: String? = nil
    ) throws {
        func log(_ name: String) -> String { logDirectory.map { $0 + "/\(name).log" } ?? "/dev/stderr" }
        let scratch = try ScratchFolder(prefix: "askrelay-load")
        self.scratch = scratch
        let directory = scratch.path
        self.directory = directory
        let traceDirectory = options.trace == true ? directory + "/trace" : nil
        self.traceDirectory = traceDirectory
        if let traceDirectory {
            try FileManager.default.createDirectory(atPath: traceDirectory, withIntermediateDirectories: true)
        }
        func trace(_ name: String) -> [String] { traceDirectory.map { ["--trace-log", $0 + "/\(name).jsonl"] } ?? [] }
        var started: [RelayProcess] = []
        var brokerProcess: RelayProcess?
        let brokers: BrokerList
        do {
            if let externalBrokers {
                brokers = externalBrokers
            } else {
                let server = try RelayProcess.server(
                    executable: executables.appendingPathComponent("askrelay-broker").path,
                    arguments: [
                        "--endpoint", "tcp://127.0.0.1:*", "--data-dir", directory + "/broker", "--durability",
                        durability, "--log-level", logLevel,
                    ] + trace("broker"),
                    logPath: log("broker")
                )
                started.append(server)
                brokerProcess = server
                guard let endpoint = server.ready?.endpoint else {
                    throw RelayLoadError("the broker's ready line names no endpoint: \(server.readyLine ?? "")")
                }
                brokers = BrokerList(single: endpoint)
            }
            let sharded = brokers.entries.count > 1
            // One list: `--broker URL`, as without sharding; several: the list, and each limits worker its shard.
            let target = sharded ? ["--brokers", brokers.description] : ["--broker", brokers.entries[0].endpoint]
            for (index, shard) in brokers.entries.enumerated() {
                let folder = directory + (sharded ? "/limits-\(shard.name)" : "/limits")
                started.append(
                    try RelayProcess.server(
                        executable: executables.appendingPathComponent("askrelay-limits").path,
                        arguments: target + (sharded ? ["--shard-name", shard.name] : []) + [
                            "--id", "load-\(index + 1)", "--data-dir", folder, "--reset", "--log-level", logLevel,
                        ] + trace(sharded ? "limits-\(shard.name)" : "limits"),
                        logPath: log(sharded ? "limits-\(shard.name)" : "limits")
                    )
                )
            }
            for process in 1...options.parents {
                let roster = options.roster(process: process).map { ["id": $0.id, "family": $0.family] }
                let path = directory + "/roster-\(process).json"
                try JSONSerialization.data(withJSONObject: roster).write(to: URL(fileURLWithPath: path))
                started.append(
                    try RelayProcess.server(
                        executable: executables.appendingPathComponent("askrelay-parent").path,
                        arguments: target + [
                            "--roster", path, "--policy", "approve", "--think", "fixed:0ms", "--log-level", logLevel,
                        ] + trace("parent-\(process)"),
                        logPath: log("parent-\(process)")
                    )
                )
            }
        } catch {
            for process in started.reversed() { process.stop() }
            scratch.remove()
            throw error
        }
        self.brokers = brokers
        self.brokerProcess = brokerProcess
        processes = started
        let limits = brokers.entries.count == 1 ? ["limits"] : brokers.entries.map { "limits-\($0.name)" }
        let names =
            (brokerProcess == nil ? [] : ["broker"]) + limits + (1...options.parents).map { "parent-\($0)" }
        for (name, process) in zip(names, started) { pids[name] = process.pid ?? 0 }
    }

    /// Stops every process (last started first) and removes the temporary folder. Safe to call more than once.
    public func stop() {
        for process in processes.reversed() { process.stop() }
        processes.removeAll()
        scratch.remove()
    }

    deinit { stop() }
}
