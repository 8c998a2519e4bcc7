import AskBasics
import AskBroker
import AskCLI
import Foundation

/// A scenario read from a JSON file that says what `askrelay simulate` plays. Every field has a documented default
/// (docs/simulation.md), so `{}` is a valid scenario; unknown keys are refused so that a typo is not silently
/// ignored. Durations are strings with a unit (`250ms`, `2s`, `5m`, `48h`).
public struct Scenario: Codable, Sendable, Equatable {
    /// Root of every random decision; each process gets a seed derived from it and its name.
    public var seed: UInt64 = 42
    /// Families `f1 ... f<families>`; every child and parent process serves all of them.
    public var families = 240
    /// Children of each family in each child process.
    public var childrenPerFamily = 1
    /// Guardians of each family in each answering parent process.
    public var guardiansPerFamily = 1
    public var childProcesses = 2
    public var parentProcesses = 2
    /// Fractions of children (limits state) and of flows (`knownHandle`).
    public var ratios = Ratios()
    /// Relative weights of the actions a communication question asks about.
    public var actions: [String: Double] = ["message": 4, "call": 2, "videoCall": 1, "chat": 1, "follow": 1]
    /// Relative weights of the topic types.
    public var topics: [String: Double] = ["communication": 9, "significantAppUpdate": 1]
    /// Fraction of communication questions about several people.
    public var groupQuestionRatio = 0.2
    /// Fraction of asks whose question is deliberately invalid (→ `invalidQuestion`).
    public var invalidRatio = 0.03
    /// Probability that a child cancels the send sheet instead of sending.
    public var cancelProbability = 0.1
    /// Probability that a child neither sends nor cancels, so the question is abandoned when the window closes.
    public var abandonProbability = 0.03
    /// Probability that a child that sends also cancels at the same moment, racing the two at the broker
    /// (askrelay-child `--race-cancel-probability`; reaches `send-racing-cancel`).
    public var raceCancelProbability = 0.0
    /// Generated contacts per child (askrelay-child `--contacts`); `ratios.knownHandle` of them are known.
    public var contactsPerChild = 8
    public var guardians = Guardians()
    /// Wall-clock pause of a child between two flows.
    public var childThink: Duration = .milliseconds(1500)
    /// Product pending window (48 hours), divided by `timeScale`.
    public var pendingWindow: Duration = .seconds(48 * 3600)
    /// Product expiry a child puts on its questions (`expirationDate = now + expireAfter / timeScale`);
    /// `nil` leaves it to the pending window.
    public var expireAfter: Duration? = .seconds(24 * 3600)
    /// How much faster than real time product durations pass. 57 600 turns 48 h into 3 s.
    public var timeScale: Double = 57_600
    /// Longest the children may run; when it passes they are told to stop (SIGTERM) and finish.
    public var duration: Duration = .seconds(40)
    /// Flows each simulated child plays before its process prints `done` and exits.
    public var flowsPerChild = 4
    /// How long a child keeps waiting for a response after its local expiry, for answers already in flight.
    public var grace: Duration = .seconds(2)
    /// Broker journal durability: strict, batch, off.
    public var durability = "batch"
    /// Faults played on time while the children run.
    public var faults: [Fault] = []
    /// Test only: the parent processes answer after expiry (`--answer-after-expiry`), which must break an invariant.
    public var answerAfterExpiry = false
    /// Fault tests only: the broker's first run gets `--crash-at POINT[:N]` (docs/broker.md); when it crashes there
    /// it is restarted on the same journal, and that SIGKILL counts as expected.
    public var brokerCrashAt: String?
    /// Brokers, each the shard of some families (docs/scaling.md): with more than one, they are named `b0 ...`,
    /// their processes `broker-b0 ...`, each has a limits worker `limits-b0 ...`, and every worker gets the list.
    public var brokers = 1
    /// What the run must have exercised, besides every invariant holding (docs/simulation.md, "Reached situations").
    public var expect = Expect()

    public init() {}

    /// What a run must have exercised.
    public struct Expect: Codable, Sendable, Equatable {
        /// Situations (``ReachedSituation`` names) the run must reach at least once; one never reached fails the run
        /// with exit 2.
        public var reached: [String] = []
        public init() {}
    }

    /// Children's limits state and known handles, as fractions in 0...1.
    public struct Ratios: Codable, Sendable, Equatable {
        /// Children that have communication limits turned on (the others get `communicationLimitsNotEnabled`).
        public var limitsEnabled = 0.97
        /// Children whose contact sync is set up (the others get `contactSyncNotSetup`).
        public var contactSyncSetUp = 0.97
        /// Children on an eligible device and account (the others get `notAvailable`).
        public var eligible = 0.97
        /// Share of each child's contacts the system already knows; a flow about only known people asks nothing.
        public var knownHandle = 0.15
        public init() {}
    }

    /// Guardian behaviour.
    public struct Guardians: Codable, Sendable, Equatable {
        /// Probability that an answering guardian approves (else denies).
        public var approveProbability = 0.7
        /// Fraction of families whose guardians never answer; their questions expire.
        public var neverAnswerRatio = 0.1
        /// Think time before answering: `fixed:200ms`, `uniform:50ms-2s` or `exponential:300ms`.
        public var think = "exponential:250ms"
        public init() {}
    }
}

extension Scenario {
    /// The ranges of the counts and of the fields that have an `askrelay simulate` flag: the flag and the field
    /// share one range, so `"families": 1e9` is refused as `--families 1000000000` is (docs/simulation.md).
    public enum Bounds {
        /// `families`, `--families`.
        public static let families = 1...1_000_000
        /// `brokers`, `--brokers`.
        public static let brokers = 1...16
        /// `duration`, `--duration`.
        public static let duration: ClosedRange<Duration> = .milliseconds(1)...ValueBounds.maximumDuration
        /// `timeScale`, `--time-scale`: the broker's range.
        public static let timeScale = ValueBounds.timeScale
        /// `childProcesses`, `parentProcesses`: each is an OS process.
        public static let processes = 1...256
        /// `childrenPerFamily`, `guardiansPerFamily`.
        public static let perFamily = 1...1000
        public static let flowsPerChild = 1...1_000_000
        public static let contactsPerChild = 1...10_000
    }

    /// A drain bound longer than this (a low time scale) is refused unless the user accepts it
    /// (`--allow-long-drain`).
    public static let longDrainLimit: Duration = .seconds(600)

    /// Why this scenario's run could last far longer than its `duration`, in words, when its ``drainBound`` is over
    /// ``longDrainLimit``: with a low time scale the pending window passes in wall time, and a child waits for the
    /// questions it sent. `nil` otherwise.
    public var longDrainProblem: String? {
        guard drainBound > Self.longDrainLimit else { return nil }
        let scale = timeScale == timeScale.rounded() && timeScale < 1e15 ? String(Int(timeScale)) : String(timeScale)
        let window = max(pendingWindow, expireAfter ?? .zero)
        return "with time scale \(scale) a question's \(window.text) window lasts \(Self.wallText(window / timeScale)) "
            + "of wall time, so a child process may take up to \(Self.wallText(drainBound)) after its duration "
            + "(\(duration.text)) to finish the flows it started (the drain bound, docs/simulation.md): the run may "
            + "last \(Self.wallText(duration + drainBound)). Give --allow-long-drain (ASKRELAY_ALLOW_LONG_DRAIN) to "
            + "run it anyway, or a higher --time-scale (57600 turns 48h into 3s)"
    }

    /// Wall time in hours, minutes and seconds: `24h 0m 36s`, `9m 5s`, `12s`.
    static func wallText(_ duration: Duration) -> String {
        let total = Int(duration.seconds.rounded())
        let (hours, minutes, seconds) = (total / 3600, total % 3600 / 60, total % 60)
        if hours > 0 { return "\(hours)h \(minutes)m \(seconds)s" }
        if minutes > 0 { return "\(minutes)m \(seconds)s" }
        return "\(seconds)s"
    }
}

/// A scenario field that is missing its type, out of range, or unknown; `field` is a dotted path (`faults[1].at`).
public struct ScenarioError: Error, CustomStringConvertible, Sendable, Equatable {
    public let field: String
    public let message: String
    public init(field: String, _ message: String) {
        self.field = field
        self.message = message
    }
    public var description: String { field.isEmpty ? "scenario: \(message)" : "scenario field '\(field)': \(message)" }
}

extension Scenario {
    /// Names of every process the scenario starts, in start order.
    public var processNames: [String] {
        allShardNames.map { brokers == 1 ? "broker" : "broker-\($0)" }
            + allShardNames.map { brokers == 1 ? "limits" : "limits-\($0)" }
            + (1...parentProcesses).map { "parent-\($0)" } + (1...childProcesses).map { "child-\($0)" }
    }

    /// The brokers' names in the list the run starts with: `b0 ... b<brokers-1>`.
    public var shardNames: [String] { (0..<max(1, brokers)).map { "b\($0)" } }

    /// The brokers `add-broker` faults start later, in schedule order.
    public var addedShardNames: [String] {
        var names: [String] = []
        for fault in faults.sorted(by: { $0.at < $1.at }) where fault.action == .addBroker {
            let name = String(fault.process.dropFirst("broker-".count))
            if !names.contains(name) && !shardNames.contains(name) { names.append(name) }
        }
        return names
    }

    /// Every broker the run may have: those it starts with, then those it adds.
    public var allShardNames: [String] { shardNames + addedShardNames }

    /// Whether the schedule changes the broker list (`add-broker`, `remove-broker`).
    public var changesBrokers: Bool { faults.contains { $0.action.changesBrokers } }

    /// Families whose guardians answer: `f1 ... f<answeringFamilies>`; the rest never answer.
    public var answeringFamilies: Int {
        max(0, min(families, Int((Double(families) * (1 - guardians.neverAnswerRatio)).rounded())))
    }

    /// `duration` divided by the time scale, in seconds.
    public func scaled(_ duration: Duration) -> Double { duration.seconds / timeScale }

    /// The longest a child process may take, once its `duration` ended, to finish the flows it had already started
    /// (it starts none after it): a flow waits at most for three broker calls (known handles, ask, send or cancel:
    /// 10 s each in askrelay-child), three scaled pending windows (an earlier question about the same people, the
    /// question's own window, a reconnect after it) and two graces; plus 2 s of slack. A child still running then
    /// is told to finish with SIGTERM.
    public var drainBound: Duration {
        let window = max(pendingWindow, expireAfter ?? .zero).seconds / timeScale
        return .seconds(30) + Duration(seconds: min(window * 3, 86_400), rounding: .towardZero) + grace * 2
            + .seconds(2)
    }
}
