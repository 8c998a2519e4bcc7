import AskBasics
import Dispatch
import Foundation
import SQLite
import Synchronization

/// Copies the journal's WAL into the database file on a thread of its own, so the broker's loop never waits for a
/// checkpoint (copying thousands of pages and an fsync, which SQLite otherwise runs inside the commit that crosses
/// `wal_autocheckpoint`).
///
/// It holds its own connection to the journal file and runs a PASSIVE checkpoint every ``interval``: it copies the
/// frames no reader needs and never blocks the writer; with nothing to copy a pass costs a look at the WAL index.
///
/// A WAL only starts over from its beginning when a checkpoint has copied every frame before the next write, which
/// PASSIVE passes alone never achieve while the broker writes every few milliseconds: the file would grow without
/// end, and a restart would read all of it. So once the WAL holds `restartFrames` frames, a pass also tries a
/// RESTART checkpoint without waiting (busy timeout 0): it takes the write lock only between two of the broker's
/// turns, copies the few frames the passive passes left and syncs, so the broker's next write starts the WAL over
/// from its beginning (the file keeps its size: truncating it stalled the writer for ~100 ms); mid-turn it gives up
/// until the next pass. The broker's next turn may wait for that short copy; the threshold is large (256 MiB) so
/// that happens rarely.
final class JournalCheckpointer: Sendable {
    static let interval: DispatchTimeInterval = .milliseconds(100)
    /// 256 MiB of 4 KiB pages.
    static let defaultRestartFrames = 65_536
    let restartFrames: Int

    private let wake = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    /// `checkpointNow()` calls waiting for a pass that starts after them.
    private let requested = Atomic<Int>(0)
    private let passDone = DispatchSemaphore(value: 0)
    /// The last pass's error.
    private let lastError = Mutex<String?>(nil)

    /// Opens a second connection to `path` on a new thread and starts checkpointing.
    init(path: String, busyTimeoutMilliseconds: Int64, restartFrames: Int = JournalCheckpointer.defaultRestartFrames) {
        self.restartFrames = restartFrames
        startThread(name: "journal-checkpoint") { [self] in
            self.run(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            self.finished.signal()
        }
    }

    /// Runs one checkpoint pass that starts after this call, and waits for it (tests, shutdown).
    /// - Returns: the error of that pass, if it failed.
    @discardableResult
    func checkpointNow() -> String? {
        requested.add(1, ordering: .sequentiallyConsistent)
        wake.signal()
        passDone.wait()
        return lastError.withLock { $0 }
    }

    /// Stops the thread after its current pass and waits for it.
    func stop() {
        guard !stopped.exchange(true, ordering: .sequentiallyConsistent) else { return }
        wake.signal()
        finished.wait()
    }

    /// A RESTART checkpoint that never waits for the writer: `SQLITE_BUSY` means it is mid-turn; try next pass.
    private func restart(_ db: Database, restoring busyTimeoutMilliseconds: Int64) throws {
        try db.pragma("busy_timeout", .integer(0))
        defer { _ = try? db.pragma("busy_timeout", .integer(busyTimeoutMilliseconds)) }
        do {
            try db.checkpoint(.restart)
        } catch let error as SQLiteError where error.isBusy {
            return
        }
    }

    private func run(path: String, busyTimeoutMilliseconds: Int64) {
        var db: Database?
        var openError: String?
        do {
            let connection = try Database(path: path)
            try connection.pragma("busy_timeout", .integer(busyTimeoutMilliseconds))
            // Reading the mode opens the file, so this connection sees the WAL (a fresh one checkpoints nothing).
            _ = try connection.pragma("journal_mode")
            db = connection
        } catch {
            openError = "\(error)"
        }
        while true {
            _ = wake.wait(timeout: .now() + Self.interval)
            // Requests made before this point are answered by this pass; later ones by the next.
            let waiting = requested.exchange(0, ordering: .sequentiallyConsistent)
            let stopping = stopped.load(ordering: .sequentiallyConsistent)
            var failure = openError
            if let db, !stopping || waiting > 0 {
                do {
                    if try db.checkpoint(.passive).walFrames >= restartFrames {
                        try restart(db, restoring: busyTimeoutMilliseconds)
                    }
                } catch {
                    failure = "\(error)"
                }
            }
            lastError.withLock { $0 = failure }
            for _ in 0..<waiting { passDone.signal() }
            if stopping { break }
        }
        // Anyone who asked after the last pass is answered too, so no caller waits forever.
        // (`db` closes here, before the writer's connection: the last connection to close checkpoints what is left.)
        for _ in 0..<requested.exchange(0, ordering: .sequentiallyConsistent) { passDone.signal() }
    }
}
