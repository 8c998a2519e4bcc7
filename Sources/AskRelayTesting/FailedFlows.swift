import AskClient
import Foundation
import Synchronization

/// What went wrong in a test under the `.askRelayCluster()` trait, gathered for the diagram the trait attaches when
/// the test fails (``AskRelayClusterTrait``): every issue recorded and an error thrown, each at its time, and each
/// failed ``FlowWatch`` expectation with its question and when it began waiting.
final class FailedFlows: Sendable {
    /// One failure: what it said, when, and the question it is about (a ``FlowWatch`` expectation's).
    struct Failure: Sendable, Equatable {
        var question: UUID?
        var began: Date
        var ended: Date
        var text: String
    }

    /// The failures of the running test, set by the trait around its body; `nil` outside the trait.
    @TaskLocal static var current: FailedFlows?

    /// The page's file name: attached under it, and written into the kept cluster folder.
    static let fileName = "failed-flows.html"
    /// How far before a failure about no question a flow's lines are looked for.
    static let lookBack: Int64 = 2_000_000
    /// At most this many flows are drawn for failures about no question.
    static let maxNearby = 3

    private let failures = Mutex<[Failure]>([])

    func add(_ failure: Failure) { failures.withLock { $0.append(failure) } }

    var all: [Failure] { failures.withLock { $0 } }

    static func microseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000_000).rounded(.down)) }

    /// The page of the test `test`'s failures (AskProtocol's `FlowDiagram.page`), `nil` when there are none. With
    /// failed ``FlowWatch`` expectations: the flow of each of their questions, each expectation a band from when
    /// it began waiting to when it failed. Otherwise (an `#expect` that failed, an error thrown): the flows with
    /// lines in the 2 s before the first failure (the last three), the failure a line at its time. `trace` is
    /// `nil` when the cluster's trace files could not be read.
    static func page(test: String, failures: [Failure], trace: TraceFolder?) -> String? {
        guard let first = failures.first else { return nil }
        let watched = failures.filter { $0.question != nil }
        let marks: [FlowDiagram.Mark]
        let questions: [(caption: String, question: String)]
        if !watched.isEmpty {
            marks = watched.map {
                FlowDiagram.Mark(from: microseconds($0.began), to: microseconds($0.ended), text: $0.text)
            }
            var seen: Set<UUID> = []
            questions = watched.compactMap(\.question).filter { seen.insert($0).inserted }.map {
                ("question \($0.uuidString.lowercased())", $0.uuidString)
            }
        } else {
            let at = microseconds(first.ended)
            marks = [FlowDiagram.Mark(from: at, to: at, text: first.text)]
            let nearby = trace?.questions(from: at - lookBack, to: at) ?? []
            questions = nearby.suffix(maxNearby).map { ("a flow near the failure (\($0.lowercased()))", $0) }
        }
        let shown = watched.isEmpty ? [first] : watched
        return FlowDiagram.page(
            heading: "\(test) failed",
            failure: shown.map(\.text).joined(separator: "\n"),
            note: "Drawn from the cluster's trace files (its trace/ folder, docs/tracing.md): a lane per process and "
                + "center, an arrow per hop; each band is a FlowWatch expectation from when it began waiting to when "
                + "it failed, a line the time of a failure about no question. Times are each process's own clock.",
            questions: questions,
            trace: trace,
            marks: marks
        )
    }
}
