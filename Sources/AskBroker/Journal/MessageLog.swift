import AskProtocol

/// The message log: the journal's fast path for copies that go straight to a live owner's in-memory queue.
///
/// Each commit writes the turn's such copies as **one** row of `message_log` (its entries back to back, keyed by
/// the first entry's `seq`) instead of one `message` row and one index entry per copy, and the `seq`s of log
/// entries that left the log since the last commit (acknowledged, dropped past their deadline, or moved to the
/// `message` table) as one row of `message_log_done`. A log row is deleted once every entry in it is done; a done
/// row once every log row its `seq`s could belong to is gone. Entries that stay live long (a slow owner) are moved
/// to the `message` table after ``MessageLogIndex/maxSegments`` newer rows, so the log stays short. At restart the
/// broker folds the log into the `message` table (``Journal/foldMessageLog()``), and everything after that reads
/// the table as before.
///
/// Entry layout (integers little-endian):
///
/// | size | field |
/// |---|---|
/// | 8 | seq |
/// | 8 | created, ms since 1970 |
/// | 8 | expires, ms since 1970, or `Int64.min` for none |
/// | 16 | message id |
/// | 1 | flags: bit 0, a subject follows; bit 1, a trace context follows (entries written before schema 7 have 0 or 1) |
/// | 16 | subject, if bit 0 |
/// | 25 | trace context (docs/protocol.md §5.5), if bit 1 |
/// | 2 + n | from |
/// | 2 + n | to |
/// | 2 + n | kind |
/// | 4 + n | body |
enum MessageLogCodec {
    static func append(_ m: StoredMessage, to out: inout [UInt8]) {
        put(m.seq, &out)
        put(Journal.milliseconds(m.createdAt), &out)
        put(m.expiresAt.map(Journal.milliseconds) ?? Int64.min, &out)
        put(m.id, &out)
        out.append((m.subject == nil ? 0 : 1) | (m.trace == nil ? 0 : 2))
        if let subject = m.subject { put(subject, &out) }
        m.trace?.append(to: &out)
        putText(m.from, &out)
        putText(m.to, &out)
        putText(m.kind, &out)
        put(UInt32(m.body.count), &out)
        out.append(contentsOf: m.body)
    }

    /// Reads every entry of one log row, in order.
    /// - Throws: `JournalError(.badRow)` when the bytes are not entries laid out as above.
    static func decode(_ bytes: UnsafeRawBufferPointer, _ each: (StoredMessage) throws -> Void) throws {
        var reader = Reader(bytes: bytes)
        while !reader.atEnd {
            let seq = try reader.int64()
            let created = try reader.int64()
            let expires = try reader.int64()
            let id = try reader.id()
            let flags = try reader.byte()
            guard flags & ~3 == 0 else {
                throw JournalError(.badRow, "message_log entry \(seq) has flags \(flags)")
            }
            let subject = flags & 1 != 0 ? try reader.id() : nil
            var trace: TraceContext?
            if flags & 2 != 0 {
                let bytes = try reader.bytes(count: TraceContext.size)
                guard let context = TraceContext(binary: bytes) else {
                    throw JournalError(.badRow, "message_log entry \(seq) has an all-zero trace context")
                }
                trace = context
            }
            let from = try reader.text()
            let to = try reader.text()
            let kind = try reader.text()
            let body = try reader.bytes(count: Int(try reader.uint32()))
            try each(
                StoredMessage(
                    seq: seq,
                    id: id,
                    from: from,
                    to: to,
                    kind: kind,
                    subject: subject,
                    body: body,
                    createdAt: Journal.date(created),
                    expiresAt: expires == Int64.min ? nil : Journal.date(expires),
                    trace: trace
                )
            )
        }
    }

    /// `seq`s back to back, 8 bytes each (a `message_log_done` row).
    static func encodeSeqs(_ seqs: [Int64]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(seqs.count * 8)
        for seq in seqs { put(seq, &out) }
        return out
    }

    static func decodeSeqs(_ bytes: UnsafeRawBufferPointer, _ body: (Int64) -> Void) throws {
        guard bytes.count % 8 == 0 else {
            throw JournalError(.badRow, "message_log_done row of \(bytes.count) bytes is not a list of 8-byte seqs")
        }
        var reader = Reader(bytes: bytes)
        while !reader.atEnd { body(try reader.int64()) }
    }

    @inline(__always)
    private static func put<T: FixedWidthInteger>(_ value: T, _ out: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    @inline(__always)
    private static func put(_ id: MessageID, _ out: inout [UInt8]) {
        withUnsafeBytes(of: (id.high.bigEndian, id.low.bigEndian)) { out.append(contentsOf: $0) }
    }

    @inline(__always)
    private static func putText(_ text: String, _ out: inout [UInt8]) {
        put(UInt16(truncatingIfNeeded: text.utf8.count), &out)
        out.append(contentsOf: text.utf8)
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        var atEnd: Bool { offset == bytes.count }

        mutating func take(_ count: Int) throws -> UnsafeRawBufferPointer {
            guard count <= bytes.count - offset else {
                throw JournalError(
                    .badRow,
                    "message_log row ends inside an entry (\(count) bytes wanted at offset \(offset) of \(bytes.count))"
                )
            }
            defer { offset += count }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
        }

        mutating func byte() throws -> UInt8 { try take(1)[0] }

        mutating func int64() throws -> Int64 { Int64(littleEndian: try take(8).loadUnaligned(as: Int64.self)) }

        mutating func uint32() throws -> UInt32 { UInt32(littleEndian: try take(4).loadUnaligned(as: UInt32.self)) }

        mutating func id() throws -> MessageID { MessageID(bytes: try take(16))! }

        /// A 2-byte length, then that many UTF-8 bytes.
        mutating func text() throws -> String {
            let count = Int(UInt16(littleEndian: try take(2).loadUnaligned(as: UInt16.self)))
            return String(decoding: try take(count), as: UTF8.self)
        }

        mutating func bytes(count: Int) throws -> [UInt8] { Array(try take(count)) }
    }
}

/// Which committed log rows hold which live entries (the broker's connection only; rebuilt empty at every open,
/// since the broker folds the log at restart). Rows leave it only after the commit that deleted or moved them
/// succeeded, and entries marked done in a transaction that rolls back are marked live again (``unmark(_:)``), so
/// it always matches what the file holds.
struct MessageLogIndex {
    struct Segment {
        /// The row's key: its first entry's `seq`.
        let firstSeq: Int64
        /// The entries' `seq`s, ascending.
        let seqs: [Int64]
        var done: [Bool]
        var live: Int
    }

    /// Live log rows beyond this many move the oldest row's live entries to the `message` table, one row per
    /// commit.
    static let maxSegments = 256

    /// Ascending by `firstSeq`; emptied rows are dropped from the front after the commit that deleted them.
    private(set) var segments: [Segment] = []

    /// The index of the oldest row that still has a live entry (emptied rows may lie before it).
    private var firstLive: Int? { segments.firstIndex { $0.live > 0 } }

    /// The oldest row with a live entry and its live entries' seqs, when more than ``maxSegments`` rows from it on
    /// are kept.
    var compactionTarget: (firstSeq: Int64, live: Set<Int64>)? {
        guard let first = firstLive, segments.count - first > Self.maxSegments else { return nil }
        let segment = segments[first]
        return (segment.firstSeq, Set(zip(segment.seqs, segment.done).lazy.filter { !$0.1 }.map(\.0)))
    }

    /// The first seq of the oldest row with a live entry, leaving out `excluding` (a row being moved).
    func oldestLiveFirstSeq(excluding: Int64? = nil) -> Int64? {
        segments.first { $0.live > 0 && $0.firstSeq != excluding }?.firstSeq
    }

    mutating func append(firstSeq: Int64, seqs: [Int64]) {
        let done = Array(repeating: false, count: seqs.count)
        segments.append(Segment(firstSeq: firstSeq, seqs: seqs, done: done, live: seqs.count))
    }

    enum Marked: Equatable {
        /// Not a live entry of a committed log row (it is in the `message` table, or was done already).
        case notLive
        case done
        /// Done, and it was the last live entry of the row keyed `firstSeq`.
        case emptied(firstSeq: Int64)
    }

    /// Marks a live entry done.
    mutating func markDone(_ seq: Int64) -> Marked {
        guard let (s, e) = position(of: seq), !segments[s].done[e] else { return .notLive }
        segments[s].done[e] = true
        segments[s].live -= 1
        return segments[s].live == 0 ? .emptied(firstSeq: segments[s].firstSeq) : .done
    }

    /// Marks an entry live again (its transaction rolled back).
    mutating func unmark(_ seq: Int64) {
        guard let (s, e) = position(of: seq), segments[s].done[e] else { return }
        segments[s].done[e] = false
        segments[s].live += 1
    }

    /// The row and entry index of `seq`, when a row in the index holds it.
    private func position(of seq: Int64) -> (Int, Int)? {
        var low = 0
        var high = segments.count - 1
        var found: Int?
        while low <= high {
            let mid = (low + high) / 2
            if segments[mid].firstSeq <= seq {
                found = mid
                low = mid + 1
            } else {
                high = mid - 1
            }
        }
        guard let s = found else { return nil }
        var lowEntry = 0
        var highEntry = segments[s].seqs.count - 1
        while lowEntry <= highEntry {
            let mid = (lowEntry + highEntry) / 2
            let value = segments[s].seqs[mid]
            if value == seq { return (s, mid) }
            if value < seq { lowEntry = mid + 1 } else { highEntry = mid - 1 }
        }
        return nil
    }

    /// After a commit: forgets the row moved to the table (if any) and the emptied rows at the front.
    mutating func committed(moved: Int64?) {
        if let moved { segments.removeAll { $0.firstSeq == moved } }
        var count = 0
        while count < segments.count, segments[count].live == 0 { count += 1 }
        if count > 0 { segments.removeFirst(count) }
    }
}
