/// One message as a ``LinkMessageFault`` judges it.
struct LinkMessageInfo: Equatable {
    /// `nil` when the message is not an AskRelay message (no lead frame of the `ASK` signature and a command byte).
    var command: LinkMessageCommand?
    /// The application kind of a SEND or DELIVER, read from the header in its lead frame.
    var kind: String?

    /// Reads a message's lead frame: signature, command, header (docs/protocol.md §5.2).
    init(frames: [[UInt8]]) {
        guard let lead = frames.first, lead.count >= 5, lead.starts(with: [0x41, 0x53, 0x4B]) else { return }
        command = LinkMessageCommand(rawValue: lead[4])
        guard command == .send || command == .deliver else { return }
        kind = Self.kind(header: Array(lead.dropFirst(5)))
    }

    init(command: LinkMessageCommand?, kind: String?) {
        self.command = command
        self.kind = kind
    }

    /// The kind field of a SEND/DELIVER header: id (16), flags (1), [subject (16)], [trace context (25)], from, to,
    /// kind (each a length byte and its bytes). `nil` when the header is malformed.
    static func kind(header: [UInt8]) -> String? {
        guard header.count >= 20 else { return nil }
        var position = 17
        if header[16] & 0x01 != 0 { position += 16 }
        if header[16] & 0x02 != 0 { position += 25 }
        for _ in 0..<2 {
            guard position < header.count else { return nil }
            position += 1 + Int(header[position])
        }
        guard position < header.count else { return nil }
        let length = Int(header[position])
        guard position + 1 + length <= header.count else { return nil }
        return String(decoding: header[(position + 1)..<(position + 1 + length)], as: UTF8.self)
    }
}

/// What a message fault does with one message.
enum LinkMessageDecision: Equatable {
    case pass
    case drop
    case duplicate
    case delay(Duration)
}

/// Reads one direction of one connection as ZMTP 3 (ZeroMQ RFC 23/37), incrementally, whatever the chunks: the
/// 64-byte greeting, then frames (a flags byte: bit 0 MORE, bit 1 LONG, bit 2 COMMAND; a size of 1 or 8 bytes,
/// big-endian; the body). A message is a run of non-command frames up to one without MORE; command frames (READY,
/// PING, PONG, ...) stand alone and pass as they come, also between the frames of a message.
///
/// While a message fault watches the direction, each message is held until its lead frame is read, then
/// judged: passed on, dropped whole, or held to its end and sent twice or later. Without one, bytes pass at once.
/// When the greeting names another mechanism than NULL (CURVE), or is not ZMTP 3, nothing after it can be read:
/// the stream is opaque and passes every byte.
final class LinkMessageStream {
    enum Phase { case greeting, frames, opaque }

    private(set) var phase = Phase.greeting
    private var greeting: [UInt8] = []
    /// The mechanism the greeting named (`NULL`, `CURVE`), or `ZMTP/1` / `ZMTP/2` for older peers; `nil` before the
    /// greeting was read.
    private(set) var mechanism: String?

    private var frameHeader: [UInt8] = []
    private var inBody = false
    private var remaining = 0
    private var isCommand = false
    private var more = false

    private var inMessage = false
    private var frameIndex = 0
    private var frames: [[UInt8]] = []
    private var current: [UInt8] = []

    private enum Mode: Equatable {
        case pass
        case hold
        case drop
        case buffer(LinkMessageDecision)
    }
    private var mode = Mode.pass
    private var held: [UInt8] = []
    private var ended = false
    /// Messages taken out of the stream by a delay, by when they are due.
    private(set) var delayed: [(due: ContinuousClock.Instant, bytes: [UInt8])] = []

    /// Bytes a drop removed and a duplicate added, so far.
    private(set) var droppedBytes = 0
    private(set) var addedBytes = 0

    static let greetingSize = 64
    /// The most of a frame kept for judging: a header is at most 801 bytes (docs/protocol.md §5.2).
    static let captureLimit = 1024

    /// Bytes the stream holds: a message being judged or buffered, and delayed messages.
    var heldBytes: Int { held.count + delayed.reduce(0) { $0 + $1.bytes.count } }

    /// Nothing held, nothing delayed: what was fed has been given out (or dropped).
    var idle: Bool { held.isEmpty && delayed.isEmpty }

    /// Whether the bytes given out so far end at a message boundary (outside any frame), where a delayed message
    /// may go in.
    var atBoundary: Bool {
        if ended { return true }
        guard phase == .frames else { return false }
        if inBody && isCommand { return false }
        if inMessage && mode == .pass { return false }
        return true
    }

    /// The earliest a delayed message is due.
    var nextDue: ContinuousClock.Instant? { delayed.first?.due }

    /// Reads `data`, appending to `out` what goes on now. `watching`: judge each message with `judge`.
    func feed(
        _ data: ArraySlice<UInt8>,
        now: ContinuousClock.Instant,
        watching: Bool,
        out: inout [UInt8],
        judge: (LinkMessageInfo) -> LinkMessageDecision
    ) {
        var index = data.startIndex
        while index < data.endIndex {
            switch phase {
            case .opaque:
                out += data[index...]
                index = data.endIndex
            case .greeting:
                let take = min(Self.greetingSize - greeting.count, data.endIndex - index)
                greeting += data[index..<(index + take)]
                out += data[index..<(index + take)]
                index += take
                readGreeting()
            case .frames:
                if !inBody {
                    let need = frameHeader.isEmpty ? 1 : (frameHeader[0] & 0x02 != 0 ? 9 : 2)
                    let take = min(need - frameHeader.count, data.endIndex - index)
                    frameHeader += data[index..<(index + take)]
                    index += take
                    if frameHeader.count == need && need > 1 {
                        startFrame(watching: watching, now: now, out: &out, judge: judge)
                    }
                } else {
                    let take = min(remaining, data.endIndex - index)
                    let slice = data[index..<(index + take)]
                    if isCommand {
                        out += slice
                    } else {
                        emit(slice, out: &out)
                        if frameIndex < 1 && current.count < Self.captureLimit {
                            current += slice.prefix(Self.captureLimit - current.count)
                        }
                    }
                    remaining -= take
                    index += take
                    if remaining == 0 { endFrame(now: now, out: &out, judge: judge) }
                }
            }
        }
    }

    /// The source side ended (FIN): a message cut short passes as it came (unless dropped); delayed messages
    /// still go when due.
    func finish(out: inout [UInt8]) {
        if inMessage, mode != .drop {
            out += held
        }
        held = []
        inMessage = false
        mode = .pass
        ended = true
    }

    /// Appends the delayed messages due at `now` to `out`, when the stream is at a boundary. - Returns: how many.
    @discardableResult
    func release(now: ContinuousClock.Instant, out: inout [UInt8]) -> Int {
        guard atBoundary else { return 0 }
        var count = 0
        while let first = delayed.first, first.due <= now {
            out += first.bytes
            delayed.removeFirst()
            count += 1
        }
        return count
    }

    /// Makes every delayed message due by `now` (its fault ended).
    func expedite(now: ContinuousClock.Instant) {
        for index in delayed.indices where delayed[index].due > now { delayed[index].due = now }
    }

    /// Forgets everything held (the connection was reset).
    func drop() {
        held = []
        delayed = []
    }

    private func readGreeting() {
        // Signature: 0xFF, 8 bytes of padding, 0x7F (ZMTP 1.0 peers send a length byte instead).
        if greeting.count >= 10, greeting[0] != 0xFF || greeting[9] & 0x01 == 0 {
            mechanism = "ZMTP/1"
            phase = .opaque
            return
        }
        if greeting.count >= 11, greeting[10] < 3 {
            mechanism = "ZMTP/\(greeting[10])"
            phase = .opaque
            return
        }
        guard greeting.count == Self.greetingSize else { return }
        let name = greeting[12..<32].prefix { $0 != 0 }
        mechanism = String(decoding: name, as: UTF8.self)
        phase = mechanism == "NULL" ? .frames : .opaque
    }

    private func startFrame(
        watching: Bool,
        now: ContinuousClock.Instant,
        out: inout [UInt8],
        judge: (LinkMessageInfo) -> LinkMessageDecision
    ) {
        let header = frameHeader
        frameHeader = []
        let flags = header[0]
        var size: UInt64 = 0
        for byte in header.dropFirst() { size = size << 8 | UInt64(byte) }
        guard size < 1 << 40 else {
            // Not a frame any peer sends: stop reading, pass everything on as it is.
            if inMessage, mode != .drop { out += held }
            held = []
            out += header
            phase = .opaque
            return
        }
        isCommand = flags & 0x04 != 0
        more = flags & 0x01 != 0
        if isCommand {
            out += header
        } else {
            if !inMessage {
                inMessage = true
                frameIndex = 0
                frames = []
                mode = watching ? .hold : .pass
            }
            current = []
            emit(header[...], out: &out)
        }
        remaining = Int(size)
        inBody = true
        if remaining == 0 { endFrame(now: now, out: &out, judge: judge) }
    }

    private func emit(_ bytes: ArraySlice<UInt8>, out: inout [UInt8]) {
        switch mode {
        case .pass: out += bytes
        case .hold, .buffer: held += bytes
        case .drop: droppedBytes += bytes.count
        }
    }

    private func endFrame(
        now: ContinuousClock.Instant,
        out: inout [UInt8],
        judge: (LinkMessageInfo) -> LinkMessageDecision
    ) {
        inBody = false
        if isCommand { return }
        if frameIndex < 1 { frames.append(current) }
        current = []
        frameIndex += 1
        if mode == .hold, frameIndex == 1 || !more {
            let decision = judge(LinkMessageInfo(frames: frames))
            switch decision {
            case .pass:
                out += held
                held = []
                mode = .pass
            case .drop:
                droppedBytes += held.count
                held = []
                mode = .drop
            case .duplicate, .delay:
                mode = .buffer(decision)
            }
        }
        guard !more else { return }
        switch mode {
        case .buffer(.duplicate):
            out += held
            out += held
            addedBytes += held.count
        case .buffer(.delay(let delay)):
            let due = now + delay
            let position = delayed.firstIndex { $0.due > due } ?? delayed.endIndex
            delayed.insert((due, held), at: position)
        default:
            break
        }
        held = []
        mode = .pass
        inMessage = false
        frames = []
    }
}
