import AskCLI
import AskLinks
import AskRelayProcesses
import Foundation

/// `askrelay bench link`: what a `FaultLink` without faults costs. The same DEALER↔ROUTER echo as `bench wrapper`,
/// direct and through a link, alternating rounds in one run.
struct LinkBench: Command {
    static let name = "link"
    static let abstract = "echo direct vs through a fault link without faults; prints the added latency per message"
    static let discussion = """
        Workload: a DEALER keeps --inflight messages of --size bytes in flight to a ROUTER echo thread over tcp
        loopback, directly and through a FaultLink (AskLinks, no fault) on loopback, alternating rounds of --seconds
        each. Prints the rates, the bytes the link carried per message, and the latency the link adds per message
        (in flight ÷ rate, link minus direct: Little's law), medians of the rounds. The last line is
        'ratio=<link rate / direct rate>'. Build with -c release. See docs/performance.md.
        """
    static let options = EchoBenchSettings.options(
        rounds: "rounds, each measuring direct and link back to back",
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
            let carried = Carried()
            let medians = try alternatingRounds(
                rounds,
                baseline: { try WrapperEcho.run(seconds: seconds, size: size, inflight: inflight) },
                candidate: {
                    var link: FaultLink?
                    defer { link?.stop() }
                    let rate = try WrapperEcho.run(seconds: seconds, size: size, inflight: inflight) { endpoint in
                        let made = try FaultLink(name: "bench", upstream: endpoint)
                        link = made
                        return made.endpoint
                    }
                    if let counters = link?.counters {
                        carried.add(bytes: counters.bytesToBroker + counters.bytesFromBroker, messages: rate * seconds)
                    }
                    return rate
                },
                line: { round, direct, linked in
                    String(
                        format: "round %d: direct %.0f msg/s, link %.0f msg/s, ratio %.3f",
                        round,
                        direct,
                        linked,
                        linked / direct
                    )
                }
            )
            let added = (Double(inflight) / medians.candidate - Double(inflight) / medians.baseline) * 1e6
            print(
                String(
                    format: "direct_rate=%.0f link_rate=%.0f (round trips/s, median of rounds)",
                    medians.baseline,
                    medians.candidate
                )
            )
            print(String(format: "link_bytes_per_message=%.0f (both ways, ZMTP framing included)", carried.perMessage))
            print(String(format: "added_latency_us=%.1f (per message at %d in flight)", added, inflight))
            print(String(format: "ratio=%.3f", medians.ratio))
            return ExitCode.success
        }
    }

    /// Bytes the link carried and messages echoed through it, over every round.
    final class Carried {
        private var bytes = 0
        private var messages = 0.0
        func add(bytes: Int, messages: Double) {
            self.bytes += bytes
            self.messages += messages
        }
        var perMessage: Double { messages > 0 ? Double(bytes) / messages : 0 }
    }
}
