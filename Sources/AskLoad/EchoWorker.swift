import AskCLI
import AskProtocol
import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// One echo worker: answers every message with the same body, after an optional simulated service time.
final class EchoWorker {
    let index: Int
    let target: RelayTarget
    /// Released (closed) as soon as the worker stops, so the closing BYE is flushed when the context ends.
    var socket: ZMQSocket!
    let options: RelayLoadOptions
    let shared: SharedRun
    let address: String
    let addressBytes: [UInt8]
    /// The broker reads ACK ids carried by SEND (its WELCOME said so).
    var carriesAcks = false

    init(index: Int, target: RelayTarget, context: ZMQContext, options: RelayLoadOptions, shared: SharedRun) throws {
        self.index = index
        self.target = target
        self.options = options
        self.shared = shared
        address = "echo/\(index)"
        addressBytes = Array(address.utf8)
        socket = try context.socket(.dealer)
        try socket.set(.linger, 200)  // long enough for the closing BYE
        try socket.set(.sendHighWaterMark, 0)
        try socket.set(.receiveHighWaterMark, 0)
        switch target {
        case .broker(let endpoint): try socket.connect(endpoint)
        case .proxy(_, let backend): try socket.connect(backend)
        }
    }

    func run(setupDeadline: UInt64) {
        var input = Multipart()
        do {
            if case .broker = target {
                carriesAcks = try register(
                    socket: socket,
                    role: .echo,
                    address: address,
                    input: &input,
                    deadline: setupDeadline
                )
            }
        } catch {
            shared.fail("\(error)")
            shared.ready.signal()
            return
        }
        shared.ready.signal()
        shared.go.wait()
        do {
            try serve(&input)
        } catch {
            if !shared.stopping.load(ordering: .acquiring) { shared.fail("\(address): \(error)") }
        }
        if case .broker = target { sayBye(socket) }
        socket = nil
    }

    struct Pending {
        var due: UInt64
        var reply: Multipart
        var delivery: MessageID?
    }

    func serve(_ input: inout Multipart) throws {
        let isBroker: Bool
        if case .broker = target { isBroker = true } else { isBroker = false }
        let service = UInt64(options.echoServiceMicroseconds * 1000)
        var out = Multipart()
        var acks: [MessageID] = []
        acks.reserveCapacity(1024)
        var pending: [Pending] = []
        var pendingHead = 0
        var lastServiceEnd: UInt64 = 0
        var idLow: UInt64 = 0
        let idHigh = UInt64.random(in: 0...UInt64.max)
        var lastSent = monotonicNanoseconds()
        var errors = 0
        while !shared.stopping.load(ordering: .relaxed) {
            var timeout = 50
            if pendingHead < pending.count {
                let now = monotonicNanoseconds()
                let due = pending[pendingHead].due
                timeout = due <= now ? 0 : Int((due - now) / 1_000_000)
            }
            if try socket.wait(timeoutMilliseconds: timeout) {
                var batch = 0
                while batch < 512, try socket.receive(into: &input, .dontWait) {
                    batch += 1
                    guard isBroker else {
                        // Proxy: [client identity][body] goes back as it came.
                        if service == 0 {
                            try socket.send(input)
                        } else {
                            lastServiceEnd = max(lastServiceEnd, monotonicNanoseconds()) + service
                            pending.append(Pending(due: lastServiceEnd, reply: input, delivery: nil))
                        }
                        continue
                    }
                    let parsed: ParsedFrames
                    do { parsed = try WireParser.parse(input) } catch {
                        errors += 1
                        continue
                    }
                    switch parsed.command {
                    case .deliver:
                        out.removeAll()
                        idLow &+= 1
                        // The reply acknowledges the delivery it answers, when the broker reads carried ACK ids;
                        // otherwise the delivery is acknowledged in an ACK once the reply is sent.
                        let carried: ArraySlice<MessageID> = carriesAcks ? [parsed.id!] : []
                        input.withBytes(parsed.fromRange) { replyTo in
                            addressBytes.withUnsafeBytes {
                                appendSendLead(
                                    idHigh,
                                    idLow,
                                    from: $0,
                                    to: replyTo,
                                    kind: RelayLoad.kind,
                                    acks: carried,
                                    into: &out
                                )
                            }
                        }
                        input.withFrame(parsed.bodyFrame) { out.append($0) }
                        let separateAck = carriesAcks ? nil : parsed.id
                        if service == 0 {
                            try socket.send(out)
                            if let separateAck { acks.append(separateAck) }
                        } else {
                            lastServiceEnd = max(lastServiceEnd, monotonicNanoseconds()) + service
                            pending.append(Pending(due: lastServiceEnd, reply: out, delivery: separateAck))
                        }
                    case .nack, .bye:
                        errors += 1
                    default:
                        break
                    }
                }
            }
            if pendingHead < pending.count {
                let now = monotonicNanoseconds()
                while pendingHead < pending.count, pending[pendingHead].due <= now {
                    try socket.send(pending[pendingHead].reply)
                    if let id = pending[pendingHead].delivery { acks.append(id) }
                    pendingHead += 1
                }
                if pendingHead > 1024 && pendingHead * 2 > pending.count {
                    pending.removeFirst(pendingHead)
                    pendingHead = 0
                }
            }
            if !acks.isEmpty {
                try sendAcks(&acks, socket: socket, out: &out)
                lastSent = monotonicNanoseconds()
            } else if isBroker, monotonicNanoseconds() - lastSent > 1_000_000_000 {
                out.removeAll()
                WireEncoder.heartbeat(into: &out)
                try socket.send(out)
                lastSent = monotonicNanoseconds()
            }
            if errors > 0 {
                shared.errors.add(errors, ordering: .relaxed)
                shared.totals.withLock { $0.errors += errors }
                errors = 0
            }
        }
    }
}
