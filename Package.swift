// swift-tools-version:6.0
import PackageDescription

// AskRelay: a multi-process "ask a parent" message-queue system over ZeroMQ.
// No external package dependencies: C libraries arrive through system library targets.

// Swift 6 language mode (below) gives complete strict concurrency checking.
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "AskRelay",
    products: [
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        .executable(name: "askrelay", targets: ["askrelay"]),
    ],
    targets: [
        // C libraries through pkg-config.
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),

        // A small, complete Swift wrapper over libzmq. Nothing project-specific.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"], swiftSettings: strict),

        // The shared protocol: PermissionKit-shaped Codable model, validation, envelope and wire codec.
        .target(name: "AskProtocol", dependencies: ["ZeroMQ"], swiftSettings: strict),

        // Hand-written command-line parsing shared by every executable.
        .target(name: "AskCLI", swiftSettings: strict),

        // A small, complete Swift wrapper over SQLite. Nothing project-specific.
        .target(name: "SQLite", dependencies: ["CSQLite"], swiftSettings: strict),

        // The broker: routing loop, question ledger and its durable journal.
        .target(name: "AskBroker", dependencies: ["SQLite", "AskProtocol", "ZeroMQ"], swiftSettings: strict),

        .executableTarget(
            name: "askrelay",
            dependencies: ["ZeroMQ", "CZeroMQ", "AskCLI", "AskProtocol"],
            swiftSettings: strict
        ),

        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ", "CZeroMQ"], swiftSettings: strict),
        .testTarget(name: "AskProtocolWireTests", dependencies: ["AskProtocol", "ZeroMQ"], swiftSettings: strict),
        .testTarget(name: "AskCLITests", dependencies: ["AskCLI"], swiftSettings: strict),
        .testTarget(name: "SQLiteTests", dependencies: ["SQLite"], swiftSettings: strict),
        .testTarget(name: "JournalTests", dependencies: ["AskBroker", "SQLite"], swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
