import Foundation
import Synchronization

/// A temporary folder of its own (mode 0700) under the system's temporary folder (`TMPDIR`, else `/tmp`), named
/// `<prefix>-<6 random letters and digits>` (mkdtemp), removed with its contents by ``remove()``: the one way
/// Sources make one (a cluster's folder, a simulation's ipc sockets; an ipc path must stay under about 100 bytes, so
/// keep the prefix short).
public final class ScratchFolder: Sendable {
    /// The folder's path.
    public let path: String
    private let removed = Mutex(false)

    /// Makes the folder. - Throws: ``RelayProcessError`` naming the path when it cannot be made.
    public init(prefix: String) throws {
        // mkdtemp: a new folder (mode 0700) whose name no other folder had, made atomically.
        let base = FileManager.default.temporaryDirectory.path
        var template = Array((base + "/\(prefix)-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            let reason = String(cString: strerror(errno))
            throw RelayProcessError("cannot create a folder \(prefix)-... in \(base): \(reason)")
        }
        path = String(cString: made)
    }

    /// Removes the folder and everything in it, once. - Returns: `true` the first time.
    @discardableResult
    public func remove() -> Bool {
        let first = removed.withLock { done in
            defer { done = true }
            return !done
        }
        if first { try? FileManager.default.removeItem(atPath: path) }
        return first
    }
}
