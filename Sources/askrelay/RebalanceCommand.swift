import AskCLI
import AskBroker
import AskProtocol
import AskRelayProcesses
import Foundation

/// `askrelay rebalance`: changes the broker list of running brokers and moves each family whose broker changes,
/// with its state (docs/scaling.md, "Rebalancing").
struct RebalanceCommand: Command {
    static let name = "rebalance"
    static let abstract = "change the broker list of running brokers and move the families whose broker changes"
    static let discussion = """
        Gives every broker of --from and --to the new list (epoch --epoch), then moves each family that --to gives
        to another broker, with its open questions, roster, undelivered messages and its children's limits state,
        one family at a time, each step journaled by the brokers. Families that do not move are never touched.
        Every broker needs an admin endpoint (askrelay-broker --admin-endpoint), and a broker that moves a family
        with children away needs its limits worker running (it reads their limits state from it). Killed or failed at any point, run the same command again: it
        resumes where the brokers' journals say the moves are. Prints a line per family moved, then one 'rebalanced'
        line. Workers of a moved family are told 'moved' with the new broker. Exits 69 when a broker does not
        answer within --timeout. See docs/scaling.md.
        """
    static let options: [OptionSpec] =
        [
            .value(
                "from",
                "LIST",
                env: "ASKRELAY_REBALANCE_FROM",
                help: "the list the brokers serve now, NAME=URL,..."
            ),
            .value("to", "LIST", env: "ASKRELAY_REBALANCE_TO", help: "the new list, NAME=URL,..."),
            .value(
                "admin",
                "LIST",
                env: "ASKRELAY_REBALANCE_ADMIN",
                help: "every broker's --admin-endpoint, NAME=URL,... (each broker of --from and --to)"
            ),
            .value(
                "epoch",
                "N",
                env: "ASKRELAY_REBALANCE_EPOCH",
                help: "the new list's number, higher than any list the brokers had (1...2^53)"
            ),
            .value(
                "timeout",
                "DURATION",
                env: "ASKRELAY_REBALANCE_TIMEOUT",
                default: "60s",
                help: "how long a broker may take to answer one step, a restart included"
            ),
        ] + testingOptions

    #if DEBUG
        static let testingOptions: [OptionSpec] = [
            .value(
                "pause-before",
                "STEP",
                env: nil,
                help: "testing builds only: stop before hold, export, import or release of the first family, or settle"
            )
        ]
    #else
        static let testingOptions: [OptionSpec] = []
    #endif

    let rebalancer: Rebalancer

    init(arguments: Arguments) throws {
        func list(_ name: String) throws -> BrokerList {
            let text = try arguments.require(name)
            do {
                return try BrokerList(parsing: text) { EndpointSyntax.problem($0, binding: false) }
            } catch { throw UsageError("\(arguments.origin(name)): \(error)") }
        }
        let from = try list("from")
        let to = try list("to")
        let admin = try list("admin")
        guard let epoch = try arguments.int("epoch", in: 1...(1 << 53)) else {
            _ = try arguments.require("epoch")
            throw UsageError("--epoch is required")
        }
        var options = Rebalancer.Options()
        options.requestTimeout =
            try arguments.duration("timeout", in: .milliseconds(100)...ValueBounds.maximumDuration) ?? .seconds(60)
        #if DEBUG
            if let step = arguments.string("pause-before") {
                guard ["hold", "export", "import", "release", "settle"].contains(step) else {
                    throw UsageError("--pause-before must be hold, export, import, release or settle, not '\(step)'")
                }
                options.pauseBefore = step
            }
        #endif
        guard from != to else { throw UsageError("--from and --to are the same list: nothing would move") }
        do {
            rebalancer = try Rebalancer(
                from: from,
                to: to,
                epoch: Int64(epoch),
                admin: Dictionary(uniqueKeysWithValues: admin.entries.map { ($0.name, $0.endpoint) }),
                options: options
            )
        } catch { throw UsageError("--admin: \(error)") }
    }

    func run() async throws -> Int32 {
        let rebalancer = self.rebalancer
        return await onDedicatedThread(name: "rebalance") {
            let started = ContinuousClock.now
            do {
                let moves = try rebalancer.run { printLine($0) }
                printLine(
                    "rebalanced epoch=\(rebalancer.epoch) families=\(moves.count) questions=\(moves.reduce(0) { $0 + $1.questions }) messages=\(moves.reduce(0) { $0 + $1.messages }) ms=\((ContinuousClock.now - started).milliseconds)"
                )
                return ExitCode.success
            } catch {
                printError("askrelay rebalance: \(error); run the same command again to resume")
                return ExitCode.unavailable
            }
        }
    }
}
