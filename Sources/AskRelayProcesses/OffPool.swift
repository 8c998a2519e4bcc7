import Foundation

/// Runs blocking work (libzmq calls, SQLite) on a dedicated thread so it never occupies the cooperative pool,
/// and resumes the caller with its result.
public func onDedicatedThread<T: Sendable>(
    name: String,
    _ work: @escaping @Sendable () throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }
}
