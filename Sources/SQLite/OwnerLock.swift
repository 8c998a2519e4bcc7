#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif
import Foundation

/// Why a folder or file could not be claimed: it is held by another live process, or the folder is unusable.
public struct OwnerLockError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// Another process holds the lock (`holder` is its pid when it could be read).
        case held
        /// The folder could not be created, is not a folder, or the lock file could not be opened.
        case unusable
    }

    public let code: Code
    /// The folder or endpoint path that was to be claimed.
    public let path: String
    /// The pid written in the lock file by its holder, when known.
    public let holder: Int32?
    public let message: String

    public var description: String { message }
}

/// An exclusive claim, for the life of the process, on a folder (a broker's journal, a limits store, an
/// `AskCenter`'s state) or on an ipc socket path: `flock` on a lock file, taken without waiting.
///
/// The kernel drops the claim when the owner exits, however it exits (kill -9 included), so a stale lock file is
/// simply taken over. The descriptor is close-on-exec: processes the owner spawns do not inherit the claim.
/// Two claims in one process on the same file also exclude each other (flock works per open file).
public final class OwnerLock: Sendable {
    /// The lock file.
    public let lockFile: String
    private let descriptor: Int32

    /// Claims `folder` (created with its parents if missing) by locking `folder/<name>`.
    /// - Parameters:
    ///   - folder: the folder to own.
    ///   - name: the lock file's name in it, for example `broker.lock`.
    ///   - what: what the folder is, for messages: `"journal folder (--data-dir)"`.
    /// - Throws: ``OwnerLockError`` naming the folder, and the pid of the process that holds it.
    public static func claim(folder: String, name: String, what: String) throws(OwnerLockError) -> OwnerLock {
        try prepareFolder(folder, what: what)
        let lockFile = (folder.hasSuffix("/") ? folder : folder + "/") + name
        return try OwnerLock(lockFile: lockFile, path: folder, what: what)
    }

    /// Creates `folder` (and its parents) if it does not exist.
    /// - Throws: ``OwnerLockError/Code/unusable`` with one readable sentence: what the path is, what is wrong,
    ///   what to do.
    public static func prepareFolder(_ folder: String, what: String, permissions: Int = 0o700) throws(OwnerLockError) {
        func unusable(_ text: String) -> OwnerLockError {
            OwnerLockError(code: .unusable, path: folder, holder: nil, message: "\(what) \(folder): \(text)")
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw unusable("is a file, not a folder; give a folder (it is created if missing)")
            }
            guard access(folder, W_OK | X_OK) == 0 else {
                throw unusable("is not writable by this user; give a folder you can write")
            }
            return
        }
        // Walk up to the nearest existing ancestor, so the message names the part that is wrong.
        var ancestor = parentFolder(of: folder)
        while !FileManager.default.fileExists(atPath: ancestor, isDirectory: &isDirectory) {
            let up = parentFolder(of: ancestor)
            if up == ancestor { break }
            ancestor = up
        }
        if FileManager.default.fileExists(atPath: ancestor, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw unusable("cannot be created: \(ancestor) is a file, not a folder")
            }
            guard access(ancestor, W_OK | X_OK) == 0 else {
                throw unusable("cannot be created: \(ancestor) is not writable by this user")
            }
        }
        do {
            try FileManager.default.createDirectory(
                atPath: folder,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: permissions]
            )
        } catch {
            let reason = String(cString: strerror(errno))
            throw unusable("cannot be created (\(reason)); check the path and its permissions")
        }
    }

    /// The folder holding `path`: `.` for a bare name, `/` for the root (string work only: no file system access).
    public static func parentFolder(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    /// Claims an ipc socket path by locking `<socketPath>.lock` beside it (libzmq would silently unlink and take
    /// over a socket file that a live process serves).
    /// - Throws: ``OwnerLockError`` naming the socket path and the pid that serves it.
    public static func claim(socketPath: String, what: String) throws(OwnerLockError) -> OwnerLock {
        try OwnerLock(lockFile: socketPath + ".lock", path: socketPath, what: what)
    }

    private init(lockFile: String, path: String, what: String) throws(OwnerLockError) {
        self.lockFile = lockFile
        let fd = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let reason = String(cString: strerror(errno))
            throw OwnerLockError(
                code: .unusable,
                path: path,
                holder: nil,
                message: "\(what) \(path): cannot open the lock file \(lockFile) (\(reason)); check its permissions"
            )
        }
        var result: Int32
        repeat { result = flock(fd, LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
        guard result == 0 else {
            let failure = errno
            let holder = Self.readPID(fd)
            close(fd)
            guard failure == EWOULDBLOCK else {
                throw OwnerLockError(
                    code: .unusable,
                    path: path,
                    holder: nil,
                    message: "\(what) \(path): cannot lock \(lockFile) (\(String(cString: strerror(failure))))"
                )
            }
            let who = holder.map { "process \($0)" } ?? "another process"
            throw OwnerLockError(
                code: .held,
                path: path,
                holder: holder,
                message: "\(what) \(path) is in use by \(who) (it holds \(lockFile)); "
                    + "stop that process or give another path"
            )
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        descriptor = fd
    }

    deinit {
        // Emptying the file first keeps a reader from naming a pid that no longer holds it.
        _ = ftruncate(descriptor, 0)
        close(descriptor)
    }

    /// The pid the holder wrote, if the file holds one.
    private static func readPID(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text).flatMap { $0 > 0 ? $0 : nil }
    }
}
