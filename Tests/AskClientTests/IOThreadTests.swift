@testable import AskClient
import Testing
import ZeroMQ

/// Each broker connection of a worker on an I/O thread of its own (NameLookupTests shows why, with a name server
/// that never answers).
@Suite("broker connections' I/O threads", .timeLimit(.minutes(1)))
struct IOThreadTests {
    @Test(
        "a worker's context has a thread per broker and one more; each connection takes the next, its sockets keep it"
    )
    func connectionsTakeThreadsInTurn() throws {
        let context = try ZMQContext.forBrokers(2)
        #expect(context.ioThreads == 3)
        let configuration = WorkerConfiguration(broker: "tcp://127.0.0.1:9", role: .child, worker: "t", endpoints: [])
        var threads: [UInt64] = []
        for _ in 0..<4 {
            let connection = try WorkerConnection(
                configuration: configuration,
                logger: .silent(),
                context: context,
                inbox: WorkerInbox()
            )
            threads.append(connection.ioThread)
        }
        #expect(threads == [0b001, 0b010, 0b100, 0b001])
        let (socket, _) = try WorkerConnection.makeSocket(configuration, context: context, ioThread: 0b100)
        #expect(try socket.get(.affinity) == 0b100)
    }

    @Test("the thread count: one broker gets two, a long list at most sixteen; a client context has four")
    func threadCounts() throws {
        #expect(try ZMQContext.forBrokers(1).ioThreads == 2)
        #expect(try ZMQContext.forBrokers(0).ioThreads == 2)
        #expect(try ZMQContext.forBrokers(40).ioThreads == 16)
        #expect(try ClientContext().zmq.ioThreads == 4)
    }

    @Test("with one I/O thread every socket may take any (affinity 0)")
    func oneThreadIsAny() throws {
        let context = try ZMQContext()
        #expect(context.ioThreads == 1)
        #expect(context.nextIOThread() == 0)
        let socket = try context.socket(.dealer)
        try socket.set(.affinity, context.nextIOThread())
        #expect(try socket.get(.affinity) == 0)
    }
}
