import AskCLI
import AskProtocol
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// What a relay load run drives: the AskRelay broker (wire protocol) or a plain `zmq_proxy` (ROUTER front, DEALER back).
public enum RelayTarget: Sendable, Equatable {
    /// The broker's ROUTER endpoint.
    case broker(String)
    /// A `zmq_proxy`: clients connect DEALERs to `frontend` (ROUTER), echo workers connect DEALERs to `backend` (DEALER).
    case proxy(frontend: String, backend: String)

    public var label: String {
        switch self {
        case .broker: "askrelay"
        case .proxy: "zmq_proxy"
        }
    }
}

/// The workload of `askrelay load --mode relay`.
public struct RelayLoadOptions: Sendable, Codable, Equatable {
    /// Client DEALER sockets.
    public var connections = 4
    /// Round trips kept in flight over all connections (closed loop).
    public var inflight = 100
    /// Open loop: round trips started per second over all connections; overrides `inflight` when set.
    public var rate: Double?
    public var durationSeconds: Double = 5
    public var warmupSeconds: Double = 1
    /// Body bytes per message (at least 16: the first 8 carry the intended send time).
    public var size = 100
    public var echoWorkers = 2
    /// Simulated service time of each echo worker (one message at a time); 0 replies at once. Tests use it.
    public var echoServiceMicroseconds: Double = 0
    /// `true`: one thread polls every client socket; `false`: one thread per client socket.
    public var sharedClientThread = false
    /// After the measured window, how long to wait for replies still in flight; those that never come are timeouts.
    public var drainSeconds: Double = 1

    public init() {}

    enum CodingKeys: String, CodingKey {
        case connections, inflight, rate, durationSeconds = "duration_s", warmupSeconds = "warmup_s", size
        case echoWorkers = "echo_workers", echoServiceMicroseconds = "echo_service_us", sharedClientThread =
            "shared_client_thread"
        case drainSeconds = "drain_s"
    }

    public var isOpenLoop: Bool { rate != nil }

    public func problems() -> [String] {
        var problems: [String] = []
        if connections < 1 { problems.append("--connections must be at least 1") }
        if inflight < 1 { problems.append("--inflight must be at least 1") }
        if let rate, !(rate > 0 && rate.isFinite) { problems.append("--rate must be a positive number") }
        if size < 16 { problems.append("--size must be at least 16 bytes") }
        if echoWorkers < 1 { problems.append("--echo-workers must be at least 1") }
        if !(durationSeconds > 0) { problems.append("--duration must be positive") }
        if warmupSeconds < 0 { problems.append("--warmup must not be negative") }
        return problems
    }
}

/// The figures of one run.
public struct RelayLoadResult: Sendable, Codable, Equatable {
    public var target: String
    /// `closed` (fixed in flight) or `open` (fixed arrival rate, latency from the intended send time).
    public var loop: String
    /// Round trips started (warm-up, measured window and drain).
    public var sent: Int
    /// Replies received.
    public var completed: Int
    /// Round trips without a reply when the run ended (after the drain); counted as timeouts.
    public var inFlightAtEnd: Int
    /// Refusals (NACKs) and protocol errors seen by clients and echo workers.
    public var errors: Int
    public var timeouts: Int
    /// Replies received inside the measured window.
    public var measuredCompleted: Int
    public var measuredSeconds: Double
    /// Round trips per second inside the measured window.
    public var throughput: Double
    /// Round-trip latency of requests started in the measured window (open loop: from the intended send time).
    public var latency: LatencySummary
    /// The same latencies against percentile (``LatencySpectrum``), for load.html.
    public var latencySpectrum: [SpectrumPoint]?

    enum CodingKeys: String, CodingKey {
        case target, loop, sent, completed, inFlightAtEnd = "in_flight_at_end", errors, timeouts
        case measuredCompleted = "measured_completed", measuredSeconds = "measured_s", throughput = "throughput_rt_s",
            latency
        case latencySpectrum = "latency_spectrum"
    }
}

/// Live counters read once a second for progress.
public struct RelayLoadProgress: Sendable {
    public var elapsedSeconds: Double
    public var completed: Int
    public var sent: Int
    public var errors: Int
    public var phase: String
}
