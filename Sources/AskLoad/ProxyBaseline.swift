import AskCLI
import AskRelayProcesses
import Foundation
import ZeroMQ

/// The relay benchmark's baseline server (`askrelay proxy`): a plain zmq_proxy between a ROUTER frontend (clients)
/// and a DEALER backend (echo workers), no high-water marks, no linger.
public enum ProxyBaseline {
    /// Binds both endpoints, prints `ready frontend=<bound URL> backend=<bound URL>` on stdout, then runs zmq_proxy
    /// on the calling thread until SIGTERM or SIGINT.
    /// - Throws: if a socket cannot be made or bound, or the proxy fails for another reason than the shutdown.
    public static func run(frontend frontendURL: String, backend backendURL: String) throws {
        let context = try ZMQContext()
        let frontend = try context.socket(.router)
        let backend = try context.socket(.dealer)
        for socket in [frontend, backend] {
            try socket.set(.linger, 0)
            try socket.set(.sendHighWaterMark, 0)
            try socket.set(.receiveHighWaterMark, 0)
        }
        let boundFrontend = try frontend.bind(frontendURL)
        let boundBackend = try backend.bind(backendURL)
        let signals = SignalWatcher(signals: [SIGTERM, SIGINT]) { _ in context.shutdown() }
        printLine(ReadyLine(["frontend": boundFrontend, "backend": boundBackend]).text)
        do {
            try ZMQ.proxy(frontend: frontend, backend: backend)
        } catch let error as ZMQError where error.isContextTerminated {
        }
        _ = signals
    }
}
