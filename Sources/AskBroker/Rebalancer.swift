import AskProtocol
import Foundation
import ZeroMQ

/// Moves every family whose broker changes from one broker list to the next, with its state (docs/scaling.md,
/// "Rebalancing"): `askrelay rebalance`.
///
/// The mover keeps nothing of its own: each step is a request to a broker's admin endpoint that the broker journals
/// and that is idempotent, so a mover killed at any point is simply run again with the same arguments, and resumes
/// from what the brokers' journals say. For each family that changes broker, from its broker S to its new broker D:
///
/// 1. `hold` at S: S refuses the family's SENDs (`moving`, resent by the senders) from now on;
/// 2. `export` at S: the family's question rows, roster, undelivered messages and its children's limits state (S
///    waits until the family has no work at its limits service, then reads the children's state from it);
/// 3. `import` at D, once per epoch: D stores all of it in one commit, with the children's limits state queued
///    for its limits service, and serves the family;
/// 4. `release` at S: S deletes the family in one commit and answers `moved`, naming D, from then on.
///
/// Every broker first takes the new list (`list`), and each broker of the old list `settle`s once it holds no family
/// of another broker any more; until then it stays the authority for the families it served.
public struct Rebalancer: Sendable {
    public struct Options: Sendable {
        /// How long one broker may take to answer one request, retries included (a broker restarting).
        public var requestTimeout: Duration = .seconds(60)
        /// Test-only: stop before this step of the first family moved (`hold`, `export`, `import`, `release`) or
        /// before settling (`settle`), and wait there until killed.
        public var pauseBefore: String?
        public init() {}
    }

    /// One family moved.
    public struct Move: Sendable, Hashable {
        public var family: String
        public var from: String
        public var to: String
        /// Question rows carried (open ones, and closed ones within the retention).
        public var questions: Int
        /// Of them, the open ones: the flows that crossed the move.
        public var openQuestions: Int
        /// Undelivered copies carried.
        public var messages: Int
        /// Children whose limits state (the limits worker's row) was carried.
        public var limitsStates: Int = 0
        /// From the hold to the release.
        public var took: Duration
    }

    /// A broker that did not answer, or refused a step.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    public let from: BrokerList
    public let to: BrokerList
    public let epoch: Int64
    /// Every broker's admin endpoint, by name.
    public let admin: [String: String]
    public let options: Options

    /// - Throws: ``Failure`` when a broker of either list has no admin endpoint.
    public init(from: BrokerList, to: BrokerList, epoch: Int64, admin: [String: String], options: Options = Options())
        throws(Failure)
    {
        for entry in from.entries + to.entries where admin[entry.name] == nil {
            throw Failure(description: "broker \(entry.name) has no admin endpoint: add \(entry.name)=URL to --admin")
        }
        self.from = from
        self.to = to
        self.epoch = epoch
        self.admin = admin
        self.options = options
    }

    /// The brokers of both lists, each once, in list order.
    var everyBroker: [BrokerEntry] {
        var seen: Set<String> = []
        return (from.entries + to.entries).filter { seen.insert($0.name).inserted }
    }

    /// Runs the whole change; `progress` gets a line per step worth telling.
    /// - Returns: the families moved by this run.
    public func run(progress: (String) -> Void) throws(Failure) -> [Move] {
        let context: ZMQContext
        do { context = try ZMQContext() } catch { throw Failure(description: "\(error)") }
        defer { context.shutdown() }
        let client = AdminClient(context: context, endpoints: admin, timeout: options.requestTimeout)
        for broker in everyBroker {
            try client.ok(
                broker.name,
                AdminRequest(op: "list", epoch: epoch, list: to.description, previous: from.description)
            )
        }
        progress("list epoch=\(epoch) brokers=\(everyBroker.count)")
        var moves: [Move] = []
        for source in from.entries {
            while true {
                let families = try client.ok(source.name, AdminRequest(op: "families")).families ?? []
                for family in families {
                    let destination = to.shard(family: family)
                    let move = try self.move(family, from: source, to: destination, client: client, progress: progress)
                    if let move {
                        moves.append(move)
                        progress(
                            "moved family=\(family) from=\(source.name) to=\(destination.name) questions=\(move.questions) open=\(move.openQuestions) messages=\(move.messages) limits=\(move.limitsStates) ms=\(move.took.milliseconds)"
                        )
                    }
                }
                pause(before: "settle", family: nil, progress: progress)
                let settled = try client.request(source.name, AdminRequest(op: "settle", source: source.name))
                if settled.ok { break }
                guard settled.retry == true else {
                    throw Failure(
                        description: "broker \(source.name) refused to settle: \(settled.error ?? "no reason")"
                    )
                }
            }
            for broker in everyBroker where broker.name != source.name {
                try client.ok(broker.name, AdminRequest(op: "settle", source: source.name))
            }
            progress("settled broker=\(source.name)")
        }
        return moves
    }

    /// Moves one family, resuming a move that a killed mover or broker left half done.
    /// - Returns: the move, or `nil` when the family had moved already.
    func move(
        _ family: String,
        from source: BrokerEntry,
        to destination: BrokerEntry,
        client: AdminClient,
        progress: (String) -> Void
    ) throws(Failure) -> Move? {
        let started = ContinuousClock.now
        pause(before: "hold", family: family, progress: progress)
        let held = try client.ok(
            source.name,
            AdminRequest(op: "hold", epoch: epoch, family: family, destination: destination.description)
        )
        if held.already == true { return nil }
        pause(before: "export", family: family, progress: progress)
        var exported = try client.request(source.name, AdminRequest(op: "export", epoch: epoch, family: family))
        // "retry" while the family's work at the limits service ends and its children's limits state comes back
        // (a round trip to the limits worker, about a millisecond): asked again soon, then less often. The family is
        // held meanwhile, so its SENDs wait.
        let deadline = ContinuousClock.now + options.requestTimeout
        var backoff = 0.002
        while !exported.ok, exported.retry == true, ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: backoff)
            backoff = min(backoff * 2, 0.05)
            exported = try client.request(source.name, AdminRequest(op: "export", epoch: epoch, family: family))
        }
        guard exported.ok, let state = exported.state else {
            throw Failure(
                description: "broker \(source.name) did not export family \(family): \(exported.error ?? "no state")"
            )
        }
        pause(before: "import", family: family, progress: progress)
        try client.ok(
            destination.name,
            AdminRequest(op: "import", epoch: epoch, family: family, source: source.description, state: state)
        )
        pause(before: "release", family: family, progress: progress)
        try client.ok(source.name, AdminRequest(op: "release", epoch: epoch, family: family))
        return Move(
            family: family,
            from: source.name,
            to: destination.name,
            questions: state.questions.count,
            openQuestions: state.questions.filter { QuestionState(rawValue: $0.state)?.isClosed == false }.count,
            messages: state.messages.count,
            limitsStates: state.limits?.count ?? 0,
            took: ContinuousClock.now - started
        )
    }

    func pause(before step: String, family: String?, progress: (String) -> Void) {
        guard options.pauseBefore == step else { return }
        progress("paused before \(step)" + (family.map { " family=\($0)" } ?? ""))
        while true { Thread.sleep(forTimeInterval: 3600) }
    }
}

/// REQ sockets to brokers' admin endpoints: one request at a time, resent on a fresh socket when a broker does not
/// answer (it may be restarting), until the timeout.
final class AdminClient {
    let context: ZMQContext
    let endpoints: [String: String]
    let timeout: Duration
    var sockets: [String: ZMQSocket] = [:]

    init(context: ZMQContext, endpoints: [String: String], timeout: Duration) {
        self.context = context
        self.endpoints = endpoints
        self.timeout = timeout
    }

    /// The reply, which must say `ok`.
    @discardableResult
    func ok(_ broker: String, _ request: AdminRequest) throws(Rebalancer.Failure) -> AdminReply {
        let reply = try self.request(broker, request)
        guard reply.ok else {
            throw Rebalancer.Failure(
                description:
                    "broker \(broker) refused \(request.op)\(request.family.map { " of family \($0)" } ?? ""): \(reply.error ?? "no reason")"
            )
        }
        return reply
    }

    func request(_ broker: String, _ request: AdminRequest) throws(Rebalancer.Failure) -> AdminReply {
        guard let endpoint = endpoints[broker] else {
            throw Rebalancer.Failure(description: "broker \(broker) has no admin endpoint")
        }
        let body: Data
        do { body = try JSONEncoder().encode(request) } catch {
            throw Rebalancer.Failure(description: "\(error)")
        }
        let deadline = ContinuousClock.now + timeout
        var wait = 1000
        repeat {
            do {
                let socket = try sockets[broker] ?? connect(endpoint)
                sockets[broker] = socket
                _ = try socket.send(Array(body))
                if try socket.wait(timeoutMilliseconds: wait), let (frame, _) = try socket.receive(.dontWait) {
                    return try JSONDecoder().decode(AdminReply.self, from: Data(frame))
                }
            } catch let error as DecodingError {
                throw Rebalancer.Failure(description: "broker \(broker) gave an unreadable reply: \(error)")
            } catch {}
            // No answer: a REQ socket cannot send again before it got one, so the next try takes a fresh socket.
            sockets[broker] = nil
            wait = min(wait * 2, 5000)
        } while ContinuousClock.now < deadline
        throw Rebalancer.Failure(
            description: "broker \(broker) (admin endpoint \(endpoint)) did not answer \(request.op) within \(timeout)"
        )
    }

    func connect(_ endpoint: String) throws -> ZMQSocket {
        let socket = try context.socket(.req)
        try socket.set(.linger, 0)
        try socket.connect(endpoint)
        return socket
    }
}
