import AskClient
import AskLogging
import AskProtocol
import Foundation
import Synchronization
import ZeroMQ

/// One guardian, ready to run: who it is and how it decides.
public struct GuardianSetup: Sendable {
    public var id: String
    public var family: String
    public var policy: DecisionPolicy
    public var think: ThinkTime
    /// When the guardian is offline; `nil` for always online.
    public var offline: OfflineSchedule?

    public init(id: String, family: String, policy: DecisionPolicy, think: ThinkTime, offline: OfflineSchedule? = nil) {
        self.id = id
        self.family = family
        self.policy = policy
        self.think = think
        self.offline = offline
    }

    /// Builds guardians from roster entries, with the worker-wide policy and think time where an entry gives none.
    ///
    /// With `offlineEvery`/`offlineFor`, each guardian gets an offline schedule whose phase is drawn from its own
    /// seeded stream, so guardians of a family are not all offline at the same moment.
    /// - Throws: ``AgentConfigurationError`` for a bad per-guardian policy or think time.
    public static func make(
        _ entries: [GuardianEntry],
        policy: DecisionPolicy,
        think: ThinkTime,
        seed: UInt64,
        offlineEvery: Duration? = nil,
        offlineFor: Duration? = nil,
        baseDirectory: String? = nil
    ) throws(AgentConfigurationError) -> [GuardianSetup] {
        var setups: [GuardianSetup] = []
        var parsedPolicies: [String: DecisionPolicy] = [:]
        for entry in entries {
            var guardianPolicy = policy
            if let text = entry.policy {
                if let known = parsedPolicies[text] {
                    guardianPolicy = known
                } else {
                    do { guardianPolicy = try DecisionPolicy.parse(text, baseDirectory: baseDirectory) } catch {
                        throw AgentConfigurationError("guardian \(entry.id): \(error.message)")
                    }
                    parsedPolicies[text] = guardianPolicy
                }
            }
            var guardianThink = think
            if let text = entry.think {
                do { guardianThink = try ThinkTime.parse(text) } catch {
                    throw AgentConfigurationError("guardian \(entry.id): \(error.message)")
                }
            }
            var offline: OfflineSchedule?
            if let every = offlineEvery, let duration = offlineFor {
                var random = SeededGenerator(seed: seed, stream: "offline/\(entry.id)")
                offline = try OfflineSchedule(every: every, duration: duration, phase: every * random.nextUnit())
            }
            setups.append(
                GuardianSetup(
                    id: entry.id,
                    family: entry.family,
                    policy: guardianPolicy,
                    think: guardianThink,
                    offline: offline
                )
            )
        }
        return setups
    }
}

/// What a parent worker runs: its guardians and the run-wide settings.
public struct ParentWorkerConfiguration: Sendable {
    public var guardians: [GuardianSetup]
    /// Seeds every guardian's random streams (decisions, think times).
    public var seed: UInt64 = 1
    /// JSON Lines file of ``GuardianAnswerRecord``s; `nil` writes none.
    public var recordsPath: String?
    /// Where each connection records the trace lines of its messages (`--trace-log`; docs/tracing.md,
    /// "Recording"); `nil`: nothing is recorded.
    public var traceLog: TraceLog?
    /// The time think times, offline periods and expiry are decided by: the real clock by default; a test gives
    /// the ``DrivenClock`` its broker runs. The connection's loop looks at it at least every 50 ms.
    public var clock: any AskClock = SystemClock()
    #if DEBUG
        /// Debug (testing) builds, checker tests only: answer right after each question's expiry instead of before it.
        public var answerAfterExpiry = false
    #else
        /// Always `false`: a release build cannot answer after expiry on purpose.
        public var answerAfterExpiry: Bool { false }
    #endif

    public init(guardians: [GuardianSetup]) { self.guardians = guardians }
}

/// Something a parent worker did, for tests and progress displays. Delivered on the connection thread.
public enum ParentWorkerEvent: Sendable {
    /// A question reached a guardian.
    case received(guardian: String, question: UUID)
    /// A guardian sent an answer.
    case answered(guardian: String, question: UUID, choiceID: String)
    /// The broker accepted (`accepted`) or refused (its code) an answer; the record was written.
    case answerResult(GuardianAnswerRecord)
    /// A guardian let a question go without answering (`expired`, `closed`, `never`).
    case dropped(guardian: String, question: UUID, why: String)
}

/// A parent worker: hosts guardians over one connection per broker shard they need (one connection with a single
/// broker) and answers their questions per policy.
public final class ParentWorker: Sendable {
    /// One connection per shard of the guardians' families (``ShardedConnections``).
    public let connections: ShardedConnections<WorkerRuntime>

    /// Why a connection ended by itself (a permanent refusal, a dead socket), or `nil` while all run or after
    /// ``stop()``.
    public var failure: WorkerConnectionError? { connections.failure }

    /// Connects to one broker and starts serving.
    /// - Throws: an error creating the socket or opening the records file.
    public convenience init(
        configuration: ParentWorkerConfiguration,
        broker: String,
        heartbeat: Duration = .seconds(1),
        curve: (keys: CurveKeyPair, serverKey: String)? = nil,
        logger: AskLogger,
        context: ZMQContext,
        onRegistered: @escaping @Sendable () -> Void = {},
        onEvent: @escaping @Sendable (ParentWorkerEvent) -> Void = { _ in }
    ) throws {
        try self.init(
            configuration: configuration,
            brokers: BrokerList(single: broker),
            heartbeat: heartbeat,
            curve: curve,
            logger: logger,
            context: context,
            onRegistered: onRegistered,
            onEvent: onEvent
        )
    }

    /// Connects to the shard of every guardian's family and starts serving.
    /// - Parameters:
    ///   - onRegistered: called on a connection thread once every shard's session is registered, and after that at
    ///     each registration again (a reconnect).
    ///   - onEvent: called on the connection threads for each ``ParentWorkerEvent``.
    /// - Throws: an error creating a socket or opening the records file.
    public init(
        configuration: ParentWorkerConfiguration,
        brokers: BrokerList,
        heartbeat: Duration = .seconds(1),
        curve: (keys: CurveKeyPair, serverKey: String)? = nil,
        logger: AskLogger,
        context: ZMQContext,
        onRegistered: @escaping @Sendable () -> Void = {},
        onEvent: @escaping @Sendable (ParentWorkerEvent) -> Void = { _ in }
    ) throws {
        if let path = configuration.recordsPath { _ = try JSONLinesWriter(path: path) }
        let groups = ShardedConnections<WorkerRuntime>.group(configuration.guardians, over: brokers) { $0.family }
        let registered = RegisteredShards(count: groups.count, onAll: onRegistered)
        connections = ShardedConnections(brokers: brokers) { shard in
            var shardConfiguration = configuration
            shardConfiguration.guardians = groups.first { $0.shard == shard }?.items ?? []
            var connection = WorkerConfiguration(
                broker: shard.endpoint,
                role: .guardian,
                worker: "askrelay-parent[\(ProcessInfo.processInfo.processIdentifier)]",
                endpoints: shardConfiguration.guardians.map {
                    EndpointClaim(address: "guardian/\($0.id)", family: $0.family)
                }
            )
            connection.heartbeatInterval = heartbeat
            connection.curve = curve
            connection.traceLog = configuration.traceLog
            let handlerConfiguration = shardConfiguration
            return try WorkerRuntime(configuration: connection, logger: logger, context: context) {
                ParentWorkerHandler(
                    configuration: handlerConfiguration,
                    logger: logger,
                    onRegistered: { registered.registered(shard.name) },
                    onEvent: onEvent
                )
            }
        }
        try connections.openAll(groups) { _ in connections.stop() }
    }

    /// Says BYE on every connection and waits for their threads to end.
    public func stop() { connections.stop() }

    /// Waits until every connection has ended (one ending by itself stops the others).
    public func wait() { connections.wait() }
}

/// Calls `onAll` once every one of `count` shards has registered, and at every registration after that.
final class RegisteredShards: Sendable {
    private let state = Mutex<Set<String>>([])
    private let count: Int
    private let onAll: @Sendable () -> Void

    init(count: Int, onAll: @escaping @Sendable () -> Void) {
        self.count = count
        self.onAll = onAll
    }

    func registered(_ shard: String) {
        let all = state.withLock { shards in
            shards.insert(shard)
            return shards.count >= count
        }
        if all { onAll() }
    }
}
