import Foundation
import Synchronization

/// Random words from the system generator (the kernel's `getrandom`, through glibc), read 512 at a time into one
/// buffer: one system call per 256 message ids or question ids instead of one to three per id, with the same
/// randomness. Shared by the process's threads.
package final class RandomPool: Sendable {
    package static let shared = RandomPool()
    private static let words = 512
    private let state = Mutex<(words: [UInt64], next: Int)>(([UInt64](repeating: 0, count: words), words))

    /// Two random words.
    package func next() -> (UInt64, UInt64) {
        state.withLock { state in
            if state.next + 2 > Self.words {
                Self.fill(&state.words)
                state.next = 0
            }
            defer { state.next += 2 }
            return (state.words[state.next], state.words[state.next + 1])
        }
    }

    private static func fill(_ words: inout [UInt64]) {
        #if canImport(Glibc)
            // glibc's arc4random_buf reads the kernel's getrandom (one call for the whole buffer).
            words.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
        #else
            var generator = SystemRandomNumberGenerator()
            for index in words.indices { words[index] = generator.next() }
        #endif
    }
}

extension UUID {
    /// A random (version 4) UUID from ``RandomPool``, with the same randomness as `UUID()`, which on Linux opens,
    /// reads and closes `/dev/urandom` for every id: the default id of a new question.
    @usableFromInline
    static func pooledRandom() -> UUID {
        var words = RandomPool.shared.next()
        return withUnsafeMutableBytes(of: &words) { bytes in
            bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
            bytes[8] = (bytes[8] & 0x3F) | 0x80  // variant 10 (RFC 9562)
            return UUID(uuid: bytes.loadUnaligned(as: uuid_t.self))
        }
    }
}
