import AskCLI
import AskProtocol
import AskRelayProcesses
import Foundation
import ZeroMQ

/// `askrelay bench codec`: the wire codec on one core — header parsing as the broker does it, encoding into a reused
/// buffer, and the JSON round trip of a typical question body.
struct CodecBench: Command {
    static let name = "codec"
    static let abstract = "wire codec rates on one core: parse, encode, JSON round trip; prints parse_rate= and ok="
    static let discussion = """
        (a) WireParser.parse of a typical SEND behind a ROUTER identity frame (base 1), the broker's per-message
            header check, over one prebuilt Multipart. Target: parse_rate >= 2000000 messages/s.
        (b) WireEncoder.message of the same SEND into a reused Multipart.
        (c) WireJSON encode + decode of an AskRequest (communication question, 2 people, mixed actions, expiry).
        Each rate is operations per second of the bench thread's CPU time (not wall time, so a busy shared machine
        does not lower it), best of --rounds runs of --seconds. Build with -c release; exit code 1 when parse misses.
        """
    static let options: [OptionSpec] = [
        .value("seconds", "S", env: "ASKRELAY_BENCH_SECONDS", default: "1", help: "length of each measured run"),
        .value(
            "rounds",
            "N",
            env: "ASKRELAY_BENCH_ROUNDS",
            default: "3",
            help: "runs per measurement; the best is reported"
        ),
    ]

    static let parseTarget = 2_000_000.0

    let seconds: Double
    let rounds: Int

    init(arguments: Arguments) throws {
        seconds = try arguments.double("seconds", in: 0.05...600) ?? 1
        rounds = try arguments.int("rounds", in: 1...100) ?? 3
    }

    func run() async throws -> Int32 {
        let (seconds, rounds) = (self.seconds, self.rounds)
        return try await onDedicatedThread(name: "bench") {
            let sample = CodecSample()
            let message = sample.sendFrames(identity: true)
            // Check the workload is what it claims before timing it.
            let parsed = try WireParser.parse(message, base: 1)
            precondition(parsed.command == .send && parsed.id == sample.id && parsed.subject == sample.questionID)
            let decoded = try WireJSON.decode(AskRequest.self, from: sample.body)
            precondition(decoded == sample.request, "the JSON round trip changed the question")

            print("workload: SEND child/c-17 -> limits kind=ask with subject, ROUTER identity frame, base 1")
            print(
                "sizes: question_json=\(sample.body.count) B send_frames=\(message.byteCount) B in \(message.count) frames"
                    + " (without identity: \(message.byteCount - sample.identity.count) B)"
            )

            let parseRate = best(rounds) { CodecLoops.parse(message, seconds: seconds) }
            let encodeRate = best(rounds) { CodecLoops.encode(sample, seconds: seconds) }
            let jsonRate = best(rounds) { CodecLoops.json(sample, seconds: seconds) }
            let ok = parseRate >= Self.parseTarget
            print(String(format: "encode_rate=%.0f (messages/s of CPU time)", encodeRate))
            print(String(format: "json_rate=%.0f (AskRequest encode+decode round trips/s of CPU time)", jsonRate))
            print(
                String(format: "parse_rate=%.0f target=%.0f ok=%@", parseRate, Self.parseTarget, ok ? "true" : "false")
            )
            return ok ? ExitCode.success : ExitCode.failure
        }
    }

    func best(_ rounds: Int, _ measure: () throws -> Double) rethrows -> Double {
        var rates: [Double] = []
        for _ in 0..<rounds { rates.append(try measure()) }
        return rates.max() ?? 0
    }
}

/// The values the benchmark works on.
struct CodecSample {
    let identity: [UInt8] = [0x00, 0x80, 0x00, 0x41, 0xA7]
    let id = MessageID(hex: "0123456789abcdef0011223344556677")!
    let questionID: MessageID
    let request: AskRequest
    let body: [UInt8]

    init() {
        let uuid = UUID(uuidString: "6F1C4A3E-2B7D-4E59-9A0C-1D2E3F405162")!
        let topic = CommunicationTopic(
            personInformation: [
                .init(
                    handle: CommunicationHandle(value: "+41 79 555 01 23", kind: .phoneNumber),
                    nameComponents: PersonName(givenName: "Sam", familyName: "Taylor", nickname: "Sammy")
                ),
                .init(handle: CommunicationHandle(value: "sam.taylor@example.org", kind: .emailAddress)),
            ],
            actions: [.message, .videoCall, .follow]
        )
        let question = AnyPermissionQuestion(
            PermissionQuestion<CommunicationTopic>(
                id: uuid,
                topic: topic,
                expirationDate: Date(wireMilliseconds: 1_796_217_306_123)
            )
        )
        request = AskRequest(question: question)
        body = try! WireJSON.encode(request)
        questionID = MessageID(uuid: uuid)
    }

    func sendFrames(identity withIdentity: Bool) -> Multipart {
        var message = Multipart()
        if withIdentity { message.append(identity) }
        WireEncoder.message(
            .send,
            id: id,
            from: "child/c-17",
            to: "limits",
            kind: "ask",
            subject: questionID,
            body: body,
            into: &message
        )
        return message
    }
}

/// The timed loops. The clock is read every 1024 iterations so it does not dominate.
enum CodecLoops {
    static func parse(_ message: Multipart, seconds: Double) -> Double {
        timed(seconds) {
            var sum = 0
            for _ in 0..<1024 {
                do {
                    // An opaque base, so the optimizer cannot hoist the parse of an unchanging message out of the loop.
                    let parsed = try WireParser.parse(message, base: opaque(1))
                    sum &+= Int(truncatingIfNeeded: parsed.id?.low ?? 0) &+ parsed.bodyFrame
                } catch {
                    sum &+= 1
                }
            }
            blackHole(sum)
        }
    }

    static func encode(_ sample: CodecSample, seconds: Double) -> Double {
        var out = Multipart()
        return timed(seconds) {
            for _ in 0..<1024 {
                out.removeAll()
                out.append(sample.identity)
                WireEncoder.message(
                    .send,
                    id: sample.id,
                    from: "child/c-17",
                    to: "limits",
                    kind: "ask",
                    subject: sample.questionID,
                    body: sample.body,
                    into: &out
                )
                blackHole(out.byteCount)
            }
        }
    }

    static func json(_ sample: CodecSample, seconds: Double) -> Double {
        timed(seconds, batch: 16) {
            for _ in 0..<16 {
                let bytes = try! WireJSON.encode(sample.request)
                let back = try! WireJSON.decode(AskRequest.self, from: bytes)
                blackHole(bytes.count &+ back.question.choices.count)
            }
        }
    }

    /// Runs `batch` (which does `size` operations) until `seconds` of wall time have passed.
    /// - Returns: operations per second of this thread's CPU time, so that other processes on a shared machine
    ///   taking the core away do not count against the codec.
    static func timed(_ seconds: Double, batch size: Int = 1024, _ batch: () -> Void) -> Double {
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(seconds * 1000))
        let cpuStart = threadCPUSeconds()
        var operations = 0
        repeat {
            batch()
            operations += size
        } while clock.now < deadline
        return Double(operations) / max(threadCPUSeconds() - cpuStart, 1e-9)
    }

    /// CPU time consumed by the calling thread.
    static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// Returns its argument, hidden from the optimizer.
@inline(never)
func opaque<T>(_ value: T) -> T { value }

/// Keeps a value alive so the optimizer cannot drop the work that produced it.
@inline(never)
func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}
