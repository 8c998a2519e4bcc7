import AskProtocol
import Foundation

/// Merges a run's trace files into one `trace.json` in the Chrome trace-event format (the JSON object format),
/// which Perfetto (ui.perfetto.dev) and chrome://tracing open: a track per process, each line a 1 µs slice named
/// `event kind`, each hop a flow arrow (`s` at the sender's `sent` or the broker's `delivered`, `f` with `bp: e`
/// at the receiver's `received`), each fault a global instant and an instant on the track of the process it hit.
/// Times are µs since the first line.
public enum TraceMerge {
    public static let fileName = "trace.json"

    /// Writes `folder/trace.json` from `folder/trace/*.jsonl`. - Returns: its path, or `nil` when the folder has
    /// no trace/ folder. - Throws: when a file cannot be read or trace.json cannot be written.
    @discardableResult
    public static func write(folder: String) throws -> String? {
        let inner = (folder as NSString).appendingPathComponent("trace")
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: inner, isDirectory: &isDirectory), isDirectory.boolValue else {
            return nil
        }
        return try write(TraceFolder(path: inner), into: folder)
    }

    /// Writes `trace`'s merge as `folder/trace.json`. - Returns: its path.
    @discardableResult
    public static func write(_ trace: TraceFolder, into folder: String) throws -> String {
        let path = (folder as NSString).appendingPathComponent(fileName)
        try chromeJSON(trace).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The Chrome trace-event JSON of `trace`, written by hand: a run has tens of thousands of events, and
    /// JSONSerialization (bridging, sorting keys by locale) took most of a simulation's CPU to write them.
    public static func chromeJSON(_ trace: TraceFolder) throws -> Data {
        let processes = trace.orderedProcesses
        let pids = Dictionary(uniqueKeysWithValues: processes.enumerated().map { ($0.element, $0.offset + 1) })
        let entries = trace.entries
        let origin = entries.first?.line.atMicroseconds ?? 0
        var out = ChromeEvents()
        for (index, process) in processes.enumerated() {
            out.metadata("process_name", pid: index + 1, arg: ("name", .text(process)))
            out.metadata("process_sort_index", pid: index + 1, arg: ("sort_index", .number(Int64(index))))
            out.metadata("thread_name", pid: index + 1, arg: ("name", .text(process)))
        }
        for entry in entries {
            let line = entry.line
            let ts = line.atMicroseconds - origin
            let pid = pids[entry.process] ?? 0
            if line.event == TraceEvent.fault.rawValue {
                let name = "fault \(line.code ?? "?")" + (line.to.map { " \($0)" } ?? "")
                out.event(ph: "i", name: name, cat: "fault", ts: ts, pid: pid, extra: [("s", .text("g"))], args: line)
                // Also on the track of the process it hit, when it names one: seen where that process's lines stop.
                if let hit = line.to, hit != entry.process, let track = pids[hit] {
                    out.event(
                        ph: "i",
                        name: name,
                        cat: "fault",
                        ts: ts,
                        pid: track,
                        extra: [("s", .text("p"))],
                        args: line
                    )
                }
            } else {
                let name = [line.event, line.kind].compactMap { $0 }.joined(separator: " ")
                out.event(
                    ph: "X",
                    name: name,
                    cat: "message",
                    ts: ts,
                    pid: pid,
                    extra: [("dur", .number(1))],
                    args: line
                )
            }
        }
        for (number, hop) in TraceFolder.hops(entries).enumerated() {
            let id: (String, ChromeEvents.Value) = ("id", .number(Int64(number + 1)))
            out.event(
                ph: "s",
                name: hop.label,
                cat: "hop",
                ts: hop.from.line.atMicroseconds - origin,
                pid: pids[hop.from.process] ?? 0,
                extra: [id],
                args: nil
            )
            out.event(
                ph: "f",
                name: hop.label,
                cat: "hop",
                ts: hop.to.line.atMicroseconds - origin,
                pid: pids[hop.to.process] ?? 0,
                extra: [id, ("bp", .text("e"))],
                args: nil
            )
        }
        return out.finish(origin: origin, unreadable: trace.unreadable)
    }
}

/// The bytes of a Chrome trace-event JSON object, appended event by event.
struct ChromeEvents {
    enum Value {
        case text(String)
        case number(Int64)
    }

    private var bytes: [UInt8] = Array(#"{"displayTimeUnit":"ms","traceEvents":["#.utf8)
    private var first = true

    private mutating func open() {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "{"))
    }

    private mutating func field(_ key: String, _ value: Value, comma: Bool = true) {
        if comma { bytes.append(UInt8(ascii: ",")) }
        WireJSON.appendQuoted(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        switch value {
        case .text(let text): WireJSON.appendQuoted(text, to: &bytes)
        case .number(let number): bytes.append(contentsOf: String(number).utf8)
        }
    }

    mutating func metadata(_ name: String, pid: Int, arg: (String, Value)) {
        open()
        field("ph", .text("M"), comma: false)
        field("name", .text(name))
        field("pid", .number(Int64(pid)))
        field("tid", .number(1))
        bytes.append(contentsOf: #","args":{"#.utf8)
        field(arg.0, arg.1, comma: false)
        bytes.append(contentsOf: "}}".utf8)
    }

    /// An event; `args` (a trace line's kind, question, id, from, to, code) when given.
    mutating func event(
        ph: String,
        name: String,
        cat: String,
        ts: Int64,
        pid: Int,
        extra: [(String, Value)],
        args line: TraceLine?
    ) {
        open()
        field("ph", .text(ph), comma: false)
        field("name", .text(name))
        field("cat", .text(cat))
        field("ts", .number(ts))
        field("pid", .number(Int64(pid)))
        field("tid", .number(1))
        for (key, value) in extra { field(key, value) }
        if let line {
            bytes.append(contentsOf: #","args":{"#.utf8)
            var comma = false
            for (key, value) in [
                ("kind", line.kind), ("question", line.question), ("id", line.id), ("from", line.from),
                ("to", line.to), ("code", line.code),
            ] {
                guard let value else { continue }
                field(key, .text(value), comma: comma)
                comma = true
            }
            bytes.append(UInt8(ascii: "}"))
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// Closes the events and adds `otherData`.
    mutating func finish(origin: Int64, unreadable: [String: Int]) -> Data {
        bytes.append(contentsOf: #"],"otherData":{"#.utf8)
        field("clocks", .text("each process's own wall clock"), comma: false)
        field("origin_us", .number(origin))
        field("source", .text("askrelay trace files"))
        if !unreadable.isEmpty {
            bytes.append(contentsOf: #","unreadable_lines":{"#.utf8)
            var comma = false
            for (process, count) in unreadable.sorted(by: { $0.key < $1.key }) {
                field(process, .number(Int64(count)), comma: comma)
                comma = true
            }
            bytes.append(UInt8(ascii: "}"))
        }
        bytes.append(contentsOf: "}}".utf8)
        return Data(bytes)
    }
}
