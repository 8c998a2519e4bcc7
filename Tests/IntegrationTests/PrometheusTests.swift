import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The shipped Prometheus rules (deploy/prometheus) and Grafana dashboard (deploy/grafana) against the real tools and
/// the real processes: `promtool check` and `promtool test rules`; every metric and label they name served by a live
/// broker, limits, parent and child; and Debian's `prometheus` scraping those four, loading the rules, counting a
/// child's flows as the child reported them, and answering every dashboard query. `make test-deps` installs the
/// `prometheus` package (/usr/bin/prometheus, /usr/bin/promtool) and python3-yaml (to read the rules as JSON).
@Suite(
    "Prometheus: the shipped rules and dashboard against promtool, the processes and a real Prometheus",
    .serialized,
    .timeLimit(.minutes(5))
)
struct PrometheusTests {
    static let rules = Repository.root.appendingPathComponent("deploy/prometheus/askrelay-rules.yml").path
    static let rulesTest = Repository.root.appendingPathComponent("deploy/prometheus/askrelay-rules-test.yml").path
    static let config = Repository.root.appendingPathComponent("deploy/prometheus/prometheus.yml").path
    static let dashboard = Repository.root.appendingPathComponent("deploy/grafana/askrelay.json").path

    @Test("promtool: the rules and the configuration check, and the rules' unit tests pass")
    func promtoolChecksAndTests() throws {
        let promtool = try PrometheusTool.require("promtool")
        let check = Tool.run(promtool, ["check", "rules", Self.rules])
        #expect(check.status == 0, "promtool check rules:\n\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("SUCCESS: \(try ShippedRules.load().all.count) rules found"), "\(check.stdout)")
        let config = Tool.run(promtool, ["check", "config", Self.config])
        #expect(config.status == 0, "promtool check config:\n\(config.stdout)\(config.stderr)")
        let unit = Tool.run(promtool, ["test", "rules", Self.rulesTest])
        #expect(
            unit.status == 0 && unit.stdout.contains("SUCCESS"),
            "promtool test rules:\n\(unit.stdout)\(unit.stderr)"
        )
    }

    @Test("the rules' unit tests fail when an alert's threshold changes")
    func unitTestsCatchAChangedThreshold() throws {
        let promtool = try PrometheusTool.require("promtool")
        let folder = TempDirectory(prefix: "askrelay-rules")
        defer { folder.cleanup() }
        let text = try String(contentsOfFile: Self.rules, encoding: .utf8)
        let changed = text.replacingOccurrences(
            of: "askrelay:child_flows_expired:ratio_rate5m > 0.05",
            with: "askrelay:child_flows_expired:ratio_rate5m > 0.5"
        )
        try #require(changed != text, "the threshold to change is not in \(Self.rules)")
        try changed.write(toFile: folder.appending("askrelay-rules.yml"), atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: Self.rulesTest, toPath: folder.appending("askrelay-rules-test.yml"))
        let unit = Tool.run(promtool, ["test", "rules", folder.appending("askrelay-rules-test.yml")])
        #expect(unit.status != 0, "\(unit.stdout)")
        #expect(unit.stderr.contains("alertname: AskRelayQuestionsExpiring"), "\(unit.stderr)")
    }

    @Test("every metric and label the rules and the dashboard name is served by the processes; a renamed one fails")
    func referencedMetricsAreServed() throws {
        let folder = TempDirectory(prefix: "askrelay-prom-names")
        defer { folder.cleanup() }
        let cluster = try MetricsCluster(folder, flows: 2)
        defer { cluster.stop() }
        _ = try cluster.child.waitForLine(startingWith: "done flows=", timeout: .seconds(120))
        let pages = try cluster.targets.map { try scrape($0.port) }
        let served = ServedMetrics(pages: pages)
        let references = try MetricReferences.shipped()
        #expect(references.names.count >= 20, "the rules and dashboard name \(references.names.sorted())")
        let jobs = try ShippedRules.jobNames()
        #expect(jobs == ["askrelay-broker", "askrelay-child", "askrelay-limits", "askrelay-parent"])
        let problems = references.problems(served: served, recorded: try ShippedRules.load().recorded, jobs: jobs)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")

        // The check can fail: the same pages with a metric renamed, and with a label renamed.
        let renamed = ServedMetrics(
            pages: pages.map {
                $0.replacingOccurrences(of: "askrelay_broker_journal_commit_seconds", with: "askrelay_broker_commit_s")
            }
        )
        let recorded = try ShippedRules.load().recorded
        let renamedProblems = references.problems(served: renamed, recorded: recorded, jobs: jobs)
        #expect(
            renamedProblems.contains { $0.contains("askrelay_broker_journal_commit_seconds_bucket is not served") },
            "\(renamedProblems)"
        )
        let relabelled = ServedMetrics(pages: pages.map { $0.replacingOccurrences(of: "{role=", with: "{kind=") })
        let relabelledProblems = references.problems(served: relabelled, recorded: recorded, jobs: jobs)
        #expect(
            relabelledProblems.contains { $0.contains("askrelay_broker_sessions has no label role") },
            "\(relabelledProblems)"
        )
    }

    @Test(
        "a real Prometheus scrapes broker, limits, parent and child, counts the child's flows, evaluates the rules and answers every dashboard query"
    )
    func realPrometheus() throws {
        let prometheusPath = try PrometheusTool.require("prometheus")
        let folder = TempDirectory(prefix: "askrelay-prometheus")
        defer { folder.cleanup() }
        // The broker and its workers but the child; the child's target comes from a file Prometheus watches.
        let cluster = try MetricsCluster(folder, flows: 5, startChild: false)
        defer { cluster.stop() }
        let childTargets = folder.appending("child-targets.json")
        try "[]".write(toFile: childTargets, atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: Self.rules, toPath: folder.appending("askrelay-rules.yml"))
        let config = PrometheusTool.config(targets: cluster.targets, childTargetsFile: childTargets)
        try config.write(toFile: folder.appending("prometheus.yml"), atomically: true, encoding: .utf8)
        let prometheus = try PrometheusServer(executable: prometheusPath, folder: folder)
        defer { prometheus.stop() }

        // Every static target up, its last scrape without an error.
        try prometheus.waitForTargets(count: 3)
        // Then the child's workload: it registers, plays its flows and stays (its target joins).
        let child = try cluster.startChild()
        let childPort = try metricsPort(try child.waitForLine(startingWith: "ready children="))
        try "[{\"targets\": [\"127.0.0.1:\(childPort)\"]}]"
            .write(toFile: childTargets, atomically: true, encoding: .utf8)
        try prometheus.waitForTargets(count: 4)
        let done = try child.waitForLine(startingWith: "done flows=", timeout: .seconds(120))
        let flows = try #require(Double(done.dropFirst("done flows=".count).prefix { $0.isNumber }), "\(done)")
        #expect(flows == 10, "2 children of 5 flows: \(done)")

        // A scrape after the done line shows the final count: the total, and all approved (the parent approves).
        let total = try prometheus.waitForValue(#"sum(askrelay_child_flows_total{job="askrelay-child"})"#) {
            $0 == flows
        }
        #expect(total == flows)
        #expect(try prometheus.value(#"askrelay_child_flows_total{outcome="approved"}"#) == flows)
        #expect(try prometheus.value(#"askrelay_child_flows_total{outcome="expired"}"#) == 0)
        #expect(try prometheus.value(#"askrelay_child_flow_seconds_count"#) == flows)
        let asks = try prometheus.waitForValue(#"askrelay_broker_messages_routed_total{kind="ask"}"#) { $0 >= flows }
        #expect(asks >= flows)
        #expect(try prometheus.value(#"askrelay_broker_sessions{role="limits"}"#) == 1)

        // The shipped rules: every one loaded and evaluated without an error, the alerts quiet on a healthy system.
        let shipped = try ShippedRules.load()
        let rules = try prometheus.waitForRules(names: shipped.all)
        for rule in rules {
            #expect(rule.health == "ok" && rule.lastError.isEmpty, "\(rule.name): \(rule.health) \(rule.lastError)")
        }
        // (AskRelayJournalCommitSlow left out: a machine busy with other builds may well commit slowly.)
        let firing = try prometheus.alerts().filter { $0.state != "inactive" && $0.name != "AskRelayJournalCommitSlow" }
        #expect(firing.isEmpty, "alerts on a healthy system: \(firing)")
        // The recorded series exist: the flows' rate by outcome (0 when the child finished before its first scrape).
        let recorded = try prometheus.waitForValue(#"sum(askrelay:child_flows:rate5m{outcome="approved"})"#) { $0 >= 0 }
        #expect(recorded >= 0)

        // Every dashboard query parses and evaluates (Grafana's $__rate_interval as 1m).
        let queries = try Dashboard.queries()
        #expect(queries.count >= 30, "\(queries.count) dashboard queries")
        for query in queries {
            let answer = try prometheus.query(query.replacingOccurrences(of: "$__rate_interval", with: "1m"))
            #expect(answer.error == nil, "dashboard query \(query): \(answer.error ?? "")")
        }

        // The limits worker goes: its target is down and the broker has no limits session: both alerts pend.
        #expect(cluster.limits.stop(grace: .seconds(10)) != nil)
        let pending = try prometheus.waitForAlerts { alerts in
            Set(alerts.filter { $0.state == "pending" || $0.state == "firing" }.map(\.name)).isSuperset(of: [
                "AskRelayWorkerDown", "AskRelayLimitsDisconnected",
            ])
        }
        let down = pending.first { $0.name == "AskRelayWorkerDown" }
        #expect(down?.labels["job"] == "askrelay-limits", "\(pending)")
    }
}

// MARK: - The processes

/// A broker, limits, parent and (started at once or later) child worker, each with a metrics endpoint on loopback.
struct MetricsCluster {
    let folder: TempDirectory
    let broker: RelayProcess
    let limits: RelayProcess
    let parent: RelayProcess
    let flows: Int
    private let childBox = ChildBox()
    var endpoint: String
    /// job name and metrics port of each process started so far (the child's once started).
    private(set) var targets: [(job: String, port: UInt16)]

    final class ChildBox: @unchecked Sendable {  // @unchecked: the test's thread alone uses it.
        var child: RelayProcess?
    }

    var child: RelayProcess { childBox.child! }

    init(_ folder: TempDirectory, flows: Int, startChild: Bool = true) throws {
        self.folder = folder
        self.flows = flows
        broker = try RelayProcess(
            "askrelay-broker",
            [
                "--endpoint", "tcp://127.0.0.1:*", "--data-dir", folder.appending("broker"), "--metrics-endpoint",
                "127.0.0.1:0",
            ],
            logDirectory: folder.path
        )
        var started = [broker]
        do {
            let brokerPort = try metricsPort(try broker.waitForLine(startingWith: "ready"))
            endpoint = try broker.readyEndpoint()
            let common = ["--broker", endpoint, "--metrics-endpoint", "127.0.0.1:0"]
            limits = try RelayProcess(
                "askrelay-limits",
                common + ["--data-dir", folder.appending("limits")],
                logDirectory: folder.path
            )
            started.append(limits)
            let limitsPort = try metricsPort(try limits.waitForLine(startingWith: "ready"))
            parent = try RelayProcess(
                "askrelay-parent",
                common + ["--families", "1", "--policy", "approve", "--think", "fixed:10ms"],
                logDirectory: folder.path
            )
            started.append(parent)
            let parentPort = try metricsPort(try parent.waitForLine(startingWith: "ready"))
            targets = [
                ("askrelay-broker", brokerPort), ("askrelay-limits", limitsPort), ("askrelay-parent", parentPort),
            ]
            if startChild {
                let child = try self.startChild()
                targets.append(
                    ("askrelay-child", try metricsPort(try child.waitForLine(startingWith: "ready children=")))
                )
            }
        } catch {
            for process in started.reversed() { process.stop(grace: .seconds(10)) }
            throw error
        }
    }

    /// Starts the child worker: 2 children of family f1, `flows` asks each, every one sent; it stays after its done
    /// line, so its last numbers are still served.
    @discardableResult
    func startChild() throws -> RelayProcess {
        let child = try RelayProcess(
            "askrelay-child",
            [
                "--broker", endpoint, "--metrics-endpoint", "127.0.0.1:0", "--families", "1", "--children-per-family",
                "2", "--flows", "\(flows)", "--think", "10ms", "--cancel-probability", "0", "--known-ratio", "0",
                "--stay",
            ],
            logDirectory: folder.path
        )
        childBox.child = child
        return child
    }

    func stop() {
        childBox.child?.stop(grace: .seconds(10))
        for process in [parent, limits, broker] { process.stop(grace: .seconds(10)) }
    }
}

// MARK: - Prometheus

enum PrometheusTool {
    /// The path of `name` (`prometheus`, `promtool`) on PATH, or a failure that says how to install it.
    static func require(_ name: String) throws -> String {
        try #require(
            Tool.find(name),
            "no \(name) on PATH: `make test-deps` installs Debian's prometheus package (apt-get install prometheus)"
        )
    }

    /// A configuration scraping `targets` every 250 ms (the child's from `childTargetsFile`), evaluating the shipped
    /// rules every second.
    static func config(targets: [(job: String, port: UInt16)], childTargetsFile: String) -> String {
        var text = """
            global:
              scrape_interval: 250ms
              scrape_timeout: 250ms
              evaluation_interval: 1s
            rule_files:
              - askrelay-rules.yml
            scrape_configs:

            """
        for target in targets {
            text += """
                  - job_name: \(target.job)
                    static_configs:
                      - targets: ["127.0.0.1:\(target.port)"]

                """
        }
        text += """
              - job_name: askrelay-child
                file_sd_configs:
                  - files: ["\(childTargetsFile)"]

            """
        return text
    }
}

/// Debian's `prometheus` on a free loopback port, its storage in the test's folder; stopped in `stop()`.
final class PrometheusServer {
    let process: RelayProcess
    let port: UInt16

    struct Target { var job: String, health: String, lastError: String }
    struct Rule { var name: String, health: String, lastError: String }
    struct Alert { var name: String, state: String, labels: [String: String] }

    init(executable: String, folder: TempDirectory) throws {
        var attempt = 0
        while true {
            attempt += 1
            let port = try freeLoopbackPort()
            let process = try RelayProcess(
                name: "prometheus",
                executable: executable,
                arguments: [
                    "--config.file=" + folder.appending("prometheus.yml"),
                    "--storage.tsdb.path=" + folder.appending("prometheus-data"),
                    "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn",
                ],
                logPath: folder.appending("prometheus-\(attempt).log")
            )
            do {
                try Self.waitUntilReady(process, port: port)
                self.process = process
                self.port = port
                return
            } catch {
                process.stop(grace: .seconds(10))
                // Another program took the port between our probe and Prometheus' bind: once more on another.
                let log = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
                if attempt < 3 && log.contains("address already in use") { continue }
                throw error
            }
        }
    }

    func stop() { process.stop(grace: .seconds(10)) }

    /// Polls `/-/ready` until it answers 200 (or the process exits, or 60 s pass).
    static func waitUntilReady(_ process: RelayProcess, port: UInt16) throws {
        let deadline = ContinuousClock.now + .seconds(60)
        var last = ""
        while ContinuousClock.now < deadline {
            guard process.isRunning else { break }
            if let response = try? HTTPClient.request(port, "GET /-/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n") {
                if response.hasPrefix("HTTP/1.0 200") || response.hasPrefix("HTTP/1.1 200") { return }
                last = String(response.prefix(200))
            }
            usleep(50_000)
        }
        let log = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
        throw TestFailure("prometheus never became ready (last answer: \(last)); its log:\n\(log.suffix(3000))")
    }

    /// The `data` of `GET path` from the HTTP API, or a failure with the API's error.
    func api(_ path: String) throws -> (data: Any?, error: String?) {
        let response = try HTTPClient.request(port, "GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        guard let end = response.range(of: "\r\n\r\n") else { throw TestFailure("no HTTP answer to \(path)") }
        let body = Data(response[end.upperBound...].utf8)
        guard let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            throw TestFailure("not JSON from \(path): \(response.prefix(300))")
        }
        if json["status"] as? String == "success" { return (json["data"], nil) }
        return (nil, "\(json["errorType"] ?? "") \(json["error"] ?? "")")
    }

    func query(_ expression: String) throws -> (data: Any?, error: String?) {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let encoded = expression.addingPercentEncoding(withAllowedCharacters: allowed) ?? expression
        return try api("/api/v1/query?query=\(encoded)")
    }

    /// The value of an instant query's single sample; nil when it has none.
    func value(_ expression: String) throws -> Double? {
        let answer = try query(expression)
        if let error = answer.error { throw TestFailure("query \(expression): \(error)") }
        guard let data = answer.data as? [String: Any], let result = data["result"] as? [[String: Any]] else {
            throw TestFailure("query \(expression): no result")
        }
        guard let sample = result.first else { return nil }
        #expect(result.count == 1, "query \(expression) has \(result.count) samples")
        guard let pair = sample["value"] as? [Any], pair.count == 2, let text = pair[1] as? String else {
            throw TestFailure("query \(expression): no value in \(sample)")
        }
        return Double(text)
    }

    /// Polls `expression` until its value satisfies `done` (or 60 s pass: a failure with the last value).
    func waitForValue(_ expression: String, _ done: (Double) -> Bool) throws -> Double {
        try poll("\(expression)") { try value(expression).flatMap { done($0) ? $0 : nil } }
    }

    /// Polls `/api/v1/targets` until `count` targets are active, every one `up` with no error.
    func waitForTargets(count: Int) throws {
        _ = try poll("\(count) targets up") { () -> [Target]? in
            let targets = try self.targets()
            let allUp = targets.count == count && targets.allSatisfy { $0.health == "up" && $0.lastError.isEmpty }
            return allUp ? targets : nil
        }
    }

    func targets() throws -> [Target] {
        let answer = try api("/api/v1/targets?state=active")
        let active = (answer.data as? [String: Any])?["activeTargets"] as? [[String: Any]] ?? []
        return active.map {
            Target(
                job: (($0["labels"] as? [String: String]) ?? [:])["job"] ?? "",
                health: $0["health"] as? String ?? "",
                lastError: $0["lastError"] as? String ?? ""
            )
        }
    }

    /// Polls `/api/v1/rules` until every rule in `names` is there and has been evaluated (health not `unknown`).
    func waitForRules(names: [String]) throws -> [Rule] {
        try poll("the rules \(names) evaluated") { () -> [Rule]? in
            let rules = try self.rules()
            let evaluated = rules.filter { $0.health != "unknown" }
            return Set(evaluated.map(\.name)) == Set(names) && rules.count == names.count ? rules : nil
        }
    }

    func rules() throws -> [Rule] {
        let answer = try api("/api/v1/rules")
        if let error = answer.error { throw TestFailure("/api/v1/rules: \(error)") }
        let groups = (answer.data as? [String: Any])?["groups"] as? [[String: Any]] ?? []
        return groups.flatMap { group in
            (group["rules"] as? [[String: Any]] ?? []).map {
                Rule(
                    name: $0["name"] as? String ?? "",
                    health: $0["health"] as? String ?? "",
                    lastError: $0["lastError"] as? String ?? ""
                )
            }
        }
    }

    /// Every alerting rule's alerts as `/api/v1/rules` shows them (inactive rules as one `inactive` entry).
    func alerts() throws -> [Alert] {
        let answer = try api("/api/v1/rules?type=alert")
        let groups = (answer.data as? [String: Any])?["groups"] as? [[String: Any]] ?? []
        return groups.flatMap { group in
            (group["rules"] as? [[String: Any]] ?? []).flatMap { rule -> [Alert] in
                let name = rule["name"] as? String ?? ""
                let alerts = rule["alerts"] as? [[String: Any]] ?? []
                if alerts.isEmpty { return [Alert(name: name, state: rule["state"] as? String ?? "", labels: [:])] }
                return alerts.map {
                    Alert(
                        name: name,
                        state: $0["state"] as? String ?? "",
                        labels: $0["labels"] as? [String: String] ?? [:]
                    )
                }
            }
        }
    }

    func waitForAlerts(_ done: ([Alert]) -> Bool) throws -> [Alert] {
        try poll("the alerts") { () -> [Alert]? in
            let alerts = try self.alerts()
            return done(alerts) ? alerts : nil
        }
    }

    /// Calls `attempt` until it returns a value, for at most 60 s; then fails with `what`.
    private func poll<T>(_ what: String, _ attempt: () throws -> T?) throws -> T {
        let deadline = ContinuousClock.now + .seconds(60)
        var lastError = ""
        while ContinuousClock.now < deadline {
            do {
                if let value = try attempt() { return value }
            } catch { lastError = "\(error)" }
            guard process.isRunning else { break }
            usleep(50_000)
        }
        let targets = (try? self.targets()).map { "\($0)" } ?? "?"
        let log = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
        throw TestFailure(
            "waited in vain for \(what) (\(lastError)); targets: \(targets); prometheus log:\n\(log.suffix(2000))"
        )
    }
}

/// A TCP port on 127.0.0.1 that nothing listened on a moment ago (the OS picks it).
func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else { throw TestFailure("no free port on 127.0.0.1: errno \(errno)") }
    return UInt16(bigEndian: address.sin_port)
}

// MARK: - What the rules and the dashboard name

/// The shipped rules file, read as JSON through python3-yaml.
struct ShippedRules {
    var recorded: [String]
    var alerts: [String]
    var expressions: [String]
    var all: [String] { recorded + alerts }

    static func json(_ path: String) throws -> Any {
        let python = try #require(Tool.find("python3"), "no python3 on PATH")
        let run = Tool.run(
            python,
            ["-c", "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)", path]
        )
        try #require(run.status == 0, "reading \(path) needs python3-yaml (`make test-deps`): \(run.stderr)")
        return try JSONSerialization.jsonObject(with: Data(run.stdout.utf8))
    }

    static func load() throws -> ShippedRules {
        let root = try json(PrometheusTests.rules) as? [String: Any]
        let groups = root?["groups"] as? [[String: Any]] ?? []
        var rules = ShippedRules(recorded: [], alerts: [], expressions: [])
        for rule in groups.flatMap({ $0["rules"] as? [[String: Any]] ?? [] }) {
            if let name = rule["record"] as? String { rules.recorded.append(name) }
            if let name = rule["alert"] as? String { rules.alerts.append(name) }
            if let expression = rule["expr"] as? String { rules.expressions.append(expression) }
        }
        try #require(!rules.recorded.isEmpty && !rules.alerts.isEmpty, "no rules in \(PrometheusTests.rules)")
        return rules
    }

    /// The scrape job names of deploy/prometheus/prometheus.yml.
    static func jobNames() throws -> Set<String> {
        let root = try json(PrometheusTests.config) as? [String: Any]
        let jobs = (root?["scrape_configs"] as? [[String: Any]] ?? []).compactMap { $0["job_name"] as? String }
        return Set(jobs)
    }
}

enum Dashboard {
    /// Every panel target's `expr` of the shipped dashboard (rows' nested panels included).
    static func queries() throws -> [String] {
        let data = try Data(contentsOf: URL(fileURLWithPath: PrometheusTests.dashboard))
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        func expressions(_ panels: [[String: Any]]) -> [String] {
            panels.flatMap { panel in
                ((panel["targets"] as? [[String: Any]]) ?? []).compactMap { $0["expr"] as? String }
                    + expressions(panel["panels"] as? [[String: Any]] ?? [])
            }
        }
        return expressions(root["panels"] as? [[String: Any]] ?? [])
    }
}

/// The metrics a set of `/metrics` pages serves: each family's type, and the labels of its series.
struct ServedMetrics {
    var types: [String: String] = [:]
    /// Every series' labels, by the sample's name (`x_bucket`, `x_count` for a histogram `x`).
    var series: [String: [[String: String]]] = [:]

    init(pages: [String]) {
        for page in pages {
            for line in page.split(separator: "\n") {
                if line.hasPrefix("# TYPE ") {
                    let words = line.split(separator: " ")
                    if words.count == 4 { types[String(words[2])] = String(words[3]) }
                    continue
                }
                if line.hasPrefix("#") { continue }
                let name = String(line.prefix { $0 != "{" && $0 != " " })
                var labels: [String: String] = [:]
                if let open = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}") {
                    for match in line[line.index(after: open)..<close].matches(of: /([a-zA-Z_]+)="([^"]*)"/) {
                        labels[String(match.output.1)] = String(match.output.2)
                    }
                }
                series[name, default: []].append(labels)
            }
        }
    }

    /// Whether `name` is a sample name of a served family: the family itself (not a histogram), or a histogram's
    /// `_bucket`, `_sum` or `_count`.
    func serves(_ name: String) -> Bool {
        if let type = types[name] { return type != "histogram" }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            if types[String(name.dropLast(suffix.count))] == "histogram" { return true }
        }
        return false
    }
}

/// The metric names and label matchers in PromQL expressions: `askrelay_*` metrics, `askrelay:*` recorded series and
/// Prometheus' own `up`.
struct MetricReferences {
    struct Matcher: Hashable { var name: String, label: String, op: String, value: String }
    var names: Set<String> = []
    var matchers: Set<Matcher> = []
    /// Which expression each name came from, for the messages.
    var sources: [String: String] = [:]

    static func shipped() throws -> MetricReferences {
        var references = MetricReferences()
        for expression in try ShippedRules.load().expressions + Dashboard.queries() { references.add(expression) }
        return references
    }

    mutating func add(_ expression: String) {
        // Names outside string literals (a label value such as "askrelay-broker" is not one).
        let code = expression.replacing(/"(?:[^"\\]|\\.)*"/, with: "\"\"")
        for match in code.matches(of: /(?:^|[^A-Za-z0-9_:])(askrelay[_:][A-Za-z0-9_:]*|up)(?![A-Za-z0-9_:(])/) {
            let name = String(match.output.1)
            names.insert(name)
            sources[name] = sources[name] ?? expression
        }
        for selector in expression.matches(of: /(askrelay[_:][A-Za-z0-9_:]*|\bup)\s*\{([^}]*)\}/) {
            for matcher in selector.output.2.matches(of: /([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"/) {
                matchers.insert(
                    Matcher(
                        name: String(selector.output.1),
                        label: String(matcher.output.1),
                        op: String(matcher.output.2),
                        value: String(matcher.output.3)
                    )
                )
            }
        }
    }

    /// What does not hold: a name no page serves, a recorded name no rule records, a label (or `=` value) no series
    /// of its metric has, a `job` no scrape job of the shipped configuration is named.
    func problems(served: ServedMetrics, recorded: [String], jobs: Set<String>) -> [String] {
        var problems: [String] = []
        for name in names.sorted() {
            let source = sources[name] ?? ""
            if name == "up" { continue }
            if name.hasPrefix("askrelay:") {
                if !recorded.contains(name) { problems.append("\(name) is not recorded by a rule (in: \(source))") }
            } else if !served.serves(name) {
                problems.append("\(name) is not served by any process (in: \(source))")
            }
        }
        for matcher in matchers.sorted(by: { "\($0)" < "\($1)" }) {
            if matcher.label == "job" {
                var known = true
                if matcher.op == "=" { known = jobs.contains(matcher.value) }
                if matcher.op == "=~" {
                    let regex = try? Regex(matcher.value)
                    known = regex.map { regex in jobs.contains { $0.wholeMatch(of: regex) != nil } } ?? false
                }
                if !known {
                    problems.append("\(matcher.name): no scrape job matches job\(matcher.op)\"\(matcher.value)\"")
                }
                continue
            }
            if matcher.label == "instance" || matcher.name.hasPrefix("askrelay:") || !served.serves(matcher.name) {
                continue
            }
            let series = served.series[matcher.name] ?? []
            // A labelled family shows its series with their first event (refusals by code): none, nothing to check.
            if series.isEmpty { continue }
            let family = matcher.name
            if !series.contains(where: { $0[matcher.label] != nil }) {
                problems.append("\(family) has no label \(matcher.label)")
            } else if matcher.op == "=", !series.contains(where: { $0[matcher.label] == matcher.value }) {
                problems.append("\(family) has no series with \(matcher.label)=\"\(matcher.value)\"")
            }
        }
        return problems
    }
}
