import Foundation

/// A value that is set once and that any number of threads wait for, each with an optional timeout: a thread that
/// started or finished, a result handed from one thread to another. AskRelay's one one-shot waiter.
public final class OneShot<Value: Sendable>: @unchecked Sendable {  // @unchecked: `value` is guarded by `condition`.
    private let condition = NSCondition()
    private var value: Value?

    public init() {}

    /// Sets the value and wakes every waiter. - Returns: `false` (and changes nothing) if it was already set.
    @discardableResult
    public func fulfill(_ value: Value) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard self.value == nil else { return false }
        self.value = value
        condition.broadcast()
        return true
    }

    /// The value, if it is set, without waiting.
    public var current: Value? {
        condition.lock()
        defer { condition.unlock() }
        return value
    }

    /// Waits for the value (without a `timeout`, as long as it takes). - Returns: `nil` if `timeout` passed first.
    public func wait(timeout: Duration? = nil) -> Value? {
        let deadline = timeout.map { ContinuousClock.now + $0 }
        condition.lock()
        defer { condition.unlock() }
        while value == nil {
            guard let deadline else {
                condition.wait()
                continue
            }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            _ = condition.wait(until: Date(timeIntervalSinceNow: left.seconds))
        }
        return value
    }
}

extension OneShot where Value == Void {
    /// Marks the event as happened. - Returns: `false` if it already had.
    @discardableResult
    public func fulfill() -> Bool { fulfill(()) }
}
