import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A report folder that no earlier run has written into, so a run never reads another run's records, journal or
/// limits store by accident.
public enum ReportFolder {
    /// Makes `path` ready for a run: creates it (with its parents) if it does not exist, or checks that it is an
    /// empty folder. With `clean`, a non-empty folder is emptied first, provided it holds only what askrelay writes
    /// into a report folder (so a mistyped path never empties someone's home).
    /// - Parameters:
    ///   - flag: the option that named the folder, for the messages (`--report-dir`).
    /// - Throws: ``ReportFolderError`` naming the path, what is wrong and what to do.
    public static func prepare(_ path: String, clean: Bool, flag: String = "--report-dir") throws {
        let manager = FileManager.default
        var isFolder: ObjCBool = false
        if manager.fileExists(atPath: path, isDirectory: &isFolder) {
            guard isFolder.boolValue else {
                throw ReportFolderError("'\(path)' is a file, not a folder: give \(flag) a new or empty folder")
            }
            guard access(path, W_OK | X_OK) == 0 else {
                throw ReportFolderError(
                    "cannot write into the report folder '\(path)' (\(String(cString: strerror(errno)))): give \(flag) a folder you can write to"
                )
            }
            let entries = ((try? manager.contentsOfDirectory(atPath: path)) ?? []).sorted()
            if entries.isEmpty { return }
            let shown = entries.prefix(4).joined(separator: ", ") + (entries.count > 4 ? ", ..." : "")
            guard clean else {
                throw ReportFolderError(
                    "the report folder '\(path)' is not empty (it holds \(shown)), and a run must never mix its files with another run's (records, journal, store): give \(flag) a new or empty folder, or add --clean to empty this one first"
                )
            }
            let foreign = entries.filter { !isWrittenByAskRelay($0) }
            guard foreign.isEmpty else {
                throw ReportFolderError(
                    "--clean empties only a folder askrelay wrote, and '\(path)' also holds \(foreign.prefix(4).joined(separator: ", ")): give \(flag) a new or empty folder"
                )
            }
            for entry in entries {
                do { try manager.removeItem(atPath: (path as NSString).appendingPathComponent(entry)) } catch {
                    throw ReportFolderError("--clean could not remove '\(path)/\(entry)': \(reason(error))")
                }
            }
            return
        }
        // It does not exist: the deepest ancestor that does must be a folder we can write into.
        var ancestor = (path as NSString).deletingLastPathComponent
        while !ancestor.isEmpty && !manager.fileExists(atPath: ancestor) {
            ancestor = (ancestor as NSString).deletingLastPathComponent
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

    /// What `askrelay simulate` and `askrelay load` put into a report folder.
    static func isWrittenByAskRelay(_ name: String) -> Bool {
        let fixed: Set<String> = [
            "logs", "records", "broker-data", "limits-data", "keys", "limits-state.json", "scenario.json",
            "report.json", "report.html", "load.json", "load.html", "simulate.lock", "shrink",
        ]
        if fixed.contains(name) { return true }
        if name.hasPrefix("child-") && name.hasSuffix("-state") { return true }
        if name.hasPrefix("roster-parent-") && name.hasSuffix(".json") { return true }
        return false
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

/// A report folder that cannot be used, in words: the path, what is wrong and what to do.
public struct ReportFolderError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
