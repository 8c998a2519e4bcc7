import AskModel
import AskRelayCluster
import Foundation

/// A story file read and checked: who takes part, the limits state they start with, and the steps played in order
/// against fresh processes. The JSON form is documented field by field in docs/stories.md.
public struct Story: Sendable, Equatable {
    /// The story's name in reports: its `name` field, else the file name without `.json`.
    public var name: String
    /// The file it was read from, as given.
    public var file: String
    public var description: String?
    public var families: [Family]
    /// The limits state of each child at the start (children left out: limits on, sync set up, eligible).
    public var limits: [String: ChildLimits]
    public var broker: BrokerSettings
    /// How long a child's `ask` waits for the limits service before `systemError` (AskCenter's `askTimeout`).
    public var askTimeout: Duration
    /// How long a guardian's `answer` waits for the broker's acknowledgement before `timed-out`
    /// (GuardianCenter's `answerTimeout`); the answer is still retried after that.
    public var answerTimeout: Duration = .seconds(10)
    public var steps: [Step]

    /// Whether a step faults the network: then every child, guardian and the limits worker reach the broker
    /// through a link of their own (one center per child and per guardian).
    public var usesLinks: Bool {
        steps.contains { if case .network = $0.action { true } else { false } }
    }

    /// Every child of every family, with its family.
    public var children: [String: String] {
        var found: [String: String] = [:]
        for family in families { for child in family.children { found[child] = family.id } }
        return found
    }

    /// Every guardian of every family, with its family.
    public var guardians: [String: String] {
        var found: [String: String] = [:]
        for family in families { for guardian in family.guardians { found[guardian] = family.id } }
        return found
    }
}

/// One family: its id, its children and its guardians.
public struct Family: Sendable, Equatable {
    public var id: String
    public var children: [String]
    public var guardians: [String]
}

/// A child's limits state; `nil` fields take the limits worker's defaults (on, set up, eligible).
public struct ChildLimits: Sendable, Equatable {
    public var limitsEnabled: Bool?
    public var contactSyncSetUp: Bool?
    public var eligible: Bool?
    public var knownHandles: [CommunicationHandle] = []
}

/// The broker's settings for one story.
public struct BrokerSettings: Sendable, Equatable {
    /// How long a question may stay pending (presented or sent) unless its expiry comes first.
    public var pendingWindow: Duration = .seconds(48 * 3600)
    /// `strict`, `batch` or `off`.
    public var durability = "batch"

    public init() {}
}

/// One step: its place, an optional name, and what it does and expects.
public struct Step: Sendable, Equatable {
    /// 0-based, as in `steps[3]`.
    public var index: Int
    public var name: String?
    public var action: Action

    /// `step 3 "mum approves" (answer)`.
    public var label: String {
        let named = name.map { " \"\($0)\"" } ?? ""
        return "step \(index)\(named) (\(action.keyword))"
    }

    public enum Action: Sendable, Equatable {
        case ask(Ask, expect: AskExpectation)
        case send(question: String, expect: RefusalExpectation)
        case cancel(question: String, expect: RefusalExpectation)
        case answer(guardian: String, question: String, choice: String, expect: RefusalExpectation)
        case expectQuestion(guardian: String, question: String, within: Duration)
        case expectNoQuestion(guardian: String, question: String, during: Duration)
        case expectResponse(question: String, choice: String?, within: Duration)
        case expectNoResponse(question: String, during: Duration)
        case expectClosed(guardian: String, question: String, reason: String, answeredBy: String?, within: Duration)
        case knownHandles(child: String, handles: [CommunicationHandle], expect: [CommunicationHandle])
        case limits(LimitsAdminChange)
        case fault(process: StoryProcess, action: FaultAction)
        case network(on: LinkTarget, NetworkAction)

        /// The step's key in the file.
        public var keyword: String {
            switch self {
            case .ask: "ask"
            case .send: "send"
            case .cancel: "cancel"
            case .answer: "answer"
            case .expectQuestion: "expectQuestion"
            case .expectNoQuestion: "expectNoQuestion"
            case .expectResponse: "expectResponse"
            case .expectNoResponse: "expectNoResponse"
            case .expectClosed: "expectClosed"
            case .knownHandles: "knownHandles"
            case .limits: "limits"
            case .fault: "fault"
            case .network: "network"
            }
        }
    }

    /// The step keys a step may have (exactly one of them).
    public static let keywords = [
        "ask", "send", "cancel", "answer", "expectQuestion", "expectNoQuestion", "expectResponse", "expectNoResponse",
        "expectClosed", "knownHandles", "limits", "fault", "network",
    ]
}

/// What a child asks: the question a story names, built once and reused when the same name is asked again.
public struct Ask: Sendable, Equatable {
    public var child: String
    /// The story's name for the question (`q1`); later steps refer to it.
    public var question: String
    public enum Topic: Sendable, Equatable {
        case communication(handles: [CommunicationHandle], actions: [CommunicationTopic.Action])
        case significantAppUpdate(description: String)
    }
    public var topic: Topic
    /// `nil`: approve/decline.
    public var choices: [PermissionChoice]?
    /// A choice id; `nil`: the most restrictive choice.
    public var defaultChoice: String?
    /// The expiry relative to the ask; negative puts it in the past.
    public var expiresIn: Duration?
}

/// What an `ask` step expects: `presented`, or an `AskError` case by name.
public enum AskExpectation: Sendable, Equatable, CustomStringConvertible {
    case presented
    case refused(String)

    public static let values = ["presented"] + AskError.caseNames

    public var description: String {
        switch self {
        case .presented: "presented"
        case .refused(let name): name
        }
    }
}

extension AskError {
    /// Every case name, as `caseName` spells them.
    public static let caseNames = [
        "communicationLimitsNotEnabled", "contactSyncNotSetup", "invalidQuestion", "notAvailable", "systemError",
        "unknown",
    ]
}

/// What a `send`, `cancel` or `answer` step expects: the broker's acceptance, or its refusal code.
public enum RefusalExpectation: Sendable, Equatable, CustomStringConvertible {
    case accepted
    case refused(String)

    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .refused(let code): code
        }
    }
}

/// A process a fault step acts on.
public enum StoryProcess: String, Sendable, CaseIterable {
    case broker, limits
}

/// What a fault step does to its process.
public enum FaultAction: String, Sendable, CaseIterable {
    /// SIGKILL, and wait for the exit.
    case kill
    /// SIGSTOP.
    case stop
    /// SIGCONT of a stopped process.
    case cont
    /// SIGTERM, and wait for the clean exit (SIGKILL after 15 s).
    case term
    /// Start it again (after kill or term) on the same journal or store, and wait for its ready line.
    case restart
}

/// Whose link to the broker a `network` step acts on.
public enum LinkTarget: Sendable, Hashable, CustomStringConvertible {
    case child(String)
    case guardian(String)
    case limits

    /// `child ann`, `guardian mum`, `the limits worker`.
    public var description: String {
        switch self {
        case .child(let id): "child \(id)"
        case .guardian(let id): "guardian \(id)"
        case .limits: "the limits worker"
        }
    }
}

/// What a `network` step does to a link (``FaultLink``).
public enum NetworkAction: Sendable, Hashable, CustomStringConvertible {
    /// A lasting fault (partition, delay, stall), until a `heal` or for its duration.
    case fault(LinkFault, for: Duration?)
    /// RST to both sides of every connection of the link; what it held is dropped.
    case reset
    /// Ends every fault of the link: held bytes flow, in order.
    case heal

    /// The fault names of the step's `fault` field.
    public static let names = ["partition", "delay", "stall", "reset", "heal"]

    public var description: String {
        switch self {
        case .fault(let fault, let duration): "\(fault)" + (duration.map { " for \(durationText($0))" } ?? "")
        case .reset: "reset"
        case .heal: "heal"
        }
    }
}
