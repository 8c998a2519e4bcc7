import Foundation
import Testing
import ZeroMQ

@Suite("Errors and context", .timeLimit(.minutes(1)))
struct ErrorTests {
    @Test("libzmq is 4.3 or later")
    func version() {
        let version = ZMQ.version
        #expect(version.major > 4 || (version.major == 4 && version.minor >= 3), "linked libzmq \(version)")
    }

    @Test("Binding a tcp port that is already bound is EADDRINUSE with a readable description")
    func addressInUse() throws {
        let context = try ZMQContext()
        let first = try makeSocket(context, .router)
        let endpoint = try first.bind("tcp://127.0.0.1:*")
        let second = try makeSocket(context, .router)
        let error = try #require(throws: ZMQError.self) { try second.bind(endpoint) }
        #expect(error.isAddressInUse)
        #expect(error.code == EADDRINUSE)
        #expect(error.call == "zmq_bind")
        #expect(error.context == endpoint)
        #expect(error.description.contains(endpoint))
        #expect(error.description.contains("Address already in use"))
        #expect(error.isContextTerminated == false)
    }

    @Test("Malformed endpoints are EINVAL, unknown transports EPROTONOSUPPORT")
    func badEndpoints() throws {
        let context = try ZMQContext()
        let socket = try makeSocket(context, .dealer)

        let badBind = try #require(throws: ZMQError.self) { try socket.bind("tcp://nonsense") }
        #expect(badBind.code == EINVAL)
        #expect(badBind.call == "zmq_bind")
        #expect(badBind.context == "tcp://nonsense")

        let badConnect = try #require(throws: ZMQError.self) { try socket.connect("tcp://nonsense") }
        #expect(badConnect.code == EINVAL)
        #expect(badConnect.call == "zmq_connect")

        let unknownBind = try #require(throws: ZMQError.self) { try socket.bind("foo://x") }
        #expect(unknownBind.code == EPROTONOSUPPORT)
        #expect(unknownBind.call == "zmq_bind")

        let unknownConnect = try #require(throws: ZMQError.self) { try socket.connect("foo://x") }
        #expect(unknownConnect.code == EPROTONOSUPPORT)
        #expect(unknownConnect.call == "zmq_connect")
        #expect(unknownConnect.description.contains("foo://x"))
    }

    @Test("inproc connect works before the bind")
    func inprocConnectBeforeBind() throws {
        let context = try ZMQContext()
        let dealer = try makeSocket(context, .dealer)
        try dealer.connect("inproc://bound-later")
        #expect(try dealer.send("early"))
        let router = try makeSocket(context, .router)
        try router.bind("inproc://bound-later")
        let frames = try #require(try router.receiveMultipart())
        #expect(frames.last == bytes("early"))
    }

    @Test("Shutting the context down makes a blocking receive on another thread throw ETERM")
    func contextShutdownInterruptsReceive() throws {
        let context = try ZMQContext()
        let ready = Signal()
        let outcome = ThreadResult<Result<String, ZMQError>>()
        let thread = Thread {
            do {
                let pull = try context.socket(.pull)
                try pull.set(.linger, 0)
                try pull.bind("inproc://shutdown")
                ready.fire()
                let frame = try pull.receive()  // no timeout: only the shutdown can end this
                outcome.finish(.success("received \(String(describing: frame))"))
            } catch let error as ZMQError {
                outcome.finish(.failure(error))
            } catch {
                outcome.finish(.success("unexpected \(error)"))
            }
        }
        thread.start()
        try #require(ready.wait(seconds: 10))
        context.shutdown()
        let result = try #require(outcome.wait(seconds: 10), "the receiving thread did not return")
        switch result {
        case .failure(let error):
            #expect(error.isContextTerminated)
            #expect(error.call == "zmq_msg_recv")
        case .success(let other):
            Issue.record("receive returned instead of throwing: \(other)")
        }

        // Every later call on the context's sockets fails the same way.
        let error = try #require(throws: ZMQError.self) { _ = try context.socket(.pull) }
        #expect(error.isContextTerminated)
    }
}
