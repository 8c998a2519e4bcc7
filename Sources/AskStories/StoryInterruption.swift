import Synchronization

/// A request to end a run early (SIGINT or SIGTERM, from any thread): the story playing stops where it is and its
/// processes are stopped, the stories after it do not start, and the run still reports what it has.
public final class StoryInterruption: Sendable {
    private struct State {
        var signal: Int32?
        /// What the story playing does when interrupted, by token.
        var actions: [UInt64: @Sendable () -> Void] = [:]
        var next: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// The signal that interrupted the run, or `nil`.
    public var signal: Int32? { state.withLock { $0.signal } }

    /// Interrupts the run: records `signal` and runs what the story playing registered.
    /// - Returns: `false` when the run was interrupted already (a second Ctrl-C).
    @discardableResult
    public func interrupt(_ signal: Int32) -> Bool {
        let actions: [@Sendable () -> Void]? = state.withLock { state in
            guard state.signal == nil else { return nil }
            state.signal = signal
            defer { state.actions = [:] }
            return Array(state.actions.values)
        }
        for action in actions ?? [] { action() }
        return actions != nil
    }

    /// Runs `action` when the run is interrupted, at once when it is already. - Returns: the token for ``remove(_:)``.
    func onInterrupt(_ action: @escaping @Sendable () -> Void) -> UInt64? {
        let token: UInt64? = state.withLock { state in
            guard state.signal == nil else { return nil }
            state.next += 1
            state.actions[state.next] = action
            return state.next
        }
        if token == nil { action() }
        return token
    }

    func remove(_ token: UInt64?) {
        guard let token else { return }
        _ = state.withLock { $0.actions.removeValue(forKey: token) }
    }
}
