import AskKeys
import AskCLI
import AskProtocol
import Foundation
import ZeroMQ

/// `askrelay keys ...`: CURVE keys and principals for a broker and its workers.
struct KeysCommand: CommandGroup {
    static let name = "keys"
    static let abstract = "generate, add, revoke and list CURVE keys and principals"
    static let subcommands: [any Command.Type] = [KeysGenerate.self, KeysAdd.self, KeysRevoke.self, KeysList.self]
}

struct KeysGenerate: Command {
    static let name = "generate"
    static let abstract = "write the broker's key, one key per principal, and principals.json"
    static let discussion = """
        Ids follow the generated rosters of the workers (docs/workers.md): families f1...fN, guardians
        <guardian-prefix><f>-<g>, children <child-prefix><f>-<c>. With --parent-hosts / --child-hosts, one key per
        worker process serves several families (family f goes to host ((f-1) mod hosts) + 1) instead of one key per
        guardian or child. Files: broker.key (secret, 0600), broker.public, principals.json, and one <name>.key
        (secret, 0600) per principal. Start the broker with --curve-secret-file DIR/broker.key --principals
        DIR/principals.json, and each worker with --curve-key DIR/<name>.key --broker-key DIR/broker.public.
        """
    static let options: [OptionSpec] = [
        .value(
            "out",
            "DIR",
            env: "ASKRELAY_KEYS_OUT",
            help: "folder to write (created; must not hold a principals.json yet unless --force)"
        ),
        .value("families", "N", env: "ASKRELAY_KEYS_FAMILIES", default: "1", help: "families"),
        .value("guardians", "G", env: "ASKRELAY_KEYS_GUARDIANS", default: "2", help: "guardians per family"),
        .value("children", "C", env: "ASKRELAY_KEYS_CHILDREN", default: "1", help: "children per family"),
        .value("limits", "N", env: "ASKRELAY_KEYS_LIMITS", default: "1", help: "limits worker keys (limits-1 ...)"),
        .value("observers", "N", env: "ASKRELAY_KEYS_OBSERVERS", default: "1", help: "observer keys (observer-1 ...)"),
        .value(
            "parent-hosts",
            "N",
            env: "ASKRELAY_KEYS_PARENT_HOSTS",
            default: "0",
            help: "one key per parent process instead of per guardian"
        ),
        .value(
            "child-hosts",
            "N",
            env: "ASKRELAY_KEYS_CHILD_HOSTS",
            default: "0",
            help: "one key per child process instead of per child"
        ),
        .value(
            "guardian-prefix",
            "P",
            env: "ASKRELAY_KEYS_GUARDIAN_PREFIX",
            default: "g",
            help: "prefix of guardian ids"
        ),
        .value("child-prefix", "P", env: "ASKRELAY_KEYS_CHILD_PREFIX", default: "c", help: "prefix of child ids"),
        .flag("force", env: "ASKRELAY_KEYS_FORCE", help: "overwrite an existing key folder"),
    ]

    let out: String
    let plan: KeyGenerator.Plan
    let force: Bool

    init(arguments: Arguments) throws {
        out = try arguments.require("out")
        var plan = KeyGenerator.Plan()
        plan.families = try arguments.int("families", in: 0...100_000) ?? 1
        plan.guardiansPerFamily = try arguments.int("guardians", in: 0...100) ?? 2
        plan.childrenPerFamily = try arguments.int("children", in: 0...100) ?? 1
        plan.limits = try arguments.int("limits", in: 0...100) ?? 1
        plan.observers = try arguments.int("observers", in: 0...100) ?? 1
        plan.parentHosts = try arguments.int("parent-hosts", in: 0...1000) ?? 0
        plan.childHosts = try arguments.int("child-hosts", in: 0...1000) ?? 0
        plan.guardianPrefix = arguments.string("guardian-prefix") ?? "g"
        plan.childPrefix = arguments.string("child-prefix") ?? "c"
        self.plan = plan
        force = arguments.flag("force")
    }

    func validate() throws {
        if !force && FileManager.default.fileExists(atPath: out + "/" + KeySet.principalsFileName) {
            throw UsageError("\(out) already holds keys; use --force to replace them, or 'askrelay keys add'")
        }
        guard ZMQ.has("curve") else { throw UsageError("this libzmq was built without CURVE") }
    }

    func run() async throws -> Int32 {
        let set = try KeyGenerator.generate(plan)
        try set.write(to: out)
        printLine("wrote \(set.principals.principals.count) principals and the broker key to \(out)")
        printLine("broker public key: \(set.broker.publicKey)")
        return ExitCode.success
    }
}

struct KeysAdd: Command {
    static let name = "add"
    static let abstract = "create a key for one more principal and add it to principals.json"
    static let options: [OptionSpec] = [
        .value("dir", "DIR", env: "ASKRELAY_KEYS_DIR", help: "the key folder (holds principals.json)"),
        .value("role", "ROLE", env: "ASKRELAY_KEYS_ROLE", help: "child, guardian, limits, observer, echo or client"),
        .value(
            "id",
            "ID",
            env: "ASKRELAY_KEYS_ID",
            help: "the principal's id (its address is role/id unless --endpoint is given)"
        ),
        .value("family", "F", env: "ASKRELAY_KEYS_FAMILY", help: "the family, for a child or guardian"),
        .value(
            "endpoint",
            "ADDRESS[@FAMILY]",
            env: "ASKRELAY_KEYS_ENDPOINT",
            repeatable: true,
            help: "an address the key may serve (for a worker hosting several)"
        ),
    ]

    let dir: String
    let role: SessionRole
    let id: String
    let family: String?
    let endpoints: [EndpointClaim]

    init(arguments: Arguments) throws {
        dir = try arguments.require("dir")
        let roleName = try arguments.require("role")
        guard let role = SessionRole(rawValue: roleName) else {
            throw UsageError(
                "\(arguments.origin("role")) must be one of \(SessionRole.allCases.map(\.rawValue).joined(separator: ", ")), got '\(roleName)'"
            )
        }
        self.role = role
        id = try arguments.require("id")
        family = arguments.string("family")
        endpoints = arguments.strings("endpoint").map { text in
            let parts = text.split(separator: "@", maxSplits: 1).map(String.init)
            return EndpointClaim(address: parts[0], family: parts.count > 1 ? parts[1] : nil)
        }
    }

    func validate() throws {
        guard Address.isValidID(id) else {
            throw UsageError("--id must be 1-64 characters of A-Z a-z 0-9 . _ -, got '\(id)'")
        }
        if (role == .child || role == .guardian) && endpoints.isEmpty && family == nil {
            throw UsageError("a \(role.rawValue) needs --family (or --endpoint ADDRESS@FAMILY)")
        }
        for claim in endpoints where !claim.address.hasPrefix(role.addressPrefix) {
            throw UsageError("a \(role.rawValue) key may not serve '\(claim.address)'")
        }
    }

    func run() async throws -> Int32 {
        let path = dir + "/" + KeySet.principalsFileName
        var file = try PrincipalsFile.load(path: path)
        guard !file.principals.contains(where: { $0.id == id && $0.role == role }) else {
            throw UsageError("\(role.rawValue) '\(id)' already has a key; revoke it first or pick another id")
        }
        let keys = try CurveKeyPair.generate()
        let name = "\(role.rawValue)-\(id).key"
        try KeyFile(keys: keys, role: role.rawValue, id: id, family: family).save(path: dir + "/" + name)
        file.principals.append(
            PrincipalEntry(publicKey: keys.publicKey, role: role, id: id, family: family, endpoints: endpoints)
        )
        try file.save(path: path)
        printLine("added \(role.rawValue) '\(id)': \(dir)/\(name)")
        return ExitCode.success
    }
}

struct KeysRevoke: Command {
    static let name = "revoke"
    static let abstract = "mark a principal's key revoked (a running broker drops its sessions within a second)"
    static let options: [OptionSpec] = [
        .value("dir", "DIR", env: "ASKRELAY_KEYS_DIR", help: "the key folder (holds principals.json)"),
        .value("id", "ID", env: "ASKRELAY_KEYS_ID", help: "revoke every key of this principal id"),
        .value("key", "PUBLIC", env: "ASKRELAY_KEYS_KEY", help: "revoke this public key"),
    ]

    let dir: String
    let id: String?
    let key: String?

    init(arguments: Arguments) throws {
        dir = try arguments.require("dir")
        id = arguments.string("id")
        key = arguments.string("key")
    }

    func validate() throws {
        if (id == nil) == (key == nil) { throw UsageError("give exactly one of --id and --key") }
    }

    func run() async throws -> Int32 {
        let path = dir + "/" + KeySet.principalsFileName
        var file = try PrincipalsFile.load(path: path)
        var count = 0
        for index in file.principals.indices
        where file.principals[index].id == id || file.principals[index].publicKey == key {
            if !file.principals[index].revoked { count += 1 }
            file.principals[index].revoked = true
        }
        guard count > 0 else {
            printError("askrelay keys revoke: no live key matches \(id.map { "id '\($0)'" } ?? "key '\(key ?? "")'")")
            return ExitCode.failure
        }
        try file.save(path: path)
        printLine("revoked \(count) key(s)")
        return ExitCode.success
    }
}

struct KeysList: Command {
    static let name = "list"
    static let abstract = "list the principals of a key folder"
    static let options: [OptionSpec] = [
        .value("dir", "DIR", env: "ASKRELAY_KEYS_DIR", help: "the key folder (holds principals.json)")
    ]

    let dir: String

    init(arguments: Arguments) throws { dir = try arguments.require("dir") }

    func run() async throws -> Int32 {
        let file = try PrincipalsFile.load(path: dir + "/" + KeySet.principalsFileName)
        for entry in file.principals {
            let state = entry.revoked ? "revoked" : "active"
            printLine(
                "\(entry.role.rawValue)\t\(entry.id)\t\(entry.family ?? "-")\t\(entry.allowedEndpoints.count) address(es)\t\(state)\t\(entry.publicKey)"
            )
        }
        return ExitCode.success
    }
}
