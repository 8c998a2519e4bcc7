import Foundation
import Testing
import ZeroMQ

@Suite("ZMQPoller", .timeLimit(.minutes(1)))
struct PollerTests {
    @Test("A poll with nothing ready returns 0 after about the timeout")
    func pollTimeout() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        _ = try pull.bind("inproc://poll-timeout")
        var poller = ZMQPoller()
        let index = poller.add(pull)
        var ready = -1
        let elapsed = try ContinuousClock().measure { ready = try poller.poll(timeoutMilliseconds: 200) }
        #expect(ready == 0)
        #expect(poller.isReady(index) == false)
        // Returned by its timeout, not at once; a poll that never returned is ended by the suite's time limit.
        #expect(elapsed >= .milliseconds(190))

        #expect(try pull.wait(timeoutMilliseconds: 0) == false)
    }

    @Test("A socket becomes readable after its peer sends")
    func readableAfterSend() throws {
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        let endpoint = try pull.bind("tcp://127.0.0.1:*")
        let push = try makeSocket(context, .push)
        try push.connect(endpoint)
        #expect(try push.send("wake up"))
        #expect(try pull.wait(timeoutMilliseconds: 5_000))
        #expect(try pull.receive(.dontWait)?.bytes == bytes("wake up"))
        #expect(try pull.wait(timeoutMilliseconds: 0) == false)
    }

    @Test("A poller over several sockets reports the index of the one that is ready")
    func pollerReportsTheRightIndex() throws {
        let context = try ZMQContext()
        var pulls: [ZMQSocket] = []
        var pushes: [ZMQSocket] = []
        var poller = ZMQPoller()
        var indices: [Int] = []
        for number in 0..<3 {
            let pull = try makeSocket(context, .pull)
            try pull.bind("inproc://poller-\(number)")
            let push = try makeSocket(context, .push)
            try push.connect("inproc://poller-\(number)")
            indices.append(poller.add(pull))
            pulls.append(pull)
            pushes.append(push)
        }
        #expect(indices == [0, 1, 2])

        #expect(try pushes[1].send("only the middle one"))
        #expect(try poller.poll(timeoutMilliseconds: 5_000) == 1)
        #expect(indices.map { poller.isReady($0) } == [false, true, false])
        #expect(poller.events(1).contains(.readable))

        #expect(try pushes[2].send("now the last one too"))
        _ = try pulls[1].receive()
        #expect(try poller.poll(timeoutMilliseconds: 5_000) == 1)
        #expect(indices.map { poller.isReady($0) } == [false, false, true])

        // Asking for writability instead: a PUSH with a connected peer can send.
        var writePoller = ZMQPoller()
        let pushIndex = writePoller.add(pushes[0], .writable)
        #expect(try writePoller.poll(timeoutMilliseconds: 5_000) == 1)
        #expect(writePoller.events(pushIndex).contains(.writable))
    }

    @Test("A plain file descriptor (a pipe) is polled alongside sockets")
    func pollsAPipe() throws {
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let context = try ZMQContext()
        let pull = try makeSocket(context, .pull)
        _ = try pull.bind("inproc://poll-pipe")
        var poller = ZMQPoller()
        let socketIndex = poller.add(pull)
        let pipeIndex = poller.add(fileDescriptor: fds[0])
        #expect(try poller.poll(timeoutMilliseconds: 0) == 0)

        var byte: UInt8 = 42
        #expect(write(fds[1], &byte, 1) == 1)
        #expect(try poller.poll(timeoutMilliseconds: 5_000) == 1)
        #expect(poller.isReady(pipeIndex))
        #expect(poller.isReady(socketIndex) == false)

        // After draining the pipe, waiting only on it times out.
        #expect(read(fds[0], &byte, 1) == 1)
        poller.update(socketIndex, [])
        #expect(try poller.poll(timeoutMilliseconds: 50) == 0)
    }
}
