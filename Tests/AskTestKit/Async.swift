import AskBasics
import AskRelayProcesses
import Foundation
import Synchronization

/// Runs blocking work (a raw peer waiting on its socket, a thread joined) on a thread of its own, off the cooperative
/// pool, and resumes the caller with its result.
public func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await onDedicatedThread(name: "askrelay-test", work)
}

/// Everything that came, in order: appended from any thread, or read from an `AsyncStream` in the background. Tests
/// wait for a count or for a match, each with a deadline (`wait` and `first` from async code, ``expect`` from a
/// blocking test). A thin wrapper over AskRelayProcesses' `EventBoard`, the one collect-and-wait mechanism: a wait
/// ends at the append that satisfies it (or at once, when what came already does), or at its deadline; nothing
/// polls.
public final class Collected<Element: Sendable>: Sendable {
    private let board = EventBoard<Element>()
    private let reader = Mutex<Task<Void, Never>?>(nil)

    public init() {}

    /// Reads `stream` into the list until it ends or this goes.
    public convenience init(_ stream: AsyncStream<Element>) {
        self.init(stream) { $0 }
    }

    /// Reads into the list the elements of `stream` that `transform` maps to a value.
    public init<Source: Sendable>(
        _ stream: AsyncStream<Source>,
        _ transform: @escaping @Sendable (Source) -> Element?
    ) {
        let task = Task { [weak self] in
            for await source in stream {
                guard let self else { return }
                if let item = transform(source) { self.append(item) }
            }
        }
        reader.withLock { $0 = task }
    }

    deinit { reader.withLock { $0?.cancel() } }

    /// Adds `item` and wakes the waits it satisfies.
    public func append(_ item: Element) { board.append(item) }

    /// What came so far.
    public var all: [Element] { board.events }

    /// Stops reading the stream.
    public func cancel() { reader.withLock { $0?.cancel() } }

    /// Waits until at least `count` elements came, at most `timeout`.
    /// - Returns: all that came, which is fewer than `count` when the deadline passed first.
    @discardableResult
    public func wait(for count: Int = 1, within timeout: Duration = .seconds(15)) async -> [Element] {
        _ = await board.wait(timeout: timeout) { $0.count >= count }
        return all
    }

    /// The first element after the first `skip` that satisfies `matches`, come before or within `timeout`; `nil`
    /// when none came by then.
    public func first(
        after skip: Int = 0,
        within timeout: Duration = .seconds(15),
        where matches: @escaping @Sendable (Element) -> Bool
    ) async -> Element? {
        _ = await board.wait(timeout: timeout) { $0.dropFirst(skip).contains(where: matches) }
        return all.dropFirst(skip).first(where: matches)
    }

    /// ``first(after:within:where:)`` for a blocking test (a worker on a thread of its own): blocks the calling
    /// thread until the append that brings a match, or the deadline.
    /// - Throws: ``TestFailure`` listing what came when nothing matched by the deadline.
    public func expect(
        after skip: Int = 0,
        within timeout: Duration = .seconds(5),
        where matches: @escaping @Sendable (Element) -> Bool
    ) throws -> Element {
        _ = board.waitBlocking(timeout: timeout) { $0.dropFirst(skip).contains(where: matches) }
        guard let match = all.dropFirst(skip).first(where: matches) else {
            throw TestFailure("no matching element within \(timeout); got \(all)")
        }
        return match
    }
}
