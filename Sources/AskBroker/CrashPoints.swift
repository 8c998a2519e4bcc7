import AskProtocol
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Test-only crash hooks (`askrelay-broker --crash-at POINT[:N]`, docs/broker.md): fault tests kill the real broker
/// at an exact place of its loop instead of at a random moment. Unarmed (the default) every hook is one compare.
///
/// Only debug (testing) builds can arm them: in a release build (``isAvailable`` is `false`) nothing parses, the
/// hooks compile to nothing, and `askrelay-broker` has no `--crash-at` flag.
///
/// The broker crashes with SIGKILL (as `kill -9` would) at the N-th occurrence of the point. Before that it leaves
/// `crash-at.fired` in its data directory; a broker started on a data directory holding that file ignores the flag,
/// so a supervisor can restart it with the same arguments.
public struct CrashPoints: Sendable, Equatable {
    public enum Point: String, CaseIterable, Sendable {
        /// After a SEND was handled (state changed, journal written), before the turn's commit.
        case accept
        /// After a commit that holds accepted SENDs, before their ACKs and deliveries go out.
        case commit
        /// After the first `question` delivery of a send to a family with several guardians, before the others.
        case fanout
        /// After the commit that holds an accepted answer, before the response, `closed` and ACK go out.
        case answer
        /// While expiring a sent question: after its state changed in the open transaction, before the commit.
        case expiry
    }

    public static let markerFile = "crash-at.fired"

    public private(set) var point: Point?
    public private(set) var occurrence = 1
    var seen = 0
    var answerInTurn = false
    var questionsDelivered: Set<MessageID> = []
    /// Where the marker goes (the data directory); set by the broker.
    var markerDirectory: String?

    /// Unarmed.
    public init() {}

    /// Whether this build has crash hooks (debug builds, which the tests run; never a release build).
    #if DEBUG
        public static let isAvailable = true
    #else
        public static let isAvailable = false
    #endif

    /// Parses `POINT` or `POINT:N` (N ≥ 1). - Returns: `nil` for anything else, and always in a release build.
    public init?(parsing text: String) {
        guard Self.isAvailable else { return nil }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count <= 2, let point = Point(rawValue: String(parts[0])) else { return nil }
        self.point = point
        if parts.count == 2 {
            guard let n = Int(parts[1]), n >= 1 else { return nil }
            occurrence = n
        }
    }

    public var isArmed: Bool { point != nil }

    /// Disarms the hooks if an earlier run on `directory` already crashed; otherwise remembers it for the marker.
    mutating func arm(dataDirectory directory: String) {
        let marker = (directory as NSString).appendingPathComponent(Self.markerFile)
        if FileManager.default.fileExists(atPath: marker) { point = nil }
        markerDirectory = directory
    }

    /// Counts one occurrence of `reached`; crashes on the N-th (debug builds; a release build cannot be armed).
    mutating func hit(_ reached: Point) {
        guard reached == point else { return }
        #if DEBUG
            seen += 1
            guard seen == occurrence else { return }
            if let markerDirectory {
                try? FileManager.default.createDirectory(atPath: markerDirectory, withIntermediateDirectories: true)
                _ = FileManager.default.createFile(
                    atPath: (markerDirectory as NSString).appendingPathComponent(Self.markerFile),
                    contents: Data(reached.rawValue.utf8)
                )
            }
            FileHandle.standardError.write(
                Data("askrelay-broker: --crash-at \(reached.rawValue):\(occurrence) reached; SIGKILL\n".utf8)
            )
            kill(getpid(), SIGKILL)
            _exit(137)
        #endif
    }

    /// An answer was accepted in this turn (counted after the turn's commit).
    mutating func answerAccepted() {
        if point == .answer { answerInTurn = true }
    }

    /// The turn committed; `acks` tells whether ACKs of accepted SENDs are about to go out.
    mutating func committed(acks: Bool) {
        guard point != nil else { return }
        if acks { hit(.commit) }
        if answerInTurn {
            answerInTurn = false
            hit(.answer)
        }
    }

    /// A `question` went out; the first delivery of each question counts.
    mutating func delivered(kind: String, subject: MessageID?) {
        guard point == .fanout, kind == MessageKind.question.rawValue, let subject else { return }
        if questionsDelivered.insert(subject).inserted { hit(.fanout) }
    }
}
