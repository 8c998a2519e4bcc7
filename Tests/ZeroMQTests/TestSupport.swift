import AskTestKit
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// Makes a socket that never blocks teardown (linger 0) and never blocks a test forever (timeouts).
func makeSocket(_ context: ZMQContext, _ type: SocketType, receiveTimeout: Int32 = 5_000) throws -> ZMQSocket {
    let socket = try context.socket(type)
    try socket.set(.linger, 0)
    try socket.set(.receiveTimeout, receiveTimeout)
    try socket.set(.sendTimeout, 5_000)
    return socket
}

/// The transports a round trip is exercised over.
enum Transport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inproc, ipc, tcp

    var testDescription: String { rawValue }

    /// An endpoint to bind: unique inproc names, ipc paths under `directory`, OS-chosen tcp ports.
    func bindEndpoint(in directory: TempDirectory) -> String {
        switch self {
        case .inproc: "inproc://test-\(UUID().uuidString)"
        case .ipc: "ipc://\(directory.path)/socket-\(UUID().uuidString.prefix(8))"
        case .tcp: "tcp://127.0.0.1:*"
        }
    }
}

/// A value handed from a helper thread to the test, with a semaphore to wait on it with a deadline.
final class ThreadResult<Value: Sendable>: Sendable {
    private let value = Mutex<Value?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ result: Value) {
        value.withLock { $0 = result }
        done.signal()
    }

    /// Waits for ``finish(_:)`` up to `seconds`; `nil` when the thread did not finish in time.
    func wait(seconds: Double) -> Value? {
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return value.withLock { $0 }
    }
}

/// A Sendable signal for "the helper thread reached this point".
final class Signal: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    func fire() { semaphore.signal() }
    func wait(seconds: Double) -> Bool { semaphore.wait(timeout: .now() + seconds) == .success }
}

func bytes(_ string: String) -> [UInt8] { Array(string.utf8) }

/// A deterministic payload (no 1 MiB dumps in failure messages: compare with `==` into a Bool first).
func payload(count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ ($0 >> 8)) }
}
