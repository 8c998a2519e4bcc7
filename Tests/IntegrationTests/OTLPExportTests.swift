import AskClient
import AskModel
import AskProtocol
import AskRelayCluster
import AskRelayProcesses
import AskTelemetry
import AskTestSupport
import Foundation
import Testing

/// `askrelay export-traces` against a receiver that parses every request with the official OpenTelemetry protobuf
/// definitions (Tests/Telemetry/otlp-receiver.py, PyPI opentelemetry-proto in .build/venv, which make test-deps
/// installs), not with AskRelay's own reader.
@Suite("OTLP export of a run's traces", .serialized, .timeLimit(.minutes(2)))
struct OTLPExportTests {
    static let python = Repository.root.appendingPathComponent(".build/venv/bin/python3").path
    static let receiverScript = Repository.root.appendingPathComponent("Tests/Telemetry/otlp-receiver.py").path

    /// The receiver, started and listening: its URL and the file it writes a line per parsed request to.
    final class Receiver {
        let process: RelayProcess
        let url: String
        let out: String

        init(_ folder: TempDirectory, refuse: Bool = false) throws {
            out = folder.path + "/received.jsonl"
            process = try RelayProcess(
                Self.pythonPath,
                [OTLPExportTests.receiverScript, out] + (refuse ? ["--refuse"] : []),
                logDirectory: folder.path,
                executableURL: URL(fileURLWithPath: Self.pythonPath)
            )
            let line = try process.waitForLine(startingWith: "listening ", timeout: .seconds(30))
            url = "http://127.0.0.1:" + line.dropFirst("listening ".count)
        }

        static var pythonPath: String { OTLPExportTests.python }

        /// One entry per request: the service name and its spans as the official definitions parsed them.
        var requests: [[String: Any]] {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }

        deinit { process.kill9() }
    }

    /// A flow's trace files as three processes would write them: a child that asks, the broker, a parent.
    static func writeTraces(_ folder: String, question: UUID) throws -> (ask: UUID, answer: UUID) {
        try FileManager.default.createDirectory(atPath: folder + "/trace", withIntermediateDirectories: true)
        let (ask, answer, late) = (UUID(), UUID(), UUID())
        let at = Date(timeIntervalSince1970: 1_764_763_200)
        let child = try TraceLog(path: folder + "/trace/child-1.jsonl")
        child.record(.sent, kind: "ask", question: question, id: ask, from: "child/c1", to: "limits", at: at)
        child.flush()
        let broker = try TraceLog(path: folder + "/trace/broker.jsonl")
        broker.record(.received, kind: "ask", question: question, id: ask, from: "child/c1", to: "limits", at: at)
        broker.record(.delivered, kind: "ask", question: question, id: ask, to: "limits/l1", at: at + 0.001)
        broker.record(.refused, kind: "answer", question: question, id: late, code: "already-closed", at: at + 0.5)
        broker.record(.closed, question: question, code: "answered", at: at + 0.4)
        broker.record(.fault, to: "parent-1", code: "kill", at: at + 0.2)
        broker.flush()
        let parent = try TraceLog(path: folder + "/trace/parent-1.jsonl")
        parent.record(.sent, kind: "answer", question: question, id: answer, from: "guardian/g1", to: "broker", at: at)
        parent.flush()
        // A killed process's torn last line is passed over.
        let handle = try #require(FileHandle(forWritingAtPath: folder + "/trace/parent-1.jsonl"))
        handle.seekToEndOfFile()
        handle.write(Data("{\"at_us\":17647632".utf8))
        try handle.close()
        return (ask, answer)
    }

    static func hex(_ uuid: UUID) -> String {
        withUnsafeBytes(of: uuid.uuid) { $0.map { String(format: "%02x", $0) }.joined() }
    }

    @Test("every process's spans parse with the official definitions; a flow is one trace, its question id")
    func exported() throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.python),
            "no \(Self.python): run make test-deps (it installs opentelemetry-proto into .build/venv)"
        )
        let folder = TempDirectory()
        defer { folder.cleanup() }
        let question = UUID()
        let (ask, _) = try Self.writeTraces(folder.path, question: question)
        let receiver = try Receiver(folder)
        let run = Tool.run(
            Executables.built.appendingPathComponent("askrelay").path,
            ["export-traces", folder.path, "--otlp-endpoint", receiver.url],
            environment: Tool.cleanEnvironment
        )
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        #expect(run.stdout.contains("broker: 3 spans from 5 trace lines"), "\(run.stdout)")
        #expect(run.stdout.contains("sent 5 spans of 3 processes to http://127.0.0.1:"), "\(run.stdout)")
        let requests = receiver.requests
        #expect(Set(requests.compactMap { $0["service"] as? String }) == ["broker", "child-1", "parent-1"])
        let spans = requests.flatMap { ($0["spans"] as? [[String: Any]]) ?? [] }
        #expect(spans.count == 5)
        #expect(spans.allSatisfy { $0["trace_id"] as? String == Self.hex(question) }, "one trace: \(spans)")
        #expect(Set(spans.compactMap { $0["span_id"] as? String }).count == 5, "distinct span ids")
        let send = try #require(spans.first { $0["name"] as? String == "send ask" })
        #expect(send["kind"] as? Int == 4, "PRODUCER")
        let attributes = try #require(send["attributes"] as? [String: String])
        #expect(attributes["messaging.system"] == "askrelay")
        #expect(attributes["messaging.message.id"] == ask.uuidString)
        #expect(attributes["messaging.destination.name"] == "limits")
        let route = try #require(spans.first { $0["name"] as? String == "route ask" })
        #expect((route["end"] as? Int ?? 0) - (route["start"] as? Int ?? 0) == 1_000_000, "received → delivered")
        let refused = try #require(spans.first { $0["name"] as? String == "route answer" })
        #expect(refused["status"] as? Int == 2 && refused["status_message"] as? String == "already-closed")
        #expect(spans.contains { $0["name"] as? String == "close question" })
    }

    @Test("an app's own trace id is on every span of its flow, the broker's included, under the app's span")
    func appTraceContext() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.python), "no \(Self.python): make test-deps")
        var options = AskRelayCluster.Options()
        options.trace = true
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        _ = try await cluster.startParent(["--guardian", "g1-1@f1", "--policy", "approve", "--think", "fixed:0s"])
        let center = try cluster.makeAskCenter()
        let child = center.child("c1-1")
        let responses = child.responses(for: CommunicationTopic.self)
        // The application's own trace and the span it asks from.
        let app = try #require(TraceContext(traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550102", kind: .phoneNumber))
        try await child.ask(question, trace: app)
        try await child.send(question.id)
        var iterator = responses.makeAsyncIterator()
        #expect(await iterator.next()?.choice == .approve)
        await center.stop()
        await cluster.shutdown(removingFolder: false)
        defer { try? FileManager.default.removeItem(atPath: cluster.folder) }

        let folder = TempDirectory()
        defer { folder.cleanup() }
        let receiver = try Receiver(folder)
        let run = Tool.run(
            Executables.built.appendingPathComponent("askrelay").path,
            ["export-traces", cluster.folder, "--otlp-endpoint", receiver.url],
            environment: Tool.cleanEnvironment
        )
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        var spans: [(service: String, span: [String: Any])] = []
        for request in receiver.requests {
            let service = request["service"] as? String ?? "?"
            for span in request["spans"] as? [[String: Any]] ?? [] { spans.append((service, span)) }
        }
        let flow = spans.filter {
            ($0.span["attributes"] as? [String: String])?["askrelay.question"] == question.id.uuidString
        }
        #expect(Set(flow.map(\.service)) == ["askcenter-1", "broker", "limits", "parent-1"], "\(flow.map(\.service))")
        #expect(flow.allSatisfy { $0.span["trace_id"] as? String == app.traceID.description }, "\(flow)")
        let broker = flow.filter { $0.service == "broker" }
        #expect(broker.count >= 5, "the broker's spans of the flow: \(broker.map { $0.span["name"] ?? "" })")
        // The center's messages hang off the app's span; the guardian's question off the center's send.
        let parentHex = String(format: "%016llx", app.parentID)
        let ask = try #require(flow.first { $0.service == "askcenter-1" && $0.span["name"] as? String == "send ask" })
        #expect(ask.span["parent_span_id"] as? String == parentHex)
        let send = try #require(flow.first { $0.service == "askcenter-1" && $0.span["name"] as? String == "send send" })
        let routedQuestion = try #require(
            broker.first { $0.span["name"] as? String == "route question" },
            "\(broker.map { $0.span["name"] ?? "" })"
        )
        #expect(routedQuestion.span["parent_span_id"] as? String == send.span["span_id"] as? String)
        let received = try #require(
            flow.first { $0.service == "parent-1" && $0.span["name"] as? String == "process question" }
        )
        #expect(received.span["parent_span_id"] as? String == routedQuestion.span["span_id"] as? String)
    }

    @Test("live: the broker, a parent process and an app's center send their spans while running, in the app's trace")
    func liveExport() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.python), "no \(Self.python): make test-deps")
        let folder = TempDirectory()
        defer { folder.cleanup() }
        let receiver = try Receiver(folder)
        var options = AskRelayCluster.Options()
        options.brokerArguments = ["--otlp-endpoint", receiver.url]
        let cluster = try await AskRelayCluster.start(options)
        defer { cluster.stop() }
        _ = try await cluster.startParent([
            "--guardian", "g1-1@f1", "--policy", "approve", "--think", "fixed:0s", "--otlp-endpoint", receiver.url,
        ])
        // The app exports its center's spans too, with no trace file.
        let export = try OTLPLiveExport(endpoint: receiver.url, service: "app", interval: .milliseconds(100))
        var centerOptions = AskCenter.Options()
        centerOptions.traceLog = try TraceLog(path: nil, sink: export.sink)
        let center = try cluster.makeAskCenter(options: centerOptions)
        let child = center.child("c1-1")
        let responses = child.responses(for: CommunicationTopic.self)
        let app = try #require(TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
        let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550103", kind: .phoneNumber))
        try await child.ask(question, trace: app)
        try await child.send(question.id)
        var iterator = responses.makeAsyncIterator()
        #expect(await iterator.next()?.choice == .approve)
        await center.stop()
        centerOptions.traceLog?.flush()
        export.stop()
        // SIGTERM: each process sends what it holds as it stops.
        await cluster.shutdown()

        var flow: [(service: String, span: [String: Any])] = []
        for request in receiver.requests {
            for span in request["spans"] as? [[String: Any]] ?? []
            where (span["attributes"] as? [String: String])?["askrelay.question"] == question.id.uuidString {
                flow.append((request["service"] as? String ?? "?", span))
            }
        }
        #expect(Set(flow.map(\.service)) == ["app", "broker", "askrelay-parent"], "\(flow.map(\.service))")
        #expect(flow.allSatisfy { $0.span["trace_id"] as? String == app.traceID.description }, "\(flow)")
        #expect(flow.filter { $0.service == "broker" }.count >= 5, "\(flow.map { $0.span["name"] ?? "" })")
        #expect(export.counts.exported >= 2 && export.counts.failed == 0, "\(export.counts)")
        // Which process of a name: host and pid.
        let instances = Set(receiver.requests.compactMap { $0["instance"] as? String })
        #expect(instances.contains(export.instance) && instances.count == 3, "\(instances)")
        // Each message's span went out once: no span id twice within a process.
        for service in ["app", "broker", "askrelay-parent"] {
            let ids = flow.filter { $0.service == service }.compactMap { $0.span["span_id"] as? String }
            #expect(Set(ids).count == ids.count, "\(service): \(ids)")
        }
    }

    @Test("live: a line that comes after its span went out on the hold timeout is a late span, a child of the first")
    func lateLineIsASpanOfItsOwn() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.python), "no \(Self.python): make test-deps")
        let folder = TempDirectory()
        defer { folder.cleanup() }
        let receiver = try Receiver(folder)
        let export = try OTLPLiveExport(
            endpoint: receiver.url,
            service: "broker",
            interval: .milliseconds(20),
            hold: .milliseconds(50)
        )
        let log = try TraceLog(path: nil, sink: export.sink)
        let question = UUID()
        let message = UUID()
        let app = try #require(TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
        func spans() -> [[String: Any]] {
            receiver.requests.flatMap { $0["spans"] as? [[String: Any]] ?? [] }.filter {
                ($0["attributes"] as? [String: String])?["messaging.message.id"] == message.uuidString
            }
        }
        // A message the broker made, routed to a guardian that does not acknowledge it for a while: its span goes
        // out on the hold timeout.
        let to = "guardian/g1"
        log.record(.routed, kind: "closed", question: question, id: message, from: "broker", to: to, trace: app)
        log.flush()
        let deadline = ContinuousClock.now + .seconds(20)
        while spans().isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try #require(spans().count == 1, "the routed span did not go out on the hold timeout")
        // Then the guardian acknowledges it: the same message, the same process, so without care the same span id.
        log.record(.acked, kind: "closed", question: question, id: message, from: "broker", to: to, trace: app)
        log.flush()
        export.stop()
        let found = spans()
        try #require(found.count == 2, "\(found)")
        let (first, late) = (found[0], found[1])
        #expect(
            first["span_id"] as? String == String(format: "%016llx", TraceContext.spanID(of: MessageID(uuid: message)))
        )
        #expect(late["span_id"] as? String != first["span_id"] as? String, "one span id sent twice")
        #expect(late["parent_span_id"] as? String == first["span_id"] as? String)
        #expect((late["name"] as? String)?.hasSuffix("(late)") == true, "\(late)")
        #expect(late["trace_id"] as? String == app.traceID.description)
    }

    @Test("a collector that refuses, or none listening: exit 1 with the reason; bad usage: exit 64")
    func failures() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.python), "no \(Self.python): make test-deps")
        let folder = TempDirectory()
        defer { folder.cleanup() }
        _ = try Self.writeTraces(folder.path, question: UUID())
        let askrelay = Executables.built.appendingPathComponent("askrelay").path
        let refusing = try Receiver(folder, refuse: true)
        let refused = Tool.run(askrelay, ["export-traces", folder.path, "--otlp-endpoint", refusing.url])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("the OTLP collector answered HTTP/1.0 503"), "\(refused.stderr)")
        let nobody = Tool.run(askrelay, ["export-traces", folder.path, "--otlp-endpoint", "http://127.0.0.1:1"])
        #expect(nobody.status == 1)
        #expect(nobody.stderr.contains("nothing accepts connections at http://127.0.0.1:1"), "\(nobody.stderr)")
        for (arguments, message) in [
            (["export-traces", folder.path], "give --otlp-endpoint http://HOST:PORT"),
            (["export-traces", folder.path, "--otlp-endpoint", "ftp://x"], "is not an http://HOST:PORT URL"),
            (["export-traces", "/nonexistent-askrelay", "--otlp-endpoint", "http://127.0.0.1:1"], "is not a folder"),
        ] {
            let run = Tool.run(askrelay, arguments)
            #expect(run.status == 64, "\(arguments): \(run.stderr)")
            #expect(run.stderr.contains(message), "\(arguments): \(run.stderr)")
        }
    }
}
