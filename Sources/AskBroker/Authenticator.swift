import AskKeys
import AskLogging
import AskProtocol
import Foundation
import ZeroMQ

/// CURVE authentication for the broker: the ZAP handler that admits known keys at the handshake, and the table
/// that turns an authenticated key into a principal at HELLO.
///
/// It lives on the broker's thread: its REP socket sits in the broker's poller, so the principals table needs no lock.
final class Authenticator {
    static let domain = "askrelay"

    let keys: CurveKeyPair
    let principalsPath: String
    private(set) var principals: [String: PrincipalEntry]
    private let socket: ZMQSocket
    private let logger: AskLogger
    private var loadedModification: FileVersion?
    private var lastCheck = ContinuousClock.now
    private(set) var handshakesAllowed = 0
    private(set) var handshakesRefused = 0
    /// Refused-handshake lines per client address: a client retrying with a bad key gets a few lines, then a count.
    var refusalLog = LogRateLimiter<String>()

    /// Loads the broker's key and the principals, and binds the ZAP handler. Call before the ROUTER binds.
    init(secretKeyFile: String, principalsFile: String, context: ZMQContext, logger: AskLogger) throws {
        keys = try KeyFile.load(path: secretKeyFile).keyPair
        principalsPath = principalsFile
        principals = try PrincipalsFile.load(path: principalsFile).byKey
        loadedModification = Self.modification(of: principalsFile)
        self.logger = logger
        socket = try context.socket(.rep)
        try socket.set(.linger, 0)
        try socket.bind(ZAP.endpoint)
    }

    /// Makes the ROUTER a CURVE server that authenticates through this handler.
    func secure(_ router: ZMQSocket) throws {
        try router.makeCurveServer(keys)
        try router.set(.zapDomain, Self.domain)
    }

    @discardableResult
    func add(to poller: inout ZMQPoller) -> Int { poller.add(socket) }

    /// Answers every waiting ZAP request: known, unrevoked keys are admitted with their key as the user id.
    func serve() {
        while let frames = try? socket.receiveMultipart(.dontWait) {
            guard let request = ZAP.Request(frames: frames) else {
                // Not a ZAP 1.0 request: answer anyway so the REP socket stays in step.
                _ = try? socket.send(multipart: [
                    Array("1.0".utf8), frames.count > 1 ? frames[1] : [], Array("500".utf8),
                    Array("malformed request".utf8), [], [],
                ])
                continue
            }
            let reply: [[UInt8]]
            if let key = request.curvePublicKey, let principal = principals[key], !principal.revoked {
                handshakesAllowed += 1
                reply = ZAP.reply(to: request, status: 200, text: "OK", userID: key)
            } else {
                handshakesRefused += 1
                if logger.logLevel <= .notice, let suppressed = refusalLog.admit(request.address) {
                    logger.notice(
                        "handshake refused: unknown or revoked key",
                        metadata: [
                            "address": "\(request.address)", "mechanism": "\(request.mechanism)",
                            "suppressed": "\(suppressed)",
                        ]
                    )
                }
                reply = ZAP.reply(to: request, status: 400, text: "unknown or revoked key")
            }
            _ = try? socket.send(multipart: reply)
        }
    }

    /// The principal of an authenticated key, or the reason it may not say this HELLO.
    func authorize(_ hello: Hello, key: String?) -> Result<PrincipalEntry, WireError> {
        guard let key, let principal = principals[key] else {
            return .failure(WireError(.forbidden, "this connection's key is not a known principal"))
        }
        if let refusal = principal.refusal(of: hello) { return .failure(WireError(.forbidden, refusal)) }
        return .success(principal)
    }

    /// Reloads the principals file when it changed (checked at most once a second).
    /// - Returns: keys that were revoked or removed by the reload, whose live sessions must end.
    func reloadIfChanged(now: ContinuousClock.Instant) -> Set<String> {
        guard now - lastCheck >= .seconds(1) else { return [] }
        lastCheck = now
        let modification = Self.modification(of: principalsPath)
        guard modification != loadedModification else { return [] }
        do {
            let fresh = try PrincipalsFile.load(path: principalsPath).byKey
            loadedModification = modification
            let gone = Set(principals.keys.filter { fresh[$0] == nil || fresh[$0]!.revoked })
            principals = fresh
            logger.notice(
                "principals reloaded",
                metadata: ["principals": "\(fresh.count)", "revoked_or_removed": "\(gone.count)"]
            )
            return gone
        } catch {
            logger.error("principals file not reloaded; keeping the previous one", metadata: ["error": "\(error)"])
            loadedModification = modification
            return []
        }
    }

    /// What tells one version of the file from the next: the modification time alone does not, since the file
    /// system stamps it from a coarse clock (two saves within a few milliseconds get the same time); a save
    /// (atomic: a new file renamed over the old) also changes the inode, and mostly the size.
    struct FileVersion: Equatable {
        var modified: Date?
        var size: UInt64?
        var inode: UInt64?
    }

    static func modification(of path: String) -> FileVersion? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
        return FileVersion(
            modified: attributes[.modificationDate] as? Date,
            size: (attributes[.size] as? NSNumber)?.uint64Value,
            inode: (attributes[.systemFileNumber] as? NSNumber)?.uint64Value
        )
    }
}
