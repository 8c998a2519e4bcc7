import AskProtocol
import Foundation

/// One trace line with the process whose file it came from (`broker`, `broker-b0`, `limits`, `parent-1`,
/// `child-1`, `simulate`).
public struct TraceEntry: Sendable, Equatable {
    public var process: String
    public var line: TraceLine

    public init(process: String, line: TraceLine) {
        self.process = process
        self.line = line
    }

    /// Whether the process is a broker (`broker`, or a shard's `broker-b0`, `broker-b1`, ...).
    public var isBroker: Bool { TraceFolder.isBroker(process) }
}

/// One arrow of a flow: a message leaving one process and arriving at another (one hop of one message id).
public struct TraceHop: Sendable, Equatable {
    public var from: TraceEntry
    public var to: TraceEntry

    /// The arrow's label: the message kind, and the code of a refusal.
    public var label: String {
        let kind = from.line.kind ?? to.line.kind ?? "?"
        let code = from.line.code ?? to.line.code
        return to.line.event == TraceEvent.refused.rawValue ? "\(kind) refused \(code ?? "")" : kind
    }
}

/// The trace files of a run (`<folder>/trace/<process>.jsonl`, docs/tracing.md), read: every readable line, by
/// process. A line that does not decode (the torn last line of a killed process) is skipped and counted; an event
/// name this build does not know is kept as read.
public struct TraceFolder: Sendable {
    /// Lines by process, each process's in file order.
    public let processes: [String: [TraceLine]]
    /// Lines skipped as unreadable, by process.
    public let unreadable: [String: Int]
    /// The folder the files were read from.
    public let path: String
    /// Every line of every process, in time order (ties: lane order, then file order).
    public let entries: [TraceEntry]
    /// The question ids (upper case) named by any line, in the order of their first line.
    public let questions: [String]
    private let byQuestion: [String: [TraceEntry]]
    /// The faults simulate played (its `fault` lines), in time order.
    public let faults: [TraceEntry]

    /// The trace folder of `folder`: `folder/trace` when it exists, else `folder` itself when it holds `.jsonl`
    /// files; `nil` when neither.
    public static func locate(_ folder: String) -> String? {
        var isDirectory: ObjCBool = false
        let inner = (folder as NSString).appendingPathComponent("trace")
        if FileManager.default.fileExists(atPath: inner, isDirectory: &isDirectory), isDirectory.boolValue {
            return inner
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.contains(where: { $0.hasSuffix(".jsonl") }) ? folder : nil
    }

    /// Reads every `*.jsonl` file of the trace folder `path` (see ``locate(_:)``).
    /// - Throws: when the folder cannot be listed or a file cannot be read.
    public init(path: String) throws {
        var processes: [String: [TraceLine]] = [:]
        var unreadable: [String: Int] = [:]
        let names = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".jsonl") }.sorted()
        let decoder = JSONDecoder()
        for name in names {
            let process = String(name.dropLast(".jsonl".count))
            let file = (path as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: file) else {
                throw CocoaError(.fileReadUnknown, userInfo: [NSFilePathErrorKey: file])
            }
            var lines: [TraceLine] = []
            var skipped = 0
            for raw in data.split(separator: UInt8(ascii: "\n")) where !raw.allSatisfy({ $0 == 32 || $0 == 13 }) {
                if let line = try? decoder.decode(TraceLine.self, from: Data(raw)) {
                    lines.append(line)
                } else {
                    skipped += 1
                }
            }
            processes[process] = lines
            if skipped > 0 { unreadable[process] = skipped }
        }
        self.init(processes: processes, unreadable: unreadable, path: path)
    }

    /// Builds one from lines in memory (tests, and a caller that has them already).
    public init(processes: [String: [TraceLine]], unreadable: [String: Int] = [:], path: String = "") {
        self.processes = processes
        self.unreadable = unreadable
        self.path = path
        var all: [TraceEntry] = []
        for process in Self.laneOrder(Array(processes.keys)) {
            all += (processes[process] ?? []).map { TraceEntry(process: process, line: $0) }
        }
        entries = Self.sorted(all)
        var byQuestion: [String: [TraceEntry]] = [:]
        var questions: [String] = []
        for entry in entries {
            guard let question = entry.line.question?.uppercased() else { continue }
            if byQuestion[question] == nil { questions.append(question) }
            byQuestion[question, default: []].append(entry)
        }
        self.byQuestion = byQuestion
        self.questions = questions
        faults = entries.filter { $0.line.event == TraceEvent.fault.rawValue }
    }

    public static func isBroker(_ process: String) -> Bool { process == "broker" || process.hasPrefix("broker-") }

    /// Processes in lane order: children, brokers, limits, parents, others, simulate; by name within each.
    public var orderedProcesses: [String] { Self.laneOrder(Array(processes.keys)) }

    static func laneOrder(_ names: [String]) -> [String] {
        func rank(_ name: String) -> Int {
            if name.hasPrefix("child") { return 0 }
            if isBroker(name) { return 1 }
            if name.hasPrefix("limits") { return 2 }
            if name.hasPrefix("parent") { return 3 }
            if name == "simulate" { return 5 }
            return 4
        }
        return names.sorted { a, b in
            rank(a) != rank(b) ? rank(a) < rank(b) : a.compare(b, options: .numeric) == .orderedAscending
        }
    }

    static func sorted(_ entries: [TraceEntry]) -> [TraceEntry] {
        entries.enumerated().sorted { a, b in
            a.element.line.atMicroseconds != b.element.line.atMicroseconds
                ? a.element.line.atMicroseconds < b.element.line.atMicroseconds : a.offset < b.offset
        }.map(\.element)
    }

    /// The lines that name `question` (compared without case), in time order.
    public func flow(_ question: String) -> [TraceEntry] { byQuestion[question.uppercased()] ?? [] }

    /// The faults that played within `from...to` (µs).
    public func faults(from: Int64, to: Int64) -> [TraceEntry] {
        faults.filter { $0.line.atMicroseconds >= from && $0.line.atMicroseconds <= to }
    }

    /// The hops among `entries`: per message id, a client's `sent` joined to a broker's `received`, a broker's
    /// `delivered` to a client's `received`, a broker's `refused` to the client's `refused` (the n-th with the n-th
    /// in time order, so a redelivery is a hop of its own).
    public static func hops(_ entries: [TraceEntry]) -> [TraceHop] {
        var byID: [String: [TraceEntry]] = [:]
        var order: [String] = []
        for entry in sorted(entries) {
            guard let id = entry.line.id?.uppercased() else { continue }
            if byID[id] == nil { order.append(id) }
            byID[id, default: []].append(entry)
        }
        var hops: [TraceHop] = []
        for id in order {
            let lines = byID[id] ?? []
            func pick(_ event: TraceEvent, broker: Bool) -> [TraceEntry] {
                lines.filter { $0.line.event == event.rawValue && $0.isBroker == broker }
            }
            for (from, to) in zip(pick(.sent, broker: false), pick(.received, broker: true)) {
                hops.append(TraceHop(from: from, to: to))
            }
            for (from, to) in zip(pick(.delivered, broker: true), pick(.received, broker: false)) {
                hops.append(TraceHop(from: from, to: to))
            }
            for (from, to) in zip(pick(.refused, broker: true), pick(.refused, broker: false)) {
                hops.append(TraceHop(from: from, to: to))
            }
        }
        return hops.sorted { $0.from.line.atMicroseconds < $1.from.line.atMicroseconds }
    }
}

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
