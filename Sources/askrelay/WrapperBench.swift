import AskCLI
import AskModel
import AskRelayProcesses
import CZeroMQ
import Foundation
import ZeroMQ

/// `askrelay bench wrapper`: the same DEALER↔ROUTER echo workload through the Swift wrapper and through direct C
/// calls, alternating rounds in one run, so the ratio is not skewed by what else the machine is doing.
struct WrapperBench: Command {
    static let name = "wrapper"
    static let abstract = "echo through the ZeroMQ wrapper vs direct libzmq C calls; prints ratio=wrapper/C"
    static let discussion = """
        Workload: a DEALER client keeps --inflight messages of --size bytes in flight to a ROUTER echo thread over
        tcp loopback. Each round runs C then wrapper for --seconds each; the ratio is the median of the per-round ratios.
        The last line is 'ratio=<wrapper rate / C rate>'. Target: ratio >= 0.90. Build with -c release.
        """
    static let options = EchoBenchSettings.options(
        rounds: "rounds, each measuring C and wrapper back to back",
        size: "message size"
    )

    let settings: EchoBenchSettings

    init(arguments: Arguments) throws { settings = try EchoBenchSettings(arguments) }

    func run() async throws -> Int32 {
        let (seconds, rounds, size, inflight) = (settings.seconds, settings.rounds, settings.size, settings.inflight)
        return try await onDedicatedThread(name: "bench") {
            print(
                "workload: DEALER->ROUTER echo, tcp loopback, \(size) B, \(inflight) in flight, \(rounds)x\(seconds)s each"
            )
            let medians = try alternatingRounds(
                rounds,
                baseline: { try CEcho.run(seconds: seconds, frames: [size], inflight: inflight) },
                candidate: { try WrapperEcho.run(seconds: seconds, size: size, inflight: inflight) },
                line: { round, c, w in
                    String(format: "round %d: C %.0f msg/s, wrapper %.0f msg/s, ratio %.3f", round, c, w, w / c)
                }
            )
            print(
                String(
                    format: "c_rate=%.0f wrapper_rate=%.0f (round trips/s, median of rounds)",
                    medians.baseline,
                    medians.candidate
                )
            )
            print(String(format: "ratio=%.3f", medians.ratio))
            return ExitCode.success
        }
    }
}

/// `--seconds`, `--rounds`, `--size` and `--inflight` of the echo benchmarks (`bench wrapper`, `bench frames`).
struct EchoBenchSettings {
    let seconds: Double
    let rounds: Int
    let size: Int
    let inflight: Int

    /// The four options, with their help for `--rounds` and `--size`.
    static func options(rounds: String, size: String) -> [OptionSpec] {
        [
            .value("seconds", "S", env: "ASKRELAY_BENCH_SECONDS", default: "1", help: "length of each measured run"),
            .value("rounds", "N", env: "ASKRELAY_BENCH_ROUNDS", default: "5", help: rounds),
            .value("size", "BYTES", env: "ASKRELAY_BENCH_SIZE", default: "100", help: size),
            .value("inflight", "N", env: "ASKRELAY_BENCH_INFLIGHT", default: "100", help: "messages kept in flight"),
        ]
    }

    init(_ arguments: Arguments) throws {
        seconds = try arguments.double("seconds", in: 0.1...600) ?? 1
        rounds = try arguments.int("rounds", in: 1...100) ?? 5
        size = try arguments.int("size", in: 1...1_048_576) ?? 100
        inflight = try arguments.int("inflight", in: 1...100_000) ?? 100
    }
}

/// Runs `rounds` rounds, each measuring `baseline` and `candidate` back to back, the baseline first in odd rounds so
/// neither side always runs on a warmer machine; prints `line(round, baseline, candidate)` per round.
/// - Returns: the medians of the rates and of the per-round ratios candidate ÷ baseline.
func alternatingRounds(
    _ rounds: Int,
    baseline: () throws -> Double,
    candidate: () throws -> Double,
    line: (Int, Double, Double) -> String
) rethrows -> (baseline: Double, candidate: Double, ratio: Double) {
    var baselines: [Double] = []
    var candidates: [Double] = []
    var ratios: [Double] = []
    for round in 1...rounds {
        let first = round % 2 == 1 ? try baseline() : nil
        let measured = try candidate()
        let base = try first ?? baseline()
        baselines.append(base)
        candidates.append(measured)
        ratios.append(measured / base)
        print(line(round, base, measured))
    }
    return (median(baselines), median(candidates), median(ratios))
}

/// The echo workload through the wrapper.
enum WrapperEcho {
    /// - Parameter via: where the DEALER connects, given the ROUTER's endpoint (`bench link` puts a link between).
    static func run(
        seconds: Double,
        size: Int,
        inflight: Int,
        via: (String) throws -> String = { $0 }
    ) throws -> Double {
        let context = try ZMQContext()
        let router = try context.socket(.router)
        try router.set(.linger, 0)
        let endpoint = try router.bind("tcp://127.0.0.1:*")
        let handoff = SocketHandoff(router)
        let server = JoinableThread(name: "echo") {
            // Echo until the empty stop message arrives.
            let router = handoff.take()
            var identity = ZMQMessage()
            var body = ZMQMessage()
            do {
                while try router.receive(&identity), try router.receive(&body), body.count > 0 {
                    try router.send(&identity, more: true)
                    try router.send(&body)
                }
            } catch {
                printError("echo thread: \(error)")
            }
        }

        let dealer = try context.socket(.dealer)
        try dealer.set(.linger, 0)
        try dealer.connect(try via(endpoint))
        let payload = [UInt8](repeating: 0x61, count: size)
        let count = try payload.withUnsafeBytes { bytes -> Int in
            for _ in 0..<inflight { try dealer.send(bytes) }
            let deadline = ContinuousClock.now + .seconds(seconds)
            var received = 0
            var outstanding = inflight
            while outstanding > 0 {
                _ = try dealer.receiveFrame { _ in }
                received += 1
                outstanding -= 1
                if received & 63 != 0 || ContinuousClock.now < deadline {
                    try dealer.send(bytes)
                    outstanding += 1
                    if received & 1023 == 0 && ContinuousClock.now >= deadline { break }
                }
            }
            return received
        }
        try dealer.send([UInt8]())
        server.join()
        return Double(count) / seconds
    }
}

/// The same workload written directly against libzmq's C API, with each message made of `frames` (their sizes;
/// `[size]` for `bench wrapper`'s one-frame messages).
enum CEcho {
    static func run(seconds: Double, frames: [Int], inflight: Int) throws -> Double {
        guard let context = zmq_ctx_new() else { throw ZMQError(code: zmq_errno(), call: "zmq_ctx_new") }
        defer { zmq_ctx_term(context) }
        let router = zmq_socket(context, ZMQ_ROUTER)!
        var linger: Int32 = 0
        zmq_setsockopt(router, ZMQ_LINGER, &linger, 4)
        guard zmq_bind(router, "tcp://127.0.0.1:*") == 0 else { throw ZMQError(code: zmq_errno(), call: "zmq_bind") }
        var endpointBuffer = [CChar](repeating: 0, count: 256)
        var endpointSize = 256
        zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, &endpointBuffer, &endpointSize)
        let endpoint = String(decoding: endpointBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let routerAddress = UInt(bitPattern: router)
        // The routing identity, then the message's frames.
        let parts = frames.count + 1
        let server = JoinableThread(name: "c-echo") {
            // Echo every message frame by frame, until a message whose first frame is empty.
            let router = UnsafeMutableRawPointer(bitPattern: routerAddress)!
            var message = [zmq_msg_t](repeating: zmq_msg_t(), count: parts)
            for index in 0..<parts { zmq_msg_init(&message[index]) }
            serving: while true {
                for index in 0..<parts {
                    guard zmq_msg_recv(&message[index], router, 0) >= 0 else { break serving }
                    if index == 1 && zmq_msg_size(&message[1]) == 0 { break serving }
                }
                for index in 0..<parts { zmq_msg_send(&message[index], router, index < parts - 1 ? ZMQ_SNDMORE : 0) }
            }
            for index in 0..<parts { zmq_msg_close(&message[index]) }
            zmq_close(router)
        }

        let dealer = zmq_socket(context, ZMQ_DEALER)!
        zmq_setsockopt(dealer, ZMQ_LINGER, &linger, 4)
        zmq_connect(dealer, endpoint)
        var payload = [UInt8](repeating: 0x61, count: frames.max() ?? 1)
        var buffer = [UInt8](repeating: 0, count: payload.count)
        func send() {
            for (index, size) in frames.enumerated() {
                zmq_send(dealer, &payload, size, index < frames.count - 1 ? ZMQ_SNDMORE : 0)
            }
        }
        for _ in 0..<inflight { send() }
        let deadline = ContinuousClock.now + .seconds(seconds)
        var received = 0
        var outstanding = inflight
        while outstanding > 0 {
            // The echo returns as many frames as were sent.
            for _ in frames { zmq_recv(dealer, &buffer, buffer.count, 0) }
            received += 1
            outstanding -= 1
            if received & 63 != 0 || ContinuousClock.now < deadline {
                send()
                outstanding += 1
                if received & 1023 == 0 && ContinuousClock.now >= deadline { break }
            }
        }
        // The stop message: one empty frame (the server reads it as the identity and an empty first frame).
        zmq_send(dealer, nil, 0, 0)
        server.join()
        zmq_close(dealer)
        return Double(received) / seconds
    }
}

/// The 50th percentile (``Percentile``, nearest rank: the lower middle of an even count); 0 when empty.
func median(_ values: [Double]) -> Double { Percentile.of(50, sorted: values.sorted()) ?? 0 }
