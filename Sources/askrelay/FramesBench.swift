import AskCLI
import AskRelayProcesses
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
        command and header frames of a protocol version 1 SEND), more 16-byte frames if asked, then a body of --size bytes; the
        baseline sends the same bytes as one frame. Each round runs both for --seconds each, in alternating order;
        the ratio is the median of the per-round ratios. The last line is 'ratio=<N-frame rate / 1-frame rate>'.
        Build with -c release.
        """
    static let options: [OptionSpec] =
        [.value("frames", "N", env: "ASKRELAY_BENCH_FRAMES", default: "4", help: "frames per message (2...16)")]
        + EchoBenchSettings.options(
            rounds: "rounds, each measuring N frames and 1 frame back to back",
            size: "body size"
        )

    let frames: Int
    let settings: EchoBenchSettings

    init(arguments: Arguments) throws {
        frames = try arguments.int("frames", in: 2...16) ?? 4
        settings = try EchoBenchSettings(arguments)
    }

    /// The frame sizes of one message: the SEND's signature, command and header, 16-byte frames, then the body.
    static func frameSizes(frames: Int, body: Int) -> [Int] {
        let heads = [4, 1, 40] + Array(repeating: 16, count: max(0, frames - 4))
        return Array(heads.prefix(frames - 1)) + [body]
    }

    func run() async throws -> Int32 {
        let (seconds, rounds, inflight) = (settings.seconds, settings.rounds, settings.inflight)
        let split = Self.frameSizes(frames: frames, body: settings.size)
        let whole = [split.reduce(0, +)]
        return try await onDedicatedThread(name: "bench") {
            print(
                "workload: DEALER->ROUTER echo, tcp loopback, frames \(split) vs one frame of \(whole[0]) B, "
                    + "\(inflight) in flight, \(rounds)x\(seconds)s each"
            )
            let medians = try alternatingRounds(
                rounds,
                baseline: { try CEcho.run(seconds: seconds, frames: whole, inflight: inflight) },
                candidate: { try CEcho.run(seconds: seconds, frames: split, inflight: inflight) },
                line: { round, one, many in
                    String(
                        format: "round %d: %d frames %.0f msg/s, 1 frame %.0f msg/s, ratio %.3f",
                        round,
                        split.count,
                        many,
                        one,
                        many / one
                    )
                }
            )
            print(
                String(
                    format: "frames_rate=%.0f one_frame_rate=%.0f (round trips/s, median of rounds)",
                    medians.candidate,
                    medians.baseline
                )
            )
            print(String(format: "ratio=%.3f", medians.ratio))
            return ExitCode.success
        }
    }
}
