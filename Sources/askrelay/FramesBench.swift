import AskCLI
import CZeroMQ
import Foundation
import ZeroMQ

/// `askrelay bench frames`: what the number of frames per message costs libzmq itself. The same DEALER↔ROUTER echo
/// as `bench wrapper`'s C side, once with each message split into `--frames` frames (small header frames, then the
/// body) and once with the same bytes in one frame, alternating rounds. It measures the lever of a wire format with
/// fewer frames per message (docs/performance.md) without changing the protocol.
struct FramesBench: Command {
    static let name = "frames"
    static let abstract = "echo of N-frame messages vs the same bytes in 1 frame (libzmq C calls); prints ratio=N/1"
    static let discussion = """
        Workload: a DEALER client keeps --inflight messages in flight to a ROUTER echo thread over tcp loopback,
        through direct libzmq calls. A message is --frames frames: frames of 4, 1 and 40 bytes (the signature,
        command and header frames of a SEND), more 16-byte frames if asked, then a body of --size bytes; the
        baseline sends the same bytes as one frame. Each round runs both for --seconds each, in alternating order;
        the ratio is the median of the per-round ratios. The last line is 'ratio=<N-frame rate / 1-frame rate>'.
        Build with -c release.
        """
    static let options: [OptionSpec] = [
        .value("frames", "N", env: "ASKRELAY_BENCH_FRAMES", default: "4", help: "frames per message (2...16)"),
        .value("seconds", "S", env: "ASKRELAY_BENCH_SECONDS", default: "1", help: "length of each measured run"),
        .value(
            "rounds",
            "N",
            env: "ASKRELAY_BENCH_ROUNDS",
            default: "5",
            help: "rounds, each measuring N frames and 1 frame back to back"
        ),
        .value("size", "BYTES", env: "ASKRELAY_BENCH_SIZE", default: "100", help: "body size"),
        .value("inflight", "N", env: "ASKRELAY_BENCH_INFLIGHT", default: "100", help: "messages kept in flight"),
    ]

    let frames: Int
    let seconds: Double
    let rounds: Int
    let size: Int
    let inflight: Int

    init(arguments: Arguments) throws {
        frames = try arguments.int("frames", in: 2...16) ?? 4
        seconds = try arguments.double("seconds", in: 0.1...600) ?? 1
        rounds = try arguments.int("rounds", in: 1...100) ?? 5
        size = try arguments.int("size", in: 1...1_048_576) ?? 100
        inflight = try arguments.int("inflight", in: 1...100_000) ?? 100
    }

    /// The frame sizes of one message: the SEND's signature, command and header, 16-byte frames, then the body.
    static func frameSizes(frames: Int, body: Int) -> [Int] {
        let heads = [4, 1, 40] + Array(repeating: 16, count: max(0, frames - 4))
        return Array(heads.prefix(frames - 1)) + [body]
    }

    func run() async throws -> Int32 {
        let (seconds, rounds, inflight) = (self.seconds, self.rounds, self.inflight)
        let split = Self.frameSizes(frames: frames, body: size)
        let whole = [split.reduce(0, +)]
        return try await onDedicatedThread(name: "bench") {
            print(
                "workload: DEALER->ROUTER echo, tcp loopback, frames \(split) vs one frame of \(whole[0]) B, "
                    + "\(inflight) in flight, \(rounds)x\(seconds)s each"
            )
            var splitRates: [Double] = []
            var wholeRates: [Double] = []
            var ratios: [Double] = []
            for round in 1...rounds {
                // Alternate the order so neither side always runs on a warmer machine.
                let wholeFirst = round % 2 == 1
                let w1 = wholeFirst ? try FramedEcho.run(seconds: seconds, frames: whole, inflight: inflight) : nil
                let n = try FramedEcho.run(seconds: seconds, frames: split, inflight: inflight)
                let w = try w1 ?? FramedEcho.run(seconds: seconds, frames: whole, inflight: inflight)
                splitRates.append(n)
                wholeRates.append(w)
                ratios.append(n / w)
                print(
                    String(
                        format: "round %d: %d frames %.0f msg/s, 1 frame %.0f msg/s, ratio %.3f",
                        round,
                        split.count,
                        n,
                        w,
                        n / w
                    )
                )
            }
            print(
                String(
                    format: "frames_rate=%.0f one_frame_rate=%.0f (round trips/s, median of rounds)",
                    median(splitRates),
                    median(wholeRates)
                )
            )
            print(String(format: "ratio=%.3f", median(ratios)))
            return ExitCode.success
        }
    }
}

/// The echo of messages made of `frames` (their sizes), written against libzmq's C API.
enum FramedEcho {
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
        let server = JoinableThread(name: "c-echo") {
            // Echo every message, frame by frame, until a message whose first frame is empty.
            let router = UnsafeMutableRawPointer(bitPattern: routerAddress)!
            var parts = [zmq_msg_t](repeating: zmq_msg_t(), count: 17)
            serving: while true {
                var count = 0
                repeat {
                    zmq_msg_init(&parts[count])
                    guard zmq_msg_recv(&parts[count], router, 0) >= 0 else { break serving }
                    count += 1
                } while zmq_msg_more(&parts[count - 1]) != 0 && count < parts.count
                if count == 2 && zmq_msg_size(&parts[1]) == 0 {
                    zmq_msg_close(&parts[0])
                    zmq_msg_close(&parts[1])
                    break
                }
                for index in 0..<count {
                    zmq_msg_send(&parts[index], router, index < count - 1 ? ZMQ_SNDMORE : 0)
                }
            }
            zmq_close(router)
        }

        let dealer = zmq_socket(context, ZMQ_DEALER)!
        zmq_setsockopt(dealer, ZMQ_LINGER, &linger, 4)
        zmq_connect(dealer, endpoint)
        var payload = [UInt8](repeating: 0x61, count: frames.max() ?? 1)
        var buffer = [UInt8](repeating: 0, count: payload.count)
        func sendMessage() {
            for (index, size) in frames.enumerated() {
                zmq_send(dealer, &payload, size, index < frames.count - 1 ? ZMQ_SNDMORE : 0)
            }
        }
        func receiveMessage() {
            var more: Int32 = 1
            var moreSize = MemoryLayout<Int32>.size
            while more != 0 {
                zmq_recv(dealer, &buffer, buffer.count, 0)
                zmq_getsockopt(dealer, ZMQ_RCVMORE, &more, &moreSize)
            }
        }
        for _ in 0..<inflight { sendMessage() }
        let deadline = ContinuousClock.now + .seconds(seconds)
        var received = 0
        var outstanding = inflight
        while outstanding > 0 {
            receiveMessage()
            received += 1
            outstanding -= 1
            if received & 63 != 0 || ContinuousClock.now < deadline {
                sendMessage()
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
