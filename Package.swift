// swift-tools-version:6.0
import PackageDescription

// AskRelay: a multi-process "ask a parent" message-queue system over ZeroMQ.
// No external package dependencies: C libraries arrive through system library targets.

// Swift 6 language mode (below) gives complete strict concurrency checking.
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "AskRelay",
    products: [
        // The model alone (Foundation only): a program that reads or writes questions links no libzmq.
        .library(name: "AskModel", targets: ["AskModel"]),
        // The client: AskCenter, ContactApprovals, CommunicationLimits queries, GuardianCenter and their connection.
        // It re-exports AskProtocol (and so AskModel and WireBytes), AskKeys and AskLogging: one import builds a center.
        // Its public API names no ZeroMQ type (a center is given an opaque ClientContext); askclient-usecheck shows it.
        .library(name: "AskClient", targets: ["AskClient"]),
        // The cluster harness: real askrelay processes for a test or a tool (no Swift Testing).
        .library(name: "AskRelayCluster", targets: ["AskRelayCluster"]),
        // Swift Testing support: the `.askRelayCluster()` trait; re-exports the harness, the client and the model.
        .library(name: "AskRelayTesting", targets: ["AskRelayTesting", "AskRelayCluster"]),
        .executable(name: "askrelay", targets: ["askrelay"]),
        .executable(name: "askrelay-broker", targets: ["askrelay-broker"]),
        .executable(name: "askrelay-limits", targets: ["askrelay-limits"]),
        .executable(name: "askrelay-parent", targets: ["askrelay-parent"]),
        .executable(name: "askrelay-child", targets: ["askrelay-child"]),
    ],
    targets: [
        // C libraries: SQLite through pkg-config; libzmq without it, since libzmq.pc's private requirements
        // (krb5-gssapi) add `-isystem /usr/include/mit-krb5`, which SwiftPM refuses with a warning in every build,
        // ours and a dependent package's. zmq.h is in /usr/include and the module map links zmq (make deps installs
        // libzmq3-dev).
        .systemLibrary(name: "CZeroMQ"),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // Byte-level values that need no libzmq: a multipart message as one storage plus frame boundaries, a CURVE
        // key pair as text. The ZeroMQ wrapper sends and receives them; the wire codec parses and encodes them.
        .target(name: "WireBytes", swiftSettings: strict),
        // Small helpers every other target shares, Foundation only: the Duration conversions to and from plain numbers,
        // the duration grammar and value bounds, OneShot, and dedicated threads (one to start a named thread, one to
        // await blocking work off the cooperative pool). AskModel re-exports its public part.
        .target(name: "AskBasics", swiftSettings: strict),
        // A small, complete Swift wrapper over libzmq. Nothing project-specific. Re-exports WireBytes.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ", "WireBytes", "AskBasics"], swiftSettings: strict),
        // The power-cut and I/O-error VFS under SQLite (docs/reliability.md). Its code is inside
        // `#ifdef ASKRELAY_FAULT_VFS`, defined for debug builds only: a release binary holds none of it.
        .target(
            name: "CFaultVFS",
            dependencies: ["CSQLite"],
            cSettings: [.define("ASKRELAY_FAULT_VFS", .when(configuration: .debug))]
        ),
        // A small Swift wrapper over SQLite. Nothing project-specific.
        .target(name: "SQLite", dependencies: ["CSQLite", "CFaultVFS"], swiftSettings: strict),
        // Structured, levelled log lines (swift-log's shape, no dependency).
        .target(name: "AskLogging", swiftSettings: strict),
        // Prometheus metrics: counters, gauges and fixed-bucket histograms, the text exposition format and a small
        // HTTP server for `GET /metrics` on a thread of its own.
        .target(name: "AskMetrics", dependencies: ["AskLogging", "AskBasics"], swiftSettings: strict),
        // Hand-written command-line parsing, signals and output lines shared by every executable. Re-exports AskBasics
        // (the duration grammar, value bounds, Duration conversions and dedicated threads).
        .target(name: "AskCLI", dependencies: ["AskBasics"], swiftSettings: strict),
        // The one process harness: the supervisor (start, watch, signal, restart child processes), the process-group
        // guard, RelayProcess (a process awaited by its ready line, with fault control), the ReadyLine the
        // executables print, the executables lookup and scratch folders.
        .target(name: "AskRelayProcesses", dependencies: ["AskBasics"], swiftSettings: strict),
        // Userspace links between a process and its broker with faults a test turns on and off (partition, one-way
        // partition, delay, reset, stall): plain sockets and one poll thread, Foundation (and AskBasics) only.
        .target(name: "AskLinks", dependencies: ["AskBasics"], swiftSettings: strict),

        // The model: PermissionKit-shaped Codable types, validation, message bodies and their JSON. Foundation (and
        // AskBasics, whose duration grammar, value bounds and OneShot it re-exports) only, no libzmq (AskModelTests
        // checks the link of askmodel-linkcheck with ldd).
        .target(name: "AskModel", dependencies: ["AskBasics"], swiftSettings: strict),
        // The wire: frames, codec and session bodies, on bytes (WireBytes' Multipart); and the trace: its lines, a
        // run's trace files read (TraceFolder) and one flow drawn (FlowDiagram's SVG, FlowTimeline's text), which the
        // simulation's report and the story runner share. No libzmq: the fuzz replayer askrelay-fuzz links it without
        // (AskModelTests checks with ldd). Re-exports AskModel and WireBytes.
        .target(name: "AskProtocol", dependencies: ["AskModel", "WireBytes"], swiftSettings: strict),
        // Trace lines as OpenTelemetry spans (OTLP/HTTP JSON), a plain-HTTP exporter, and the live export of a running
        // process's spans (--otlp-endpoint; docs/tracing.md).
        .target(name: "AskTelemetry", dependencies: ["AskProtocol", "AskBasics"], swiftSettings: strict),
        // CURVE key files, principals and key generation (libzmq makes and checks the keys).
        .target(name: "AskKeys", dependencies: ["AskProtocol", "ZeroMQ"], swiftSettings: strict),
        // The broker as a library (testable in-process), with its SQLite journal.
        .target(
            name: "AskBroker",
            dependencies: [
                "AskProtocol", "AskKeys", "ZeroMQ", "AskLogging", "AskMetrics", "SQLite", "AskBasics", "AskTelemetry",
            ],
            swiftSettings: strict
        ),

        // The client library for Swift programs (AskCenter, ContactApprovals, GuardianCenter) and the connection
        // runtime every worker shares (WorkerConnection, CurveOptions).
        .target(
            name: "AskClient",
            dependencies: ["AskProtocol", "AskKeys", "ZeroMQ", "AskLogging", "SQLite", "AskBasics"],
            swiftSettings: strict
        ),
        // Worker behaviours (child, parent, limits) over the client's connection runtime.
        .target(
            name: "AskAgents",
            dependencies: [
                "AskClient", "AskProtocol", "ZeroMQ", "AskLogging", "AskMetrics", "AskCLI", "SQLite", "AskBasics",
                "AskTelemetry",
            ],
            swiftSettings: strict
        ),
        // Scenarios, metrics, invariant checking, reports (processes are supervised with AskRelayProcesses).
        .target(
            name: "AskSimulation",
            dependencies: [
                "AskProtocol", "AskKeys", "AskAgents", "AskBroker", "ZeroMQ", "AskLogging", "AskCLI",
                "AskRelayProcesses", "SQLite", "AskLinks", "AskBasics",
            ],
            swiftSettings: strict
        ),
        // Story files (`askrelay test`): their format and checks, the runner that plays them against fresh broker and
        // limits processes with in-process children and guardians, and the runner's text and JUnit output, with a
        // failing step's diagram drawn from the story's trace.
        .target(
            name: "AskStories",
            dependencies: ["AskRelayCluster", "AskClient", "AskProtocol"],
            swiftSettings: strict
        ),
        // Load experiments: relay round trips, complete ask flows, pending questions, rate sweeps, the latency
        // histogram they record into, and their reports. Servers are started as AskRelayProcesses' RelayProcess.
        .target(
            name: "AskLoad",
            dependencies: [
                "AskProtocol", "AskClient", "ZeroMQ", "AskLogging", "AskCLI", "AskRelayProcesses", "AskBasics",
            ],
            swiftSettings: strict
        ),

        // The cluster harness: starts askrelay-broker, askrelay-limits (and parent/child workers) as real processes in
        // a temporary folder, with limits administration, fault control and ledger reads (through the broker's and
        // the limits worker's own read APIs, so each schema has one owner). No `import Testing`.
        .target(
            name: "AskRelayCluster",
            dependencies: [
                "AskClient", "AskRelayProcesses", "AskLogging", "AskProtocol", "AskKeys", "AskBroker", "AskAgents",
                "ZeroMQ", "AskLinks", "AskBasics",
            ],
            swiftSettings: strict
        ),
        // Swift Testing support over AskRelayCluster: the scoping trait, and on failure its logs and the failed flows'
        // diagram attached.
        .target(
            name: "AskRelayTesting",
            dependencies: ["AskRelayCluster", "AskClient", "AskModel"],
            swiftSettings: strict
        ),

        // Executables: each `main` only parses arguments, builds the service and runs it.
        .executableTarget(
            name: "askrelay",
            dependencies: [
                "ZeroMQ", "CZeroMQ", "AskCLI", "AskProtocol", "AskKeys", "AskSimulation", "AskLoad", "AskBroker",
                "AskLogging", "AskStories", "AskRelayProcesses", "AskLinks", "AskTelemetry",
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "askrelay-broker",
            dependencies: ["AskBroker", "AskProtocol", "AskCLI", "AskLogging", "AskMetrics", "AskRelayProcesses"],
            swiftSettings: strict
        ),

        .executableTarget(
            name: "askrelay-limits",
            dependencies: ["AskAgents", "AskClient", "AskCLI", "AskLogging", "AskMetrics", "AskRelayProcesses"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "askrelay-parent",
            dependencies: ["AskAgents", "AskClient", "AskCLI", "AskLogging", "AskMetrics", "AskRelayProcesses"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "askrelay-child",
            dependencies: ["AskAgents", "AskClient", "AskCLI", "AskLogging", "AskMetrics", "AskRelayProcesses"],
            swiftSettings: strict
        ),

        // Test helpers over the process harness alone (Foundation and AskBasics below it), for every test target:
        // temporary folders and off-pool work (AskRelayProcesses' ScratchFolder, AskBasics' onDedicatedThread),
        // collected events with deadlines, an HTTP client.
        .target(
            name: "AskTestKit",
            dependencies: ["AskRelayProcesses", "AskBasics"],
            path: "Tests/AskTestKit",
            swiftSettings: strict
        ),
        // Test helpers over the broker and the wire: an in-process broker, a hand-driven protocol peer, a stats
        // reader (the cluster harness's stats subscription). Re-exports AskTestKit.
        .target(
            name: "AskTestSupport",
            dependencies: ["AskTestKit", "AskProtocol", "ZeroMQ", "AskBroker", "AskLogging", "AskRelayCluster"],
            path: "Tests/AskTestSupport",
            swiftSettings: strict
        ),

        // The protocol fuzz target: libFuzzer with `make fuzz`, a corpus replayer otherwise. The wire alone, no libzmq
        // (AskModelTests checks its link with ldd).
        .executableTarget(name: "askrelay-fuzz", dependencies: ["AskProtocol"], swiftSettings: strict),

        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ", "CZeroMQ", "AskTestKit"], swiftSettings: strict),
        .testTarget(name: "SQLiteTests", dependencies: ["SQLite", "AskTestKit"], swiftSettings: strict),
        .testTarget(name: "AskCLITests", dependencies: ["AskCLI"], swiftSettings: strict),
        // The supervisor, RelayProcess, ReadyLine, the executables lookup and scratch folders, with real processes.
        .testTarget(
            name: "AskRelayProcessesTests",
            dependencies: ["AskRelayProcesses", "AskTestKit"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskMetricsTests",
            dependencies: ["AskMetrics", "AskLogging", "AskTestKit"],
            swiftSettings: strict
        ),
        // A program that depends on AskModel alone; AskModelTests runs `ldd` on it to show the model needs no libzmq.
        .executableTarget(
            name: "askmodel-linkcheck",
            dependencies: ["AskModel"],
            path: "Tests/AskModelLinkCheck",
            swiftSettings: strict
        ),

        // A client use that imports AskClient alone (no ZeroMQ): building it is the check that AskClient's public API
        // names no ZeroMQ type; PackageLayoutTests checks its dependencies and imports, AskClientTests runs it against a
        // real broker.
        .executableTarget(
            name: "askclient-usecheck",
            dependencies: ["AskClient"],
            path: "Tests/AskClientUseCheck",
            swiftSettings: strict
        ),

        // The model's tests. The process harness (AskRelayProcesses, AskTestKit: Foundation and AskBasics, no libzmq)
        // finds the linkcheck programs; the ldd checks look at those programs, not at the one test binary SwiftPM links
        // every test target into.
        .testTarget(
            name: "AskModelTests",
            dependencies: ["AskModel", "AskRelayProcesses", "AskTestKit"],
            resources: [.copy("Fixtures")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskProtocolWireTests",
            dependencies: ["AskProtocol", "AskTestKit"],
            swiftSettings: strict
        ),
        .testTarget(name: "JournalTests", dependencies: ["AskBroker", "SQLite", "AskTestKit"], swiftSettings: strict),
        .testTarget(
            name: "AskBrokerTests",
            dependencies: [
                "AskBroker", "AskAgents", "AskProtocol", "AskKeys", "ZeroMQ", "AskLogging", "AskTestSupport",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskClientTests",
            dependencies: [
                "AskClient", "AskBroker", "AskProtocol", "AskKeys", "ZeroMQ", "AskLogging", "AskRelayProcesses",
                "AskTestSupport",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskAgentsTests",
            dependencies: [
                "AskAgents", "AskClient", "AskBroker", "AskProtocol", "ZeroMQ", "AskLogging", "AskMetrics",
                "AskTestSupport", "SQLite",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskSimulationTests",
            dependencies: [
                "AskSimulation", "AskAgents", "AskBroker", "AskProtocol", "ZeroMQ", "AskLogging", "AskCLI",
                "AskTestKit", "AskTestSupport",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskLoadTests",
            dependencies: ["AskLoad", "AskBroker", "AskProtocol", "ZeroMQ", "AskLogging", "AskCLI", "AskTestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AskStoriesTests",
            dependencies: ["AskStories", "AskModel", "AskRelayProcesses", "AskTestKit"],
            exclude: ["Fixtures"],
            swiftSettings: strict
        ),
        // Starts a cluster and waits to be killed: AskRelayClusterTests kill -9 it and check the cluster died too.
        .executableTarget(
            name: "askrelay-cluster-holder",
            dependencies: ["AskRelayCluster", "AskCLI"],
            path: "Tests/AskRelayClusterHolder",
            swiftSettings: strict
        ),
        // The harness itself, with real processes.
        .testTarget(
            name: "AskRelayClusterTests",
            dependencies: ["AskRelayCluster", "AskRelayProcesses", "AskClient", "AskModel", "AskTestKit"],
            swiftSettings: strict
        ),
        // Every rule of the ask flow against real processes, written as a team would: only the public products (and the
        // dependency-free test helpers).
        .testTarget(name: "FlowRuleTests", dependencies: ["AskRelayTesting", "AskTestKit"], swiftSettings: strict),
        // The links: the relay with plain sockets, and through the cluster harness with real processes.
        .testTarget(
            name: "AskLinksTests",
            dependencies: ["AskLinks", "AskRelayTesting", "AskTestKit"],
            swiftSettings: strict
        ),
        // docs/architecture.md's table of targets (and README.md's Layout rows) against `swift package dump-package`.
        .testTarget(name: "PackageLayoutTests", dependencies: ["AskTestKit"], swiftSettings: strict),
        // Real processes: broker, workers and askrelay executables started by the tests.
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "AskProtocol", "AskKeys", "AskAgents", "AskBroker", "AskClient", "AskSimulation", "AskLoad", "ZeroMQ",
                "AskLogging", "SQLite", "AskTestSupport", "AskCLI", "AskRelayProcesses", "AskRelayCluster",
            ],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
