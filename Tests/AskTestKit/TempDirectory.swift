import AskRelayProcesses
import Foundation

/// A fresh folder under the system temporary folder, made by `init` and removed by ``cleanup()`` or, at the latest,
/// when the last reference goes. The one temporary folder of the tests: take it instead of building a path by hand,
/// and keep it to the end of the scope that uses its path with `defer { folder.cleanup() }` (a value no longer used
/// may be released early, and its folder with it).
public final class TempDirectory: Sendable {
    /// The folder itself: AskRelayProcesses' ``ScratchFolder``, the one place a temporary folder is made.
    private let folder: ScratchFolder

    /// The folder, without a trailing slash.
    public var path: String { folder.path }

    /// - Parameter prefix: the start of the folder's name (the rest is unique), for a reader of /tmp.
    public init(prefix: String = "askrelay-test") {
        // Only a broken system temporary folder fails here, and then no test can run: say so and stop.
        do { folder = try ScratchFolder(prefix: prefix) } catch { fatalError("TempDirectory: \(error)") }
    }

    /// `name` inside the folder.
    public func appending(_ name: String) -> String { path + "/" + name }

    /// The folder as a file URL.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    /// Removes the folder and everything in it (again: nothing happens).
    public func cleanup() { _ = folder.remove() }

    deinit { cleanup() }
}
