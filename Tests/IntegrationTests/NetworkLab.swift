import Foundation

/// Hosts on one machine: one network namespace per host, each with an `eth0` veth whose peer sits on a bridge in a
/// namespace of its own, addresses `10.203.0.<n>/24` in host order. Nothing is attached to the machine's own
/// network, so no packet leaves the namespaces. Needs root (`ip netns add`).
///
/// Names are `askr-<pid>-<host>` (and `askr-<pid>-sw` for the bridge), so parallel runs do not collide and
/// `removeStale()` can tell a crashed run's leftovers (its pid is gone) from a live run's.
final class NetworkLab: @unchecked Sendable {  // @unchecked: `created` is only touched by the creating test's thread.
    static let prefix = "askr-"
    let name: String
    let hosts: [String]
    /// Namespaces made so far, in creation order; `destroy()` deletes them (their veths go with them).
    private var created: [String] = []

    /// Creates the bridge namespace and one namespace per host, wired and up.
    /// - Throws: ``ProcessFailure`` naming the `ip` command that failed; what was made is removed first.
    init(hosts: [String]) throws {
        name = "\(Self.prefix)\(getpid())"
        self.hosts = hosts
        do {
            let bridge = namespace("sw")
            try addNamespace(bridge)
            try ip(["-n", bridge, "link", "add", "br0", "type", "bridge"])
            try ip(["-n", bridge, "link", "set", "dev", "br0", "up"])
            for host in hosts {
                let space = namespace(host)
                try addNamespace(space)
                // Created straight inside the two namespaces: the machine's own namespace never sees them.
                try ip([
                    "link", "add", "name", "eth0", "netns", space, "type", "veth", "peer", "name", "port-\(host)",
                    "netns", bridge,
                ])
                try ip(["-n", bridge, "link", "set", "dev", "port-\(host)", "master", "br0"])
                try ip(["-n", bridge, "link", "set", "dev", "port-\(host)", "up"])
                try ip(["-n", space, "addr", "add", "\(address(host))/24", "dev", "eth0"])
                try ip(["-n", space, "link", "set", "dev", "lo", "up"])
                try ip(["-n", space, "link", "set", "dev", "eth0", "up"])
            }
        } catch {
            destroy()
            throw error
        }
    }

    deinit { destroy() }

    func namespace(_ host: String) -> String { "\(name)-\(host)" }

    /// `10.203.0.<index + 1>` for the host at `index`.
    func address(_ host: String) -> String {
        guard let index = hosts.firstIndex(of: host) else { preconditionFailure("no host \(host) in the lab") }
        return "10.203.0.\(index + 1)"
    }

    /// The command prefix that runs a program on `host`.
    func exec(_ host: String) -> [String] { [Self.ipPath, "netns", "exec", namespace(host)] }

    /// The `ip` command that takes `host`'s link down or up (for a simulation's `run` fault).
    func linkCommand(_ host: String, up: Bool) -> [String] {
        [Self.ipPath, "-n", namespace(host), "link", "set", "dev", "eth0", up ? "up" : "down"]
    }

    /// Whether `host`'s link is up, as `ip` reports it.
    func isLinkUp(_ host: String) -> Bool {
        let run = Tool.run(Self.ipPath, ["-n", namespace(host), "-o", "link", "show", "dev", "eth0"])
        return run.status == 0 && run.stdout.contains(",UP")
    }

    /// Kills whatever still runs inside this lab's namespaces (only processes a test started there), then deletes
    /// every namespace it made; idempotent, and errors are ignored so that cleanup goes on.
    func destroy() {
        for space in created.reversed() {
            Self.killProcesses(in: space)
            _ = Tool.run(Self.ipPath, ["netns", "del", space])
        }
        created = []
    }

    static func killProcesses(in space: String) {
        let pids = Tool.run(ipPath, ["netns", "pids", space]).stdout.split(separator: "\n").compactMap { Int32($0) }
        for pid in pids where pid > 1 { kill(pid, SIGKILL) }
    }

    /// Namespaces that exist now (`ip netns list`, names only).
    static func namespaces() -> [String] {
        Tool.run(ipPath, ["netns", "list"]).stdout.split(separator: "\n").compactMap {
            $0.split(separator: " ").first.map(String.init)
        }
    }

    /// Deletes `askr-<pid>-*` namespaces left by runs whose process is gone (an aborted test), never a live run's.
    static func removeStale() {
        for space in namespaces() where space.hasPrefix(prefix) {
            let parts = space.dropFirst(prefix.count).split(separator: "-")
            guard parts.count == 2, let pid = Int32(parts[0]), pid > 0 else { continue }
            if kill(pid, 0) == -1 && errno == ESRCH {
                killProcesses(in: space)
                _ = Tool.run(ipPath, ["netns", "del", space])
            }
        }
    }

    /// Why namespaces cannot be made here, or `nil` when they can (tried for real with a throwaway namespace).
    static let unavailableReason: String? = {
        if geteuid() != 0 { return "not root: network namespaces need root (run the suite as root)" }
        guard FileManager.default.isExecutableFile(atPath: ipPath) else {
            return "no \(ipPath) (apt-get install iproute2)"
        }
        let probe = "\(prefix)\(getpid())-probe"
        let add = Tool.run(ipPath, ["netns", "add", probe])
        defer { _ = Tool.run(ipPath, ["netns", "del", probe]) }
        if add.status != 0 {
            return "`ip netns add` fails here: \(add.stderr.trimmingCharacters(in: .whitespacesAndNewlines))"
        }
        return nil
    }()

    static let ipPath = Tool.find("ip") ?? "/usr/sbin/ip"

    private func addNamespace(_ space: String) throws {
        try ip(["netns", "add", space])
        created.append(space)
    }

    private func ip(_ arguments: [String]) throws {
        let run = Tool.run(Self.ipPath, arguments)
        guard run.status == 0 else {
            throw ProcessFailure("ip \(arguments.joined(separator: " ")) exited \(run.status): \(run.stderr)")
        }
    }
}
