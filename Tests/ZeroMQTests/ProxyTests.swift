import Foundation
import Testing
import ZeroMQ

@Suite("Proxy", .timeLimit(.minutes(1)))
struct ProxyTests {
    @Test("A steerable ROUTER/DEALER proxy carries a request to a REP worker and the reply back, then terminates")
    func steerableProxy() throws {
        let context = try ZMQContext()
        // Should TERMINATE be lost, unblock the proxy thread so the context can be torn down.
        defer { context.shutdown() }
        let started = Signal()
        let finished = ThreadResult<String?>()  // nil: returned normally; otherwise what went wrong
        let proxyThread = Thread {
            do {
                let frontend = try context.socket(.router)
                let backend = try context.socket(.dealer)
                let control = try context.socket(.pair)
                for socket in [frontend, backend, control] { try socket.set(.linger, 0) }
                try frontend.bind("inproc://proxy-frontend")
                try backend.bind("inproc://proxy-backend")
                try control.bind("inproc://proxy-control")
                started.fire()
                try ZMQ.proxySteerable(frontend: frontend, backend: backend, control: control)
                finished.finish(nil)
            } catch {
                finished.finish("\(error)")
            }
        }
        proxyThread.start()
        try #require(started.wait(seconds: 10))

        let client = try makeSocket(context, .dealer)
        try client.connect("inproc://proxy-frontend")
        let worker = try makeSocket(context, .rep)
        try worker.connect("inproc://proxy-backend")
        let control = try makeSocket(context, .pair)
        try control.connect("inproc://proxy-control")

        // A DEALER talking to a REP through the proxy supplies the empty delimiter frame itself.
        #expect(try client.send(multipart: [[], bytes("ping")]))
        #expect(try worker.receiveMultipart() == [bytes("ping")])
        #expect(try worker.send("pong"))
        #expect(try client.receiveMultipart() == [[], bytes("pong")])

        #expect(try control.send("TERMINATE"))
        let outcome = finished.wait(seconds: 10)
        #expect(outcome != nil, "the proxy did not stop after TERMINATE")
        #expect(outcome == .some(nil), "the proxy failed: \(String(describing: outcome))")
    }

    @Test("A plain proxy ends with ETERM when the context shuts down")
    func plainProxyEndsOnShutdown() throws {
        let context = try ZMQContext()
        let started = Signal()
        let finished = ThreadResult<String>()
        let proxyThread = Thread {
            do {
                let frontend = try context.socket(.pull)
                let backend = try context.socket(.push)
                for socket in [frontend, backend] { try socket.set(.linger, 0) }
                try frontend.bind("inproc://plain-in")
                try backend.bind("inproc://plain-out")
                started.fire()
                try ZMQ.proxy(frontend: frontend, backend: backend)
                finished.finish("returned without an error")
            } catch let error as ZMQError where error.isContextTerminated {
                finished.finish("ETERM")
            } catch {
                finished.finish("\(error)")
            }
        }
        proxyThread.start()
        try #require(started.wait(seconds: 10))

        do {
            let producer = try makeSocket(context, .push)
            try producer.connect("inproc://plain-in")
            let consumer = try makeSocket(context, .pull)
            try consumer.connect("inproc://plain-out")
            #expect(try producer.send("through"))
            #expect(try consumer.receive()?.bytes == bytes("through"))
        }
        context.shutdown()
        #expect(finished.wait(seconds: 10) == "ETERM")
    }
}
