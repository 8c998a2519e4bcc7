@_exported import AskLinks
import AskClient
import AskLogging
import Foundation
import Synchronization

/// The links of a cluster started with ``AskRelayCluster/Options/links``: one ``FaultLink`` per worker process and
/// per center the cluster makes, each named after what it carries (`limits`, `parent-1`, `child-1`,
/// `askcenter-1`, `guardiancenter-1`, ...). Without the option it hands out the broker's endpoint itself.
final class ClusterLinks: Sendable {
    private struct State {
        var links: [String: FaultLink] = [:]
        var order: [String] = []
        var centers: [ObjectIdentifier: String] = [:]
        var made: [String: Int] = [:]
        var stopped = false
    }

    let enabled: Bool
    private let folder: String
    private let ipc: Bool
    private let logger: AskLogger
    private let state = Mutex(State())

    init(enabled: Bool, folder: String, ipc: Bool, logger: AskLogger) {
        self.enabled = enabled
        self.folder = folder
        self.ipc = ipc
        self.logger = logger
    }

    /// The endpoint a process or center named `name` connects to: its own link's (made now) to `upstream`, or
    /// `upstream` itself without links. Over ipc the link listens on `<folder>/link-<name>.ipc` too, and that is
    /// the endpoint given.
    func endpoint(for name: String, upstream: String) throws -> String {
        guard enabled else { return upstream }
        if let existing = state.withLock({ $0.links[name] }) {
            return ipc ? existing.ipcEndpoint ?? existing.endpoint : existing.endpoint
        }
        let logger = self.logger
        let link: FaultLink
        do {
            link = try FaultLink(
                name: name,
                upstream: upstream,
                ipcPath: ipc ? "\(folder)/link-\(name).ipc" : nil,
                log: { line in logger.notice("\(line)", metadata: ["link": "\(name)"]) }
            )
        } catch {
            throw ClusterError("cannot start the link '\(name)' to \(upstream): \(error)")
        }
        let kept = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.links[name] = link
            state.order.append(name)
            return true
        }
        guard kept else {
            link.stop()
            throw ClusterError("the cluster is stopped; no link '\(name)' is made")
        }
        return ipc ? link.ipcEndpoint ?? link.endpoint : link.endpoint
    }

    /// A fresh name for the next client of `kind` (`askcenter-1`, `askcenter-2`, ...).
    func nextName(_ kind: String) -> String {
        state.withLock { state in
            state.made[kind, default: 0] += 1
            return "\(kind)-\(state.made[kind]!)"
        }
    }

    func register(_ center: AnyObject, as name: String) {
        guard enabled else { return }
        state.withLock { $0.centers[ObjectIdentifier(center)] = name }
    }

    func link(_ name: String) throws -> FaultLink {
        let (link, names) = state.withLock { ($0.links[name], $0.order) }
        if let link { return link }
        guard enabled else {
            throw ClusterError("this cluster has no links; start it with options.links = true")
        }
        throw ClusterError(
            "no link '\(name)'; the cluster's links are: \(names.isEmpty ? "none" : names.joined(separator: ", "))"
        )
    }

    func link(for center: AnyObject) throws -> FaultLink {
        guard enabled else {
            throw ClusterError("this cluster has no links; start it with options.links = true")
        }
        guard let name = state.withLock({ $0.centers[ObjectIdentifier(center)] }) else {
            throw ClusterError("this center was not made by the cluster's makeAskCenter or makeGuardianCenter")
        }
        return try link(name)
    }

    var names: [String] { state.withLock { $0.order } }

    /// Stops every link (after the processes: a worker's BYE goes through its link). Idempotent.
    func stopAll() {
        let links = state.withLock { state in
            state.stopped = true
            return state.order.compactMap { state.links[$0] }
        }
        for link in links { link.stop() }
    }
}

extension AskRelayCluster {
    /// The link named `name`, with ``Options/links``: `limits`, a worker's name (`parent-1`, `child-1`, or the name
    /// given to ``startWorker(_:role:_:name:)``), or a center's (`askcenter-1`, `guardiancenter-1`, ... in the
    /// order the cluster made them).
    /// - Throws: ``ClusterError`` naming the links there are, or saying the cluster has none.
    public func link(_ name: String) throws -> FaultLink { try links.link(name) }

    /// The link of a center made by ``makeAskCenter(children:stateDirectory:options:)``.
    public func link(for center: AskCenter) throws -> FaultLink { try links.link(for: center) }

    /// The link of a center made by ``makeGuardianCenter(guardians:options:)``.
    public func link(for center: GuardianCenter) throws -> FaultLink { try links.link(for: center) }

    /// The names of the cluster's links, in the order they were made (empty without ``Options/links``).
    public var linkNames: [String] { links.names }
}
