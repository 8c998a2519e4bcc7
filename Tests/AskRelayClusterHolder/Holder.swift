import AskCLI
import AskRelayCluster
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `askrelay-cluster-holder BIN_DIR`: starts a cluster, prints `ready broker=<pid> limits=<pid> folder=<path>` and
/// waits to be killed. AskRelayClusterTests kill -9 it to show that a cluster's processes die with the process
/// that started them.
///
/// `askrelay-cluster-holder BIN_DIR --measure N`: starts and stops N clusters one after the other and prints the
/// start-up time (broker and limits ready, admin session up) as `startup-ms median=... min=... max=... n=N`.
@main
struct Holder {
    static func main() throws {
        var options = AskRelayCluster.Options()
        options.binDirectory = CommandLine.arguments.dropFirst().first
        if CommandLine.arguments.count == 4, CommandLine.arguments[2] == "--measure",
            let count = Int(CommandLine.arguments[3]), count > 0
        {
            try measure(options, count: count)
            return
        }
        // Quiet processes: one that logs after this holder died would die of SIGPIPE on its stderr pipe anyway,
        // which would hide whether the process group did its work.
        options.logLevel = "critical"
        let cluster = try AskRelayCluster(options)
        let ready = ReadyLine([
            "broker": "\(cluster.broker.pid ?? 0)", "limits": "\(cluster.limits.pid ?? 0)", "folder": cluster.folder,
        ])
        printLine(ready.text)
        // The cluster stops when it is released: keep it for good.
        withExtendedLifetime(cluster) { while true { pause() } }
    }

    static func measure(_ options: AskRelayCluster.Options, count: Int) throws {
        var milliseconds: [Double] = []
        for _ in 0..<count {
            let start = ContinuousClock.now
            let cluster = try AskRelayCluster(options)
            let elapsed = start.duration(to: .now)
            milliseconds.append(elapsed / .milliseconds(1))
            cluster.stop()
        }
        let sorted = milliseconds.sorted()
        let median =
            sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
        func text(_ value: Double) -> String { String(format: "%.0f", value) }
        printLine(
            "startup-ms median=\(text(median)) min=\(text(sorted[0])) max=\(text(sorted[sorted.count - 1])) n=\(count)"
        )
    }
}
