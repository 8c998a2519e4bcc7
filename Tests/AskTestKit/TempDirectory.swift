import Foundation

/// A fresh folder under the system temporary folder, made by `init` and removed by ``cleanup()`` or, at the latest,
/// when the last reference goes. The one temporary folder of the tests: take it instead of building a path by hand,
/// and keep it to the end of the scope that uses its path with `defer { folder.cleanup() }` (a value no longer used
/// may be released early, and its folder with it).
public final class TempDirectory: Sendable {
    /// The folder, without a trailing slash.
    public let path: String

    /// - Parameter prefix: the start of the folder's name (the rest is unique), for a reader of /tmp.
    public init(prefix: String = "askrelay-test") {
        let base = NSTemporaryDirectory().hasSuffix("/") ? NSTemporaryDirectory() : NSTemporaryDirectory() + "/"
        var template = Array((base + "\(prefix)-XXXXXX").utf8CString)
        if let made = mkdtemp(&template) {
            path = String(cString: made)
        } else {
            // mkdtemp fails only when the system temporary folder does: the test fails where it first uses `path`.
            path = base + "\(prefix)-" + UUID().uuidString
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
    }

    /// `name` inside the folder.
    public func appending(_ name: String) -> String { path + "/" + name }

    /// The folder as a file URL.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    /// Removes the folder and everything in it (again: nothing happens).
    public func cleanup() { try? FileManager.default.removeItem(atPath: path) }

    deinit { cleanup() }
}
