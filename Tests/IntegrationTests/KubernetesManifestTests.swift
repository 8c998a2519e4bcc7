import AskRelayProcesses
import AskTestSupport
import Foundation
import Testing

/// deploy/kubernetes validates offline: every object against the Kubernetes API schema (the models of PyPI's
/// `kubernetes` client, unknown fields and wrong types fail), the rules the deployment relies on (headless Service,
/// journal claim per broker, the broker list naming the StatefulSet's pods, probes, requests, grace period), and
/// every flag and ASKRELAY_* variable against the executables' `--help` (Tests/Deploy/validate-manifests.py).
/// `make test-deps` installs the client package into .build/venv (not the system Python), which the validator runs
/// in; `make deploy-test` plays the manifests under podman.
@Suite("Kubernetes manifests: API schema, deployment rules, flags against --help", .timeLimit(.minutes(2)))
struct KubernetesManifestTests {
    static let validator = Repository.root.appendingPathComponent("Tests/Deploy/validate-manifests.py").path
    static let manifests = Repository.root.appendingPathComponent("deploy/kubernetes")

    static func validate(_ folder: URL) throws -> ToolRun {
        let venv = Repository.root.appendingPathComponent(".build/venv/bin/python3").path
        let python = try #require(
            FileManager.default.isExecutableFile(atPath: venv) ? venv : nil,
            "no \(venv): `make test-deps` makes it, with PyPI's kubernetes package"
        )
        let run = Tool.run(
            python,
            [validator, "--bin", Executables.built.path, folder.path],
            environment: Tool.cleanEnvironment
        )
        try #require(
            !run.stderr.contains("No module named") && !run.stderr.contains("install with `make test-deps`"),
            "the validator needs PyPI's kubernetes package and PyYAML: \(run.stderr)"
        )
        return run
    }

    /// A copy of deploy/kubernetes with one file changed by `edit`: a fresh temporary folder (removed by its
    /// `cleanup()`).
    static func brokenCopy(_ file: String, _ edit: (String) -> String) throws -> TempDirectory {
        let folder = TempDirectory(prefix: "askrelay-k8s")
        for name in try FileManager.default.contentsOfDirectory(atPath: manifests.path) {
            try FileManager.default.copyItem(
                at: manifests.appendingPathComponent(name),
                to: folder.url.appendingPathComponent(name)
            )
        }
        let path = folder.url.appendingPathComponent(file)
        let text = try String(contentsOf: path, encoding: .utf8)
        let changed = edit(text)
        #expect(changed != text, "the edit of \(file) changed nothing")
        try changed.write(to: path, atomically: true, encoding: .utf8)
        return folder
    }

    @Test("every manifest validates against the API schema and the deployment rules; flags are real")
    func manifestsValidate() throws {
        let run = try Self.validate(Self.manifests)
        #expect(run.status == 0, "validate-manifests exited \(run.status):\n\(run.stdout)\n\(run.stderr)")
        for object in [
            "StatefulSet/askrelay-broker", "Service/askrelay-broker", "ConfigMap/askrelay-brokers",
            "Deployment/askrelay-parent-1", "Deployment/askrelay-child-1", "NetworkPolicy/askrelay-broker-admin",
            "scaling/rebalance-job.yaml[0] Job/askrelay-rebalance",
        ] {
            #expect(run.stdout.contains("ok   ") && run.stdout.contains(object), "\(object) is validated")
        }
    }

    @Test("a field the API does not know fails, with the file and the path")
    func unknownFieldFails() throws {
        let folder = try Self.brokenCopy("broker.yaml") {
            $0.replacingOccurrences(of: "terminationGracePeriodSeconds: 30", with: "terminationGracePeriod: 30")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(
            run.stderr.contains("broker.yaml[1] StatefulSet/askrelay-broker")
                && run.stderr.contains("spec.template.spec.terminationGracePeriod"),
            "\(run.stderr)"
        )
    }

    @Test("a number where the API wants a string fails (an unquoted flag value in args)")
    func wrongTypeFails() throws {
        let folder = try Self.brokenCopy("child.yaml") { $0.replacingOccurrences(of: "- \"10\"", with: "- 10") }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("args.6: Input should be a valid string"), "\(run.stderr)")
    }

    @Test("a broker list that does not name the StatefulSet's pods fails")
    func brokerListMatchesPods() throws {
        let folder = try Self.brokenCopy("broker.yaml") {
            $0.replacingOccurrences(of: "replicas: 3", with: "replicas: 4")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("ASKRELAY_BROKERS is"), "\(run.stderr)")
    }

    @Test("a flag the executable does not have fails")
    func unknownFlagFails() throws {
        let folder = try Self.brokenCopy("parent.yaml") {
            $0.replacingOccurrences(of: "- --think", with: "- --thinking")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("askrelay-parent --help does not list --thinking"), "\(run.stderr)")
    }

    @Test("a variable the executable does not read fails")
    func unknownVariableFails() throws {
        let folder = try Self.brokenCopy("broker.yaml") {
            $0.replacingOccurrences(of: "name: ASKRELAY_METRICS_ENDPOINT", with: "name: ASKRELAY_METRICS")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("askrelay-broker reads no ASKRELAY_METRICS "), "\(run.stderr)")
    }

    @Test("the rebalance Job's command line is checked against askrelay rebalance --help")
    func rebalanceJobFlagsChecked() throws {
        let folder = try Self.brokenCopy("scaling/rebalance-job.yaml") {
            $0.replacingOccurrences(of: "name: ASKRELAY_REBALANCE_EPOCH", with: "name: ASKRELAY_REBALANCE_EPOCHS")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("askrelay rebalance reads no ASKRELAY_REBALANCE_EPOCHS"), "\(run.stderr)")
    }

    @Test("a rebalance Job the admin NetworkPolicy does not let in fails")
    func rebalanceJobReachesAdmin() throws {
        let folder = try Self.brokenCopy("scaling/rebalance-job.yaml") {
            $0.replacingOccurrences(of: "component: rebalance", with: "component: mover")
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("the rebalance Job's pods may not reach port 5557"), "\(run.stderr)")
    }

    @Test("a container without a readiness probe fails")
    func probesRequired() throws {
        let folder = try Self.brokenCopy("broker.yaml") {
            $0.replacingOccurrences(
                of: "readinessProbe:\n            httpGet:",
                with: "startupProbe:\n            httpGet:"
            )
        }
        defer { folder.cleanup() }
        let run = try Self.validate(folder.url)
        #expect(run.status == 1)
        #expect(run.stderr.contains("StatefulSet askrelay-broker container limits: no readinessProbe"), "\(run.stderr)")
    }
}
