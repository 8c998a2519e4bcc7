import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A file that JSON lines are appended to by one process (a reached log, a trace file): opened with `O_APPEND`, so
/// the lines of several processes writing the same file (a restarted broker and its successor) never interleave,
/// and each ``append(_:)`` is one `write(2)`, kept when the process is killed right after it. Nothing is synced; a
/// full disk loses lines, never the process.
public final class LineFile: Sendable {
    public let path: String
    private let descriptor: Int32

    /// Opens (creating it, mode 0600) the file at `path` for appending; its folder must exist.
    /// - Parameters:
    ///   - what: what the file is, for the error (`the reached log`).
    ///   - flag: the option that named the file, for the error (`--reached-log`).
    /// - Throws: ``LineFileError`` naming the file, the system's reason and what to do.
    public init(path: String, what: String, flag: String) throws {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw LineFileError(
                "cannot open \(what) '\(path)' (\(String(cString: strerror(errno)))): give \(flag) a file in a folder that "
                    + "exists and that you can write to"
            )
        }
        self.path = path
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Writes `bytes` (whole lines) with one `write(2)` (more only if the system writes part of them).
    public func append(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}

/// Why a line file could not be opened.
public struct LineFileError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
