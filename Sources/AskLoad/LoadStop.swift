import Foundation
import Synchronization

/// A request to end a load run early (SIGINT or SIGTERM): the generators stop starting work, the measured window
/// ends where it is, and the run reports what it measured until then (marked interrupted).
public final class LoadStop: Sendable {
    private let signalNumber = Atomic<Int32>(0)
    private let time = Atomic<UInt64>(.max)

    public init() {}

    /// Asks the run to stop. - Returns: whether this was the first request (a later one changes nothing).
    @discardableResult
    public func request(signal: Int32) -> Bool {
        guard signalNumber.compareExchange(expected: 0, desired: signal, ordering: .acquiringAndReleasing).exchanged
        else { return false }
        time.store(monotonicNanoseconds(), ordering: .releasing)
        return true
    }

    /// The signal that asked for the stop, if one did.
    public var signal: Int32? {
        let number = signalNumber.load(ordering: .acquiring)
        return number == 0 ? nil : number
    }

    /// `SIGINT`, `SIGTERM`, or nil.
    public var signalName: String? {
        signal.map { $0 == SIGINT ? "SIGINT" : $0 == SIGTERM ? "SIGTERM" : "signal \($0)" }
    }

    /// When the stop was asked for (monotonic nanoseconds); `UInt64.max` while it was not.
    var requestedAt: UInt64 { time.load(ordering: .acquiring) }

    var isRequested: Bool { requestedAt != .max }
}
