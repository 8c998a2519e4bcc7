import Foundation
import Testing
import ZeroMQ

#if canImport(Glibc)
    import Glibc
#endif

@Suite("WakeSignal")
struct WakeSignalTests {
    @Test("signal wakes a poller; drain clears it")
    func wakes() throws {
        let wake = try WakeSignal()
        var poller = ZMQPoller()
        let index = poller.add(fileDescriptor: wake.readDescriptor)
        _ = try poller.poll(timeoutMilliseconds: 0)
        #expect(!poller.isReady(index))
        wake.signal()
        wake.signal()
        _ = try poller.poll(timeoutMilliseconds: 5000)
        #expect(poller.isReady(index))
        wake.drain()
        _ = try poller.poll(timeoutMilliseconds: 0)
        #expect(!poller.isReady(index))
    }

    @Test("a spawned process inherits neither end (close-on-exec): /proc/<pid>/fd of a child")
    func notInherited() throws {
        let wake = try WakeSignal()
        var status = stat()
        #expect(fstat(wake.readDescriptor, &status) == 0)
        let inode = status.st_ino
        // A `cat` that lives until we close its stdin, spawned with no file actions beyond that, as a worker is.
        var input: [Int32] = [0, 0]
        #expect(pipe(&input) == 0)
        _ = fcntl(input[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/cat"), nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        #expect(posix_spawn(&pid, "/bin/cat", &actions, nil, argv, environ) == 0)
        close(input[0])
        defer {
            close(input[1])
            var exit: Int32 = 0
            _ = waitpid(pid, &exit, 0)
        }
        let folder = "/proc/\(pid)/fd"
        let entries = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(entries.contains("0"), "the child's fd table was read")
        let targets = entries.compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + $0)
        }
        #expect(!targets.contains { $0.contains("[\(inode)]") }, "the child holds the wake signal: \(targets)")
    }
}
