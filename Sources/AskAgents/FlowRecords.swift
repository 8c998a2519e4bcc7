import AskProtocol
import Foundation
import SQLite

/// How one ask ended, as a child saw it. The simulation's report and invariant checker read these.
public enum FlowOutcome: String, Codable, Sendable, CaseIterable {
    /// A guardian approved; the response reached the app.
    case approved
    /// A guardian denied; the response reached the app.
    case denied
    /// The child cancelled the send sheet; no response may ever arrive.
    case cancelled
    /// Sent, but no guardian answered before the question expired.
    case expired
    /// Presented but never sent nor cancelled before the pending window closed.
    case abandoned
    /// The handle was already known to the system: no question was asked.
    case knownHandle = "known-handle"
    /// `ask` threw an `AskError` (see `askError`).
    case refused
}

/// One JSON line a child worker writes per finished flow (`--records FILE`, JSON Lines, appended).
public struct ChildFlowRecord: Codable, Sendable, Hashable {
    /// The question's id; `nil` for `known-handle` (nothing was asked).
    public var question: UUID?
    public var child: String
    public var family: String
    /// `communication` or `significantAppUpdate`.
    public var topic: String
    public var outcome: FlowOutcome
    /// For `refused`: the AskError case (`communicationLimitsNotEnabled`, `contactSyncNotSetup`,
    /// `invalidQuestion`, `notAvailable`, `systemError`, `unknown`).
    public var askError: String?
    public var choiceID: String?
    public var askedAt: Date?
    public var presentedAt: Date?
    public var sentAt: Date?
    public var respondedAt: Date?
    public var closedAt: Date
    /// The question's expiry (its `expirationDate`, or the pending window's end).
    public var expiresAt: Date?
    /// How many times a response for this question reached the app (the invariant is at most 1).
    public var responsesSurfaced: Int

    public init(
        question: UUID?,
        child: String,
        family: String,
        topic: String,
        outcome: FlowOutcome,
        askError: String? = nil,
        choiceID: String? = nil,
        askedAt: Date? = nil,
        presentedAt: Date? = nil,
        sentAt: Date? = nil,
        respondedAt: Date? = nil,
        closedAt: Date,
        expiresAt: Date? = nil,
        responsesSurfaced: Int = 0
    ) {
        self.question = question
        self.child = child
        self.family = family
        self.topic = topic
        self.outcome = outcome
        self.askError = askError
        self.choiceID = choiceID
        self.askedAt = askedAt
        self.presentedAt = presentedAt
        self.sentAt = sentAt
        self.respondedAt = respondedAt
        self.closedAt = closedAt
        self.expiresAt = expiresAt
        self.responsesSurfaced = responsesSurfaced
    }
}

/// One JSON line a parent worker writes per answer it tried to give (`--records FILE`).
public struct GuardianAnswerRecord: Codable, Sendable, Hashable {
    public var question: UUID
    public var guardian: String
    public var family: String
    public var choiceID: String
    /// When the question reached the guardian.
    public var receivedAt: Date
    public var answeredAt: Date
    /// `accepted`, or the broker's refusal code (`already-closed`, `expired`, ...).
    public var result: String
    /// The question's expiry as the guardian saw it.
    public var expiresAt: Date?

    public init(
        question: UUID,
        guardian: String,
        family: String,
        choiceID: String,
        receivedAt: Date,
        answeredAt: Date,
        result: String,
        expiresAt: Date?
    ) {
        self.question = question
        self.guardian = guardian
        self.family = family
        self.choiceID = choiceID
        self.receivedAt = receivedAt
        self.answeredAt = answeredAt
        self.result = result
        self.expiresAt = expiresAt
    }
}

/// A records file that cannot be opened, in one sentence: the path, what is wrong, what to do.
public struct RecordsFileError: Error, Sendable, CustomStringConvertible {
    public let path: String
    public let description: String

    init(path: String, errno code: Int32) {
        self.path = path
        let folder = OwnerLock.parentFolder(of: path)
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory) {
            description = "records file \(path): the folder \(folder) does not exist; create it or give another path"
        } else if !isDirectory.boolValue {
            description = "records file \(path): \(folder) is a file, not a folder; give a path in a folder"
        } else if code == EISDIR {
            description = "records file \(path) is a folder; give a file path (JSON lines are appended to it)"
        } else {
            description =
                "records file \(path) cannot be opened for appending (\(String(cString: strerror(code)))); "
                + "check its permissions or give another path"
        }
    }
}

/// Appends JSON lines to a file; one writer per file, flushed per line so a killed process loses at most one line.
public final class JSONLinesWriter {
    private let handle: FileHandle?

    /// Opens `path` for appending (creating it); `nil` path writes nothing.
    public init(path: String?) throws {
        guard let path else {
            handle = nil
            return
        }
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw RecordsFileError(path: path, errno: errno) }
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    public func write<T: Encodable>(_ value: T) {
        guard let handle, var line = try? RecordJSON.encode(value) else { return }
        line.append(0x0A)
        handle.write(Data(line))
    }

    /// Reads every line of a JSON Lines file; unreadable lines are skipped and counted.
    public static func read<T: Decodable>(_ type: T.Type, path: String) -> (values: [T], unreadable: Int) {
        guard let data = FileManager.default.contents(atPath: path) else { return ([], 0) }
        var values: [T] = []
        var unreadable = 0
        for line in data.split(separator: 0x0A) where !line.isEmpty {
            if let value = try? RecordJSON.decode(T.self, from: line) {
                values.append(value)
            } else {
                unreadable += 1
            }
        }
        return (values, unreadable)
    }
}

/// The JSON of records files: WireJSON's dialect (sorted keys, RFC 3339 UTC dates) with dates kept to the
/// microsecond (`2026-11-29T13:15:06.123456Z`), so the latencies a report computes from two records are not
/// rounded to whole milliseconds. Reads dates with 0 to 9 fractional digits.
public enum RecordJSON {
    private static let encoder = WireJSON.makeEncoder(dates: format)
    private static let decoder = WireJSON.makeDecoder(dates: parse, example: "2026-11-29T13:15:06.123456Z")

    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] { Array(try encoder.encode(value)) }

    public static func decode<T: Decodable>(_ type: T.Type = T.self, from bytes: some Collection<UInt8>) throws -> T {
        try decoder.decode(T.self, from: (bytes as? Data) ?? Data(bytes))
    }

    /// `YYYY-MM-DDTHH:MM:SS.ssssssZ`, to the microsecond.
    public static func format(_ date: Date) -> String? {
        guard let millisecondText = WireDate.format(date), let milliseconds = date.wireMilliseconds else { return nil }
        // The microseconds past the millisecond WireDate wrote (0...999; a canonical date has none).
        let rest = date.timeIntervalSince(Date(wireMilliseconds: milliseconds))
        // To the nearest microsecond: a Date near today holds only ~0.1 µs, so truncating could lose one.
        let extra = min(999, max(0, Int((rest * 1_000_000).rounded())))
        let digits = String(extra + 1_000).dropFirst()  // three digits, zero-padded
        return String(millisecondText.dropLast()) + digits + "Z"
    }

    /// A date written by ``format(_:)`` (or any RFC 3339 timestamp ``WireDate/parse(_:)`` reads), keeping the
    /// fraction's 4th to 6th digits that WireDate drops.
    public static func parse(_ text: String) -> Date? {
        guard let date = WireDate.parse(text) else { return nil }
        guard let dot = text.firstIndex(of: ".") else { return date }
        let fraction = text[text.index(after: dot)...].prefix { $0.isASCII && $0.isNumber }
        guard fraction.count > 3 else { return date }
        let micro = (fraction.dropFirst(3).prefix(3) + String(repeating: "0", count: max(0, 6 - fraction.count)))
        guard let extra = Double(micro) else { return date }
        return date.addingTimeInterval(extra / 1_000_000)
    }
}
