import AskBasics
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A process group that dies with the process that made it, however that process ends (exit, crash, kill -9).
///
/// The group's leader is a guard process, `/bin/sh -c 'read _; kill -KILL 0'`, whose stdin is the read end of a
/// pipe; only this process holds the write end (close-on-exec, made while no other supervised spawn can inherit
/// it). When this process ends the kernel closes the write end, the guard's `read` returns, and it SIGKILLs its
/// whole group, itself included. Processes join it through the `processGroup` argument of
/// `ProcessSupervisor.start`.
///
/// `PR_SET_PDEATHSIG` would not do: it fires when the *thread* that spawned the child exits, and a Swift task runs
/// on whichever pool thread is free. Nor can it be set through `posix_spawn`.
public final class ProcessGroupGuard: Sendable {
    /// The group's id: the guard process's pid.
    public let processGroup: pid_t
    private let writeEnd: Mutex<Int32>

    /// Starts the guard process. - Throws: ``SupervisorError`` when `/bin/sh` cannot be spawned.
    public init() throws {
        var fds: [Int32] = [0, 0]
        let pid: pid_t = try SupervisedProcess.spawnLock.withLock {
            guard pipe(&fds) == 0 else {
                throw SupervisorError(
                    process: "process-group guard",
                    "pipe failed: \(String(cString: strerror(errno)))"
                )
            }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
            var attributes = posix_spawnattr_t()
            posix_spawnattr_init(&attributes)
            defer { posix_spawnattr_destroy(&attributes) }
            setDefaultSignals(&attributes, processGroup: 0)
            let argv = ["/bin/sh", "-c", "read _; kill -KILL 0"]
            let cArgs = argv.map { strdup($0) } + [nil]
            let cEnv: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin"), nil]
            defer {
                for pointer in cArgs { free(pointer) }
                for pointer in cEnv { free(pointer) }
            }
            var pid: pid_t = 0
            let result = posix_spawn(&pid, "/bin/sh", &actions, &attributes, cArgs, cEnv)
            close(fds[0])
            guard result == 0 else {
                close(fds[1])
                throw SupervisorError(
                    process: "process-group guard",
                    "could not start /bin/sh: \(String(cString: strerror(result)))"
                )
            }
            return pid
        }
        processGroup = pid
        writeEnd = Mutex(fds[1])
        // Reap the guard when it ends, so it leaves no zombie.
        startThread(name: "process-group.\(pid).wait") {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
    }

    /// Closes the pipe: the guard SIGKILLs every process still in the group, and itself. Safe to call more than once.
    public func release() {
        writeEnd.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    deinit { release() }
}
