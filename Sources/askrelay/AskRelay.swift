import AskCLI
import Foundation

/// The front command: `askrelay <subcommand>`.
@main
struct AskRelay: CommandGroup {
    static let name = "askrelay"
    static let abstract = "simulate, load-test and inspect AskRelay's ask-a-parent flow"
    static let subcommands: [any Command.Type] = [
        Simulate.self, CheckCommand.self, TestCommand.self, ShrinkCommand.self, TraceCommand.self, LoadCommand.self,
        TopCommand.self,
        RebalanceCommand.self,
        KeysCommand.self,
        ExportTracesCommand.self,
        Bench.self,
        ProxyCommand.self,
    ]

    static func main() async {
        let code = await CommandRunner.run(AskRelay.self)
        exit(code)
    }
}

/// `askrelay bench ...`: micro-benchmarks that compare our code with a baseline in the same run.
struct Bench: CommandGroup {
    static let name = "bench"
    static let abstract = "micro-benchmarks measured side by side with a baseline"
    static let subcommands: [any Command.Type] = [
        WrapperBench.self, CodecBench.self, FramesBench.self, LinkBench.self,
    ]
}
