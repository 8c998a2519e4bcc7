import Foundation

/// The one lookup of the askrelay executables' folder (`askrelay-broker`, `askrelay-limits`, `askrelay-parent`,
/// `askrelay-child`, `askrelay`), for the cluster harness, `askrelay test`, `askrelay load`, `askrelay simulate`
/// and the tests:
///
/// 1. a folder the caller names (`AskRelayCluster.Options.binDirectory`, a load's or a simulation's options);
/// 2. else the folder `ASKRELAY_BIN_DIR` names (when set and not empty);
/// 3. else the folder of the running program, then each of its parents, the first holding `askrelay-broker`
///    (`swift build` puts every executable in `.build/debug`, beside a test bundle's folder).
///
/// A folder that does not hold the executable is one ``RelayProcessError`` naming where it looked and what to do.
public enum Executables {
    /// The environment variable naming the folder.
    public static let environmentVariable = "ASKRELAY_BIN_DIR"
    /// The executable whose presence marks the folder.
    public static let marker = "askrelay-broker"

    /// What to do when the executables are missing. A dependent package's own `swift build` builds only its own
    /// products, so the executables are built in the AskRelay checkout, and the variable names that folder.
    static let howToBuild =
        "run `swift build` in the AskRelay checkout (a dependent package's own build does not build the askrelay "
        + "executables), or set \(environmentVariable) to the folder holding them (that checkout's .build/debug)"

    /// The folder of the executables: `explicit`, else `ASKRELAY_BIN_DIR` in `environment`, else the running
    /// program's folder or the first of its parents holding ``marker``.
    /// - Throws: ``RelayProcessError`` naming where it looked when that folder does not hold ``marker``.
    public static func directory(
        _ explicit: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> String {
        let candidates = candidates(explicit, environment: environment)
        if let found = candidates.folders.first(where: holdsMarker) { return found }
        throw RelayProcessError(
            "\(marker) not found in \(candidates.looked); \(howToBuild)"
        )
    }

    /// ``directory(_:environment:)`` without the error: when no folder holds ``marker``, the first place it looked,
    /// so that starting an executable from it fails later with the folder's name (a default option value).
    public static func directoryOrFirstCandidate(
        _ explicit: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        let candidates = candidates(explicit, environment: environment)
        return candidates.folders.first(where: holdsMarker) ?? candidates.folders.first ?? programDirectory
    }

    /// The path of `name` in `folder`. - Throws: ``RelayProcessError`` naming both when it is not an executable
    /// file there.
    public static func path(of name: String, in folder: String) throws -> String {
        let path = (folder as NSString).appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw RelayProcessError(
                "\(name) not found in \(folder); \(howToBuild)"
            )
        }
        return path
    }

    /// The folder of the running program (`/proc/self/exe`, else the first argument, else the working folder).
    public static var programDirectory: String {
        programPath.map { ($0 as NSString).deletingLastPathComponent } ?? FileManager.default.currentDirectoryPath
    }

    private static var programPath: String? {
        if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return resolved
        }
        let argument0 = CommandLine.arguments.first ?? ""
        guard argument0.contains("/") else { return nil }
        return URL(fileURLWithPath: argument0).resolvingSymlinksInPath().path
    }

    private static func holdsMarker(_ folder: String) -> Bool {
        FileManager.default.isExecutableFile(atPath: (folder as NSString).appendingPathComponent(marker))
    }

    /// The folders to try, in order, and how a message names them.
    private static func candidates(
        _ explicit: String?,
        environment: [String: String]
    ) -> (folders: [String], looked: String) {
        if let explicit { return ([explicit], explicit) }
        if let named = environment[environmentVariable], !named.isEmpty { return ([named], named) }
        var folders: [String] = []
        var url = URL(fileURLWithPath: programPath ?? FileManager.default.currentDirectoryPath + "/-")
        while url.path != "/" {
            url.deleteLastPathComponent()
            folders.append(url.path)
        }
        return (folders, folders.first.map { folders.count == 1 ? $0 : "\($0) and its parents" } ?? "nowhere")
    }
}

/// A process that could not be found, started, made ready or ended as asked, or a folder that could not be made:
/// the message says which process, what happened and, where it helps, what to do.
public struct RelayProcessError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
