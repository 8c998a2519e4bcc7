import AskCLI
import AskModel
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
    static let options: [OptionSpec] = [
        .value("seconds", "S", env: "ASKRELAY_BENCH_SECONDS", default: "1", help: "length of each measured run"),
        .value(
            "rounds",
            "N",
            env: "ASKRELAY_BENCH_ROUNDS",
            default: "5",
            help: "rounds, each measuring C and wrapper back to back"
        ),
        .value("size", "BYTES", env: "ASKRELAY_BENCH_SIZE", default: "100", help: "message size"),
        .value("inflight", "N", env: "ASKRELAY_BENCH_INFLIGHT", default: "100", help: "messages kept in flight"),
    ]

    let seconds: Double
    let rounds: Int
    let size: Int
    let inflight: Int

    init(arguments: Arguments) throws {
        seconds = try arguments.double("seconds", in: 0.1...600) ?? 1
        rounds = try arguments.int("rounds", in: 1...100) ?? 5
        size = try arguments.int("size", in: 1...1_048_576) ?? 100
        inflight = try arguments.int("inflight", in: 1...100_000) ?? 100
    }

    func run() async throws -> Int32 {
        let (seconds, rounds, size, inflight) = (self.seconds, self.rounds, self.size, self.inflight)
        return try await onDedicatedThread(name: "bench") {
            print(
                "workload: DEALER->ROUTER echo, tcp loopback, \(size) B, \(inflight) in flight, \(rounds)x\(seconds)s each"
            )
            var cRates: [Double] = []
            var wrapperRates: [Double] = []
            var ratios: [Double] = []
            for round in 1...rounds {
                // Alternate the order so neither side always runs on a warmer machine.
                let cFirst = round % 2 == 1
                let c1 = cFirst ? try CEcho.run(seconds: seconds, size: size, inflight: inflight) : nil
                let w = try WrapperEcho.run(seconds: seconds, size: size, inflight: inflight)
                let c = try c1 ?? CEcho.run(seconds: seconds, size: size, inflight: inflight)
                cRates.append(c)
                wrapperRates.append(w)
                ratios.append(w / c)
                print(String(format: "round %d: C %.0f msg/s, wrapper %.0f msg/s, ratio %.3f", round, c, w, w / c))
            }
            print(
                String(
                    format: "c_rate=%.0f wrapper_rate=%.0f (round trips/s, median of rounds)",
                    median(cRates),
                    median(wrapperRates)
                )
            )
            print(String(format: "ratio=%.3f", median(ratios)))
            return ExitCode.success
        }
    }
}

/// The echo workload through the wrapper.
enum WrapperEcho {
    static func run(seconds: Double, size: Int, inflight: Int) throws -> Double {
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
        try dealer.connect(endpoint)
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

/// The same workload written directly against libzmq's C API.
enum CEcho {
    static func run(seconds: Double, size: Int, inflight: Int) throws -> Double {
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
        let server = JoinableThread(name: "c-echo") {
            let router = UnsafeMutableRawPointer(bitPattern: routerAddress)!
            var identity = zmq_msg_t()
            var body = zmq_msg_t()
            zmq_msg_init(&identity)
            zmq_msg_init(&body)
            while zmq_msg_recv(&identity, router, 0) >= 0, zmq_msg_recv(&body, router, 0) >= 0 {
                if zmq_msg_size(&body) == 0 { break }
                zmq_msg_send(&identity, router, ZMQ_SNDMORE)
                zmq_msg_send(&body, router, 0)
            }
            zmq_msg_close(&identity)
            zmq_msg_close(&body)
            zmq_close(router)
        }

        let dealer = zmq_socket(context, ZMQ_DEALER)!
        zmq_setsockopt(dealer, ZMQ_LINGER, &linger, 4)
        zmq_connect(dealer, endpoint)
        var payload = [UInt8](repeating: 0x61, count: size)
        var buffer = [UInt8](repeating: 0, count: size)
        for _ in 0..<inflight { zmq_send(dealer, &payload, size, 0) }
        let deadline = ContinuousClock.now + .seconds(seconds)
        var received = 0
        var outstanding = inflight
        while outstanding > 0 {
            zmq_recv(dealer, &buffer, size, 0)
            received += 1
            outstanding -= 1
            if received & 63 != 0 || ContinuousClock.now < deadline {
                zmq_send(dealer, &payload, size, 0)
                outstanding += 1
                if received & 1023 == 0 && ContinuousClock.now >= deadline { break }
            }
        }
        zmq_send(dealer, nil, 0, 0)
        server.join()
        zmq_close(dealer)
        return Double(received) / seconds
    }
}

/// The 50th percentile (``Percentile``, nearest rank: the lower middle of an even count); 0 when empty.
func median(_ values: [Double]) -> Double { Percentile.of(50, sorted: values.sorted()) ?? 0 }
