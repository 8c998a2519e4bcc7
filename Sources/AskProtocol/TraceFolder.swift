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

    /// Processes in lane order: children (and an `AskRelayCluster`'s ask centers, `askcenter-N`), brokers, limits,
    /// parents (and its guardian centers, `guardiancenter-N`), others, simulate; by name within each.
    public var orderedProcesses: [String] { Self.laneOrder(Array(processes.keys)) }

    static func laneOrder(_ names: [String]) -> [String] {
        func rank(_ name: String) -> Int {
            if name.hasPrefix("child") || name.hasPrefix("askcenter") { return 0 }
            if isBroker(name) { return 1 }
            if name.hasPrefix("limits") { return 2 }
            if name.hasPrefix("parent") || name.hasPrefix("guardiancenter") { return 3 }
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

    /// The questions (upper case) with a line within `from...to` (µs), in the order of their first line.
    public func questions(from: Int64, to: Int64) -> [String] {
        questions.filter { question in
            flow(question).contains { $0.line.atMicroseconds >= from && $0.line.atMicroseconds <= to }
        }
    }

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
