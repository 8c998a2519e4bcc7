import AskKeys
import AskProtocol
import AskRelayProcesses
import Foundation
import ZeroMQ

extension AskRelayCluster {
    /// How the broker stores its journal (`askrelay-broker --durability`).
    public enum Durability: String, Sendable, CaseIterable {
        /// fsync per commit: survives a power loss.
        case strict
        /// WAL with group commit per loop turn (the broker's default): survives a kill -9 of the broker.
        case batch
        /// Memory only: nothing survives a restart, and there is no journal to read the ledger from.
        case off
    }

    /// Where the broker listens.
    public enum Transport: Sendable, Hashable {
        /// `tcp://127.0.0.1:*`: a port the OS picks, read from the broker's `ready endpoints=` line and kept for
        /// restarts.
        case tcp
        /// `ipc://<folder>/broker.ipc`.
        case ipc
    }

    /// What a cluster starts with. Every duration is the broker's or worker's flag of the same name.
    public struct Options: Sendable {
        /// CURVE encryption and authentication: the cluster writes a key folder as `askrelay keys generate`
        /// does (one key per worker process, ``AskRelayCluster/curve``) and every process and client uses it.
        public var curve = false
        /// How the broker stores its journal (`--durability`).
        public var durability: Durability = .batch
        /// Where the broker listens.
        public var transport: Transport = .tcp
        /// Families `f1`...`fN`, each with guardians `g<f>-1`... and children `c<f>-1`... (the ids
        /// `askrelay keys generate` gives, so the same roster works with and without CURVE).
        public var families = 1
        /// Guardians of each family: `g<f>-1`, `g<f>-2`, ...
        public var guardiansPerFamily = 2
        /// Children of each family: `c<f>-1`, `c<f>-2`, ...
        public var childrenPerFamily = 1
        /// The heartbeat of the broker, the limits worker and the clients made by the cluster's factories.
        public var heartbeat: Duration = .milliseconds(250)
        /// The broker's `--ack-timeout` (redelivery of an unacknowledged message).
        public var ackTimeout: Duration = .seconds(2)
        /// The broker's `--pending-window` (before `timeScale`); `nil`: the broker's default (2 days).
        public var pendingWindow: Duration?
        /// The broker's `--time-scale`.
        public var timeScale: Double = 1
        /// The broker's `--closed-retention`; `nil`: the broker's default.
        public var closedRetention: Duration?
        /// Starts the broker with `--driven-clock` (testing builds only): question time (expiry, the pending
        /// window, the closed-question retention) stands still until ``AskRelayCluster/advanceClock(by:timeout:)``
        /// moves it, so a test of timing rules waits for no deadline. Heartbeats keep real time.
        public var drivenClock = false
        /// `--log-level` of every process.
        public var logLevel = "info"
        /// How long each process may take to print its `ready` line.
        public var readyTimeout: Duration = .seconds(30)
        /// Folder of the askrelay executables; `nil`: `ASKRELAY_BIN_DIR`, else the folder of the running program
        /// and its parents (a test bundle in `.build/debug`). See ``AskRelayCluster/binDirectory(_:)``.
        public var binDirectory: String?
        /// Extra `askrelay-broker` arguments (appended last).
        public var brokerArguments: [String] = []
        /// Extra `askrelay-limits` arguments (appended last).
        public var limitsArguments: [String] = []
        /// Gives the limits worker, every worker process the cluster starts and every center it makes a link of
        /// its own to the broker (a ``FaultLink``, named `limits`, `parent-1`, `askcenter-1`, ...), so a test can
        /// partition, delay, stall or reset one of them: ``AskRelayCluster/link(_:)``,
        /// ``AskRelayCluster/link(for:)-(AskCenter)``. The cluster's own admin session connects directly.
        public var links = false
        /// Records a trace (docs/tracing.md): the broker, the limits worker and every worker process the cluster
        /// starts get `--trace-log <folder>/trace/<name>.jsonl`, and every center its factories make a `TraceLog` at
        /// `<folder>/trace/<center>.jsonl` (`askcenter-1`, `guardiancenter-1`, ...; a center given a `traceLog` of
        /// its own keeps it). ``AskRelayCluster/traceFolder`` names the folder; AskProtocol's `TraceFolder` reads it
        /// and `FlowDiagram` draws one question's flow from it.
        public var trace = false
        /// Prefix of the cluster's temporary folder name (`<prefix>-<random>` in the temporary directory).
        public var folderPrefix = "askrelay-cluster"

        /// Options with the roster, the transport, the durability and CURVE given; everything else (heartbeat,
        /// timeouts, links, extra arguments) at its default, to be set on the value.
        public init(
            curve: Bool = false,
            durability: Durability = .batch,
            transport: Transport = .tcp,
            families: Int = 1,
            guardiansPerFamily: Int = 2,
            childrenPerFamily: Int = 1
        ) {
            self.curve = curve
            self.durability = durability
            self.transport = transport
            self.families = families
            self.guardiansPerFamily = guardiansPerFamily
            self.childrenPerFamily = childrenPerFamily
        }
    }

    /// One family of the cluster's roster.
    public struct Family: Sendable, Hashable {
        /// The family's id: `f1`, `f2`, ...
        public let id: String
        /// Child ids (the child's address is `child/<id>`).
        public let children: [String]
        /// Guardian ids (the guardian's address is `guardian/<id>`).
        public let guardians: [String]
    }

    /// The CURVE material of a cluster started with ``Options/curve``: the broker's public key and one key pair
    /// per client role, written by AskProtocol's `KeyGenerator` into ``folder`` (the layout of
    /// `askrelay keys generate`).
    public struct CurveMaterial: Sendable {
        /// The key folder (`broker.key`, `broker.public`, `principals.json`, `<name>.key`).
        public let folder: String
        /// The broker's public key (Z85), the `serverKey` of every client.
        public let serverPublicKey: String
        /// The key that may serve every child of the roster (`child-1.key`).
        public let child: CurveKeyPair
        /// The key that may serve every guardian of the roster (`parent-1.key`).
        public let guardian: CurveKeyPair
        /// The observer key the cluster's admin session uses (`observer-1.key`).
        public let observer: CurveKeyPair
        /// The limits worker's key (`limits-1.key`).
        public let limits: CurveKeyPair

        /// A client's CURVE settings for `role` (`.child`, `.guardian`, `.observer`, `.limits`; `nil` for `.echo`
        /// and `.client`), as `AskCenter.Options.curve` and `WorkerConfiguration.curve` take them.
        public func client(_ role: SessionRole) -> (keys: CurveKeyPair, serverKey: String)? {
            switch role {
            case .child: (child, serverPublicKey)
            case .guardian: (guardian, serverPublicKey)
            case .observer: (observer, serverPublicKey)
            case .limits: (limits, serverPublicKey)
            case .echo, .client: nil
            }
        }

        /// The key file of `role` (for a worker process's `--curve-key`).
        public func keyFile(_ role: SessionRole) -> String? {
            switch role {
            case .child: folder + "/child-1.key"
            case .guardian: folder + "/parent-1.key"
            case .observer: folder + "/observer-1.key"
            case .limits: folder + "/limits-1.key"
            case .echo, .client: nil
            }
        }

        /// `broker.public`, for a worker process's `--broker-key`.
        public var brokerPublicFile: String { folder + "/" + KeySet.brokerPublicFile }
    }
}

/// Why a cluster could not start or an operation on it (or on one of its processes) failed: what happened and what
/// to do. The same error as a ``RelayProcess``'s.
public typealias ClusterError = RelayProcessError
