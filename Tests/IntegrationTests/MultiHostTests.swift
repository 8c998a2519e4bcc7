import AskCLI
import AskAgents
import AskBroker
import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// Beyond one machine, on one machine: a broker host, a guardian host and a child host, each its own network
/// namespace joined by a bridge (``NetworkLab``), the real broker and workers talking real TCP between them through
/// `askrelay simulate --endpoint tcp://10.203.0.1:5555 --wrap-<role> 'ip netns exec <host>'`. The guardian host's
/// link goes down for 4 s (longer than the 1.5 s heartbeat liveness, and than the 2 s question expiry) and comes
/// back; the invariants must hold and the partition must show in the outcomes.
@Suite(
    "multi-host: broker, guardian and child hosts in network namespaces, link partitions",
    .timeLimit(.minutes(3)),
    .serialized
)
struct MultiHostTests {
    /// Shown when the test is skipped: needs root and a working `ip netns add`, and what failed here.
    static let notPossible = Comment(
        rawValue: "needs root and a working `ip netns add`: \(NetworkLab.unavailableReason ?? "available")"
    )

    /// 24 h expiry / 43 200 = 2 s; 48 h pending window = 4 s. The children play about 12 s; the partition of
    /// `host` is 3 s to 7 s after they start, so questions sent in it expire there and later ones are answered.
    static func scenario(_ lab: NetworkLab, partition host: String, think: String) throws -> String {
        let down = lab.linkCommand(host, up: false)
        let up = lab.linkCommand(host, up: true)
        let json = { (command: [String]) in
            String(decoding: try JSONSerialization.data(withJSONObject: command), as: UTF8.self)
        }
        return """
            {"seed": 9, "families": 20, "flowsPerChild": 8, "childThink": "1200ms", "grace": "500ms",
             "timeScale": 43200, "abandonProbability": 0, "cancelProbability": 0.1, "invalidRatio": 0.02,
             "guardians": {"approveProbability": 0.6, "neverAnswerRatio": 0, "think": "\(think)"},
             "duration": "60s",
             "faults": [{"at": "3s", "action": "run", "command": \(try json(down)),
                         "undo": \(try json(up)), "undoAfter": "4s"}]}
            """
    }

    /// What one run across the hosts left behind.
    struct Played {
        var exit: ProcessExitStatus
        /// askrelay's stderr.
        var log: String
        var invariantsOK: Bool?
        var violations: Any
        var linkUpAfter: Bool
        var partition: (down: Date, up: Date)
        var children: [ChildFlowRecord]
        var unreadable: Int
        var ledger: [UUID: QuestionRecord]
        var report: String

        func processLog(_ name: String) -> String {
            String(
                decoding: FileManager.default.contents(atPath: report + "/logs/\(name).log") ?? Data(),
                as: UTF8.self
            )
        }
    }

    /// Builds the three hosts, runs `askrelay simulate` across them with `host`'s link down from 3 s to 7 s, removes
    /// the hosts (checking none is left) and reads what the run wrote into `directory`.
    func play(partition host: String, think: String, in directory: TempDirectory) throws -> Played {
        NetworkLab.removeStale()
        let lab = try NetworkLab(hosts: ["broker", "guardian", "child"])
        let namespaces = ["sw", "broker", "guardian", "child"].map(lab.namespace)
        defer {
            lab.destroy()
            let left = Set(NetworkLab.namespaces()).intersection(namespaces)
            #expect(left.isEmpty, "namespaces left behind: \(left.sorted())")
        }
        #expect(Set(namespaces).isSubset(of: NetworkLab.namespaces()))

        let scenarioPath = directory.path + "/scenario-in.json"
        try Data(try Self.scenario(lab, partition: host, think: think).utf8).write(
            to: URL(fileURLWithPath: scenarioPath)
        )
        let report = directory.path + "/report"
        let logPath = directory.path + "/askrelay.log"
        let wrap = { (host: String) in lab.exec(host).joined(separator: " ") }
        let askrelay = try RelayProcess(
            "askrelay",
            [
                "simulate", "--scenario", scenarioPath, "--report-dir", report, "--quiet",
                // Not loopback and no CURVE yet: the broker must be told it may serve insecurely.
                "--endpoint", "tcp://\(lab.address("broker")):5555", "--insecure",
                "--wrap-broker", wrap("broker"), "--wrap-limits", wrap("broker"),
                "--wrap-parent", wrap("guardian"), "--wrap-child", wrap("child"),
            ],
            logPath: logPath
        )
        // askrelay itself is stopped when released, on failure too; the workers it started live in the lab's
        // namespaces and are killed by lab.destroy().
        let exit = try askrelay.wait(timeout: .seconds(150))
        let log = String(decoding: FileManager.default.contents(atPath: logPath) ?? Data(), as: UTF8.self)
        let data = try #require(
            FileManager.default.contents(atPath: report + "/report.json"),
            "no report.json; askrelay \(exit); stderr:\n\(log.suffix(3000))"
        )
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let invariants = try #require(json["invariants"] as? [String: Any])

        var children: [ChildFlowRecord] = []
        var unreadable = 0
        for index in 1...2 {
            let read = JSONLinesWriter.read(ChildFlowRecord.self, path: report + "/records/child-\(index).jsonl")
            unreadable += read.unreadable
            children += read.values
        }
        let ledger = try Journal(directory: report + "/broker-data", durability: .batch).loadQuestions(openOnly: false)
        return Played(
            exit: exit,
            log: log,
            invariantsOK: invariants["ok"] as? Bool,
            violations: invariants["violations"] ?? "?",
            linkUpAfter: lab.isLinkUp(host),
            partition: try Self.partition(in: log),
            children: children,
            unreadable: unreadable,
            ledger: Dictionary(uniqueKeysWithValues: ledger.map { ($0.id.uuid, $0) }),
            report: report
        )
    }

    @Test(
        "a seeded simulation across three hosts survives a partition of the guardian host",
        .enabled(if: NetworkLab.unavailableReason == nil, notPossible)
    )
    func partitionedGuardianHost() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try play(partition: "guardian", think: "fixed:50ms", in: directory)
        #expect(run.invariantsOK == true, "violations: \(run.violations)")
        #expect(run.exit == .exited(0), "askrelay \(run.exit); stderr:\n\(run.log.suffix(3000))")
        #expect(run.linkUpAfter, "the partition was not undone")

        // Every worker ran in its host: the broker logged sessions from guardians that went silent, and the
        // parents reconnected over TCP once the link came back.
        #expect(run.processLog("broker").contains("missed 3 heartbeats"), "the broker never lost the guardians")
        let parentLog = run.processLog("parent-1")
        #expect(parentLog.contains("reconnecting"), "parent-1 never lost the broker")
        let sessions = parentLog.split(separator: "\n").filter { $0.hasSuffix(" registered") }.count
        #expect(sessions >= 2, "parent-1 registered \(sessions) time(s): it did not come back after the partition")

        let partition = run.partition
        // Log times are taken just before each command; 4 s apart give or take the millisecond rounding.
        #expect(partition.up.timeIntervalSince(partition.down) >= 3.9)
        let children = run.children
        #expect(run.unreadable == 0)
        #expect(children.count == 20 * 2 * 8, "every flow of every child is recorded")
        let ledgerByID = run.ledger

        // Every question whose send a child saw acknowledged ended exactly once, in the child and in the ledger.
        let sent = children.filter { $0.sentAt != nil }
        let recordsPerQuestion = Dictionary(grouping: children.compactMap(\.question)) { $0 }.mapValues(\.count)
        for record in sent {
            let id = try #require(record.question)
            #expect(recordsPerQuestion[id] == 1, "\(id) has \(recordsPerQuestion[id] ?? 0) child records")
            let entry = ledgerByID[id]
            #expect(entry?.state.isClosed == true, "\(id): ledger \(entry.map { "\($0.state)" } ?? "missing")")
        }

        // Sent after the link went down and expiring before it came back: no guardian could see it, so it expired.
        let margin: TimeInterval = 0.2
        let stranded = sent.filter {
            $0.sentAt! >= partition.down.addingTimeInterval(margin) && ($0.expiresAt ?? .distantFuture) <= partition.up
        }
        #expect(stranded.count >= 5, "too few questions expired inside the partition: \(stranded.count)")
        for record in stranded {
            #expect(
                record.outcome == .expired,
                "\(record.question!): \(record.outcome) but it expired in the partition"
            )
            #expect(ledgerByID[record.question!]?.state == .expired)
        }

        // Expiring well after the link came back (heartbeat liveness 1.5 s, the reconnect, slack for a busy
        // machine): answered.
        let reconnect: TimeInterval = 3
        let outlived = sent.filter { ($0.expiresAt ?? .distantPast) > partition.up.addingTimeInterval(reconnect) }
        #expect(outlived.count >= 20, "too few questions after the partition: \(outlived.count)")
        for record in outlived {
            #expect(
                record.outcome == .approved || record.outcome == .denied,
                "\(record.question!): \(record.outcome) though it outlived the partition"
            )
            #expect(ledgerByID[record.question!]?.state == .answered)
        }
        #expect(
            sent.contains { ($0.respondedAt ?? .distantPast) > partition.up },
            "no response reached a child after the partition"
        )
    }

    /// The child host goes offline while guardians think (300 ms to 1.5 s), so answers accepted before the expiry
    /// wait in the broker for a child that is unreachable. This test found that askrelay-child gave up on a sent
    /// question at its expiry plus `grace` even while disconnected and recorded `expired`, though the ledger said
    /// `answered` (`ends-exactly-once` failed). Fixed: a child calls a sent question expired only once the broker
    /// has been heard on a live session after the deadline, so it receives the answer the broker accepted in time.
    @Test(
        "a partition of the child host: the broker keeps what it accepted and the children come back",
        .enabled(if: NetworkLab.unavailableReason == nil, notPossible)
    )
    func partitionedChildHost() throws {
        let directory = TempDirectory()
        defer { directory.cleanup() }
        let run = try play(partition: "child", think: "uniform:300ms-1500ms", in: directory)
        #expect(run.invariantsOK == true, "violations: \(run.violations)")
        #expect(run.exit == .exited(0))
        #expect(run.linkUpAfter, "the partition was not undone")
        #expect(run.processLog("broker").contains("missed 3 heartbeats"), "the broker never lost the children")
        #expect(run.processLog("child-1").contains("registered again"), "child-1 did not come back")
        #expect(run.unreadable == 0)
        // Every flow is recorded (a late response adds an anomaly record for a question already recorded).
        #expect(run.children.count >= 20 * 2 * 8)
        for record in run.children where record.sentAt != nil {
            let entry = run.ledger[record.question!]
            #expect(
                entry?.state.isClosed == true,
                "\(record.question!): ledger \(entry.map { "\($0.state)" } ?? "missing")"
            )
        }
        #expect(
            run.children.contains { ($0.respondedAt ?? .distantPast) > run.partition.up },
            "no response reached a child after the partition"
        )
    }

    /// When askrelay took the link down (`fault: run`) and up again (`fault: undo`), from its log's timestamps.
    static func partition(in log: String) throws -> (down: Date, up: Date) {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        func time(_ marker: String) throws -> Date {
            let line = try #require(log.split(separator: "\n").first { $0.hasSuffix(marker) }, "no '\(marker)' line")
            return try #require(formatter.date(from: String(line.prefix { $0 != " " })), "bad time in: \(line)")
        }
        return (try time("fault: run"), try time("fault: undo"))
    }
}
