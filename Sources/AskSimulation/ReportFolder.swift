import Foundation
import SQLite

#if canImport(Glibc)
    import Glibc
#endif

/// A report folder that no earlier run has written into, so a run never reads another run's records, journal or
/// limits store by accident, and that no other live run uses.
public enum ReportFolder {
    /// What a folder may hold for `clean` to empty it.
    public enum Contents: Sendable {
        /// A report folder of `askrelay simulate` or `askrelay load`.
        case run
        /// A `--shrink-dir` of `askrelay shrink`.
        case shrink
    }

    /// The lock file a live `askrelay simulate` holds in its report folder. `clean` never removes it: a run that
    /// unlinked it while another held it would let a third run lock a new file beside the live one.
    public static let lockName = "simulate.lock"

    /// Makes `path` ready for a run and claims it for this process until the returned claim is released: creates it
    /// (with its parents) if it does not exist, or checks that it is empty. The lock is taken before anything is
    /// removed, so `clean` (see ``prepare(_:clean:flag:contents:)``) never empties a folder a live run uses.
    /// - Throws: ``ReportFolderError`` naming the path, what is wrong (the pid of the run using it) and what to do.
    public static func claim(_ path: String, clean: Bool, flag: String = "--report-dir") throws -> ReportFolderClaim {
        let checked = try check(path, clean: clean, flag: flag, contents: .run)
        if !checked.exists { try create(path, flag: flag) }
        let lock = try lock(path, flag: flag)
        if clean { try empty(path, checked.entries) }
        return ReportFolderClaim(path: path, lock: lock, created: !checked.exists)
    }

    /// Makes `path` ready for a run without keeping a claim (`askrelay load`, a shrink folder): creates it (with its
    /// parents) if it does not exist, or checks that it is an empty folder. With `clean`, a non-empty folder is
    /// emptied first, provided it holds only what askrelay writes into such a folder (so a mistyped path never
    /// empties someone's home) and no live `askrelay simulate` holds it.
    /// - Parameters:
    ///   - flag: the option that named the folder, for the messages (`--report-dir`).
    ///   - contents: what `clean` may remove.
    /// - Throws: ``ReportFolderError`` naming the path, what is wrong and what to do.
    public static func prepare(
        _ path: String,
        clean: Bool,
        flag: String = "--report-dir",
        contents: Contents = .run
    ) throws {
        let checked = try check(path, clean: clean, flag: flag, contents: contents)
        guard checked.exists else { return try create(path, flag: flag) }
        guard clean, !checked.entries.isEmpty else { return }
        // Held while emptying, so a run cannot start in the folder half-way; released after.
        let lock = checked.hasLock ? try Self.lock(path, flag: flag) : nil
        try empty(path, checked.entries)
        withExtendedLifetime(lock) {}
    }

    /// Checks an existing folder (or that there is none): it is a writable folder, no live run holds it, and it is
    /// empty or `clean` may empty it. - Returns: whether it exists and what `clean` would remove.
    private static func check(
        _ path: String,
        clean: Bool,
        flag: String,
        contents: Contents
    ) throws -> (exists: Bool, entries: [String], hasLock: Bool) {
        let manager = FileManager.default
        var isFolder: ObjCBool = false
        guard manager.fileExists(atPath: path, isDirectory: &isFolder) else { return (false, [], false) }
        guard isFolder.boolValue else {
            throw ReportFolderError("'\(path)' is a file, not a folder: give \(flag) a new or empty folder")
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw ReportFolderError(
                "cannot write into the report folder '\(path)' (\(String(cString: strerror(errno)))): give \(flag) a folder you can write to"
            )
        }
        let all = ((try? manager.contentsOfDirectory(atPath: path)) ?? []).sorted()
        let hasLock = contents == .run && all.contains(lockName)
        // A live run's folder is refused whatever else holds, and --clean is no way out of it.
        if hasLock { _ = try lock(path, flag: flag) }
        let entries = all.filter { !(hasLock && $0 == lockName) }
        if entries.isEmpty { return (true, [], hasLock) }
        let shown = entries.prefix(4).joined(separator: ", ") + (entries.count > 4 ? ", ..." : "")
        guard clean else {
            throw ReportFolderError(
                "the report folder '\(path)' is not empty (it holds \(shown)), and a run must never mix its files with another run's (records, journal, store): give \(flag) a new or empty folder, or add --clean to empty this one first"
            )
        }
        let foreign = entries.filter { !isWritten($0, contents) }
        guard foreign.isEmpty else {
            let writer = contents == .shrink ? "askrelay shrink" : "askrelay"
            throw ReportFolderError(
                "--clean empties only a folder \(writer) wrote, and '\(path)' also holds \(foreign.prefix(4).joined(separator: ", ")): give \(flag) a new or empty folder"
            )
        }
        return (true, entries, hasLock)
    }

    /// Claims `path`'s lock file. - Throws: the pid of the live run that holds it, in words.
    private static func lock(_ path: String, flag: String) throws -> OwnerLock {
        do {
            return try OwnerLock.claim(folder: path, name: lockName, what: "the report folder (\(flag))")
        } catch let error where error.code == .held {
            let who = error.holder.map { "process \($0)" } ?? "another process"
            throw ReportFolderError(
                "the report folder '\(path)' is in use by \(who) (a live askrelay simulate holds \(path)/\(lockName)), and --clean never empties a folder in use: wait for that run to end or stop it, or give \(flag) another folder"
            )
        } catch {
            throw ReportFolderError(error.message)
        }
    }

    private static func empty(_ path: String, _ entries: [String]) throws {
        for entry in entries {
            do { try FileManager.default.removeItem(atPath: (path as NSString).appendingPathComponent(entry)) } catch {
                throw ReportFolderError("--clean could not remove '\(path)/\(entry)': \(reason(error))")
            }
        }
    }

    /// Creates `path` and its parents; the deepest ancestor that exists must be a folder we can write into.
    private static func create(_ path: String, flag: String) throws {
        let manager = FileManager.default
        var isFolder: ObjCBool = false
        var ancestor = parent(of: path)
        while !ancestor.isEmpty && !manager.fileExists(atPath: ancestor) {
            ancestor = parent(of: ancestor)
        }
        if ancestor.isEmpty { ancestor = "." }
        if manager.fileExists(atPath: ancestor, isDirectory: &isFolder), !isFolder.boolValue {
            throw ReportFolderError(
                "cannot create the report folder '\(path)': '\(ancestor)' is a file, not a folder: give \(flag) another path"
            )
        }
        guard access(ancestor, W_OK | X_OK) == 0 else {
            throw ReportFolderError(
                "cannot create the report folder '\(path)': '\(ancestor)' is not writable (\(String(cString: strerror(errno)))): give \(flag) a folder you can write to"
            )
        }
        // mkdir(2) one level at a time, so a failure names the level and errno's own words.
        var built = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/") {
            built += (built.isEmpty || built.hasSuffix("/") ? "" : "/") + component
            if manager.fileExists(atPath: built) { continue }
            if mkdir(built, 0o755) != 0 && errno != EEXIST {
                let why = String(cString: strerror(errno))
                throw ReportFolderError(
                    "cannot create the report folder '\(path)': creating '\(built)' failed (\(why)): give \(flag) another path"
                )
            }
        }
    }

    /// The folder `path` is in: what comes before its last `/` (trailing ones ignored), `/` for a top-level path,
    /// `""` for a bare name. Foundation's `deletingLastPathComponent` crashed on a one-character name
    /// (`--report-dir r`), so the report folder's ancestors are found here.
    static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        let head = trimmed[..<slash]
        return head.isEmpty ? "/" : String(head)
    }

    static func isWritten(_ name: String, _ contents: Contents) -> Bool {
        switch contents {
        case .run: isWrittenByAskRelay(name)
        case .shrink: isWrittenByShrink(name)
        }
    }

    /// What `askrelay simulate` (one broker or sharded) and `askrelay load` put into a report folder.
    static func isWrittenByAskRelay(_ name: String) -> Bool {
        let fixed: Set<String> = [
            "logs", "records", "reached", "trace", "broker-data", "limits-data", "keys", "limits-state.json",
            "scenario.json", "report.json", "report.html", "load.json", "load.html", lockName, "shrink",
            RunFacts.fileName, TraceMerge.fileName,
        ]
        if fixed.contains(name) { return true }
        if name.hasPrefix("child-") && name.hasSuffix("-state") { return true }
        if name.hasPrefix("roster-parent-") && name.hasSuffix(".json") { return true }
        // A sharded run's journals and stores: broker-data-b0, limits-data-b1, ...
        for prefix in ["broker-data-b", "limits-data-b"] where name.hasPrefix(prefix) {
            let number = name.dropFirst(prefix.count)
            if !number.isEmpty && number.allSatisfy(\.isASCII) && number.allSatisfy(\.isNumber) { return true }
        }
        return false
    }

    /// What `askrelay shrink` puts into its folder: `replay-NN` folders, `minimal-scenario.json`, `shrink.json`.
    static func isWrittenByShrink(_ name: String) -> Bool {
        if name == "minimal-scenario.json" || name == "shrink.json" { return true }
        let number = name.dropFirst("replay-".count)
        return name.hasPrefix("replay-") && !number.isEmpty && number.allSatisfy { $0.isASCII && $0.isNumber }
    }

    /// The POSIX reason inside a Foundation file error, instead of `NSCocoaErrorDomain Code=512 "(null)"`.
    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain
        {
            return String(cString: strerror(Int32(underlying.code)))
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(nsError.code))) }
        return nsError.localizedDescription
    }
}

/// A report folder this process holds (``ReportFolder/claim(_:clean:flag:)``) until the claim is released.
public final class ReportFolderClaim: Sendable {
    public let path: String
    /// Whether the claim created the folder (so a run interrupted while setting up removes it whole).
    public let created: Bool
    private let lock: OwnerLock

    init(path: String, lock: OwnerLock, created: Bool) {
        self.path = path
        self.lock = lock
        self.created = created
    }

    /// Removes what a run wrote into the folder: the folder itself if the claim created it, else everything in it
    /// but the lock file. - Returns: what it did, in words (`removed R`, `emptied R`).
    func removeContents() -> String {
        let manager = FileManager.default
        if created {
            try? manager.removeItem(atPath: path)
            return "removed \(path)"
        }
        for entry in (try? manager.contentsOfDirectory(atPath: path)) ?? [] where entry != ReportFolder.lockName {
            try? manager.removeItem(atPath: (path as NSString).appendingPathComponent(entry))
        }
        return "emptied \(path)"
    }
}

/// A report folder that cannot be used, in words: the path, what is wrong and what to do.
public struct ReportFolderError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
