#!/usr/bin/env bash
# The outside-package check: a fresh package in a temporary folder depends on this checkout by path, on the
# products AskModel and AskClient, and runs its own `swift test`. It proves the products build and work as a
# dependency (no test-only resources, no unsafe flags, no target that only builds inside the repository).
# It writes nothing into the checkout: the scratch package, its build and its logs live in the temporary folder,
# which is removed at the end (kept with KEEP=1). Usage: Tests/PackageCheck/package-test.sh [CHECKOUT]
set -euo pipefail
SWIFT=${SWIFT:-swift}
checkout=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/askrelay-package-test.XXXXXX")
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT
marker="$work/.started"
touch "$marker"
start=$(date +%s)

mkdir -p "$work/Consumer/Tests/ConsumerTests"
cat > "$work/Consumer/Package.swift" <<SWIFT
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Consumer",
    dependencies: [.package(path: "$checkout")],
    targets: [
        .testTarget(
            name: "ConsumerTests",
            dependencies: [
                .product(name: "AskModel", package: "$(basename "$checkout")"),
                .product(name: "AskClient", package: "$(basename "$checkout")"),
            ]
        )
    ]
)
SWIFT

cat > "$work/Consumer/Tests/ConsumerTests/ProductTests.swift" <<'SWIFT'
import AskClient
import AskModel
import Foundation
import Testing

@Test func aQuestionFromTheModelAlone() throws {
    let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
    try question.validate(now: Date())
    #expect(question.choices.count == 2)
    let decoded = try JSONDecoder().decode(
        PermissionQuestion<CommunicationTopic>.self, from: try JSONEncoder().encode(question))
    #expect(decoded.id == question.id)
}

@Test func anAskCenterWithNoBrokerFailsClearly() async throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    var options = AskCenter.Options()
    options.askTimeout = .milliseconds(500)
    let center = try AskCenter(
        broker: "ipc://\(folder.path)/nobody", children: [ChildIdentity(id: "c1", family: "f1")],
        stateDirectory: nil, logger: AskLogger(label: "consumer", level: .critical), context: try ZMQContext(),
        options: options)
    #expect(await center.waitUntilRegistered(timeout: .milliseconds(500)) == false)
    let question = PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))
    do {
        try await center.child("c1").ask(question)
        Issue.record("ask succeeded with no broker")
    } catch {
        guard case .systemError(let message) = error else {
            Issue.record("expected systemError, got \(error)")
            return
        }
        #expect(message.contains("timed out"))
    }
    await center.stop()
}
SWIFT

echo "package-test: $work/Consumer depends on $checkout (products AskModel, AskClient)"
status=0
# SwiftPM's lock files and the tests' temporary folders go into the scratch folder too.
mkdir -p "$work/tmp"
(cd "$work/Consumer" && TMPDIR="$work/tmp" "$SWIFT" test 2>&1) | tee "$work/swift-test.log" | grep -E "error|warning: |passed|failed" || true
grep -Eq "Test run with 2 tests( in [0-9]+ suites?)? passed" "$work/swift-test.log" || status=1

# Nothing in the checkout may have changed (its own .build included).
changed=$(find "$checkout" -newer "$marker" -not -path "$checkout/.git/*" -print -quit 2>/dev/null || true)
if [ -n "$changed" ]; then
    echo "package-test: the check wrote into the checkout: $changed"
    status=1
fi
echo "package-test: $([ $status = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
[ $status = 0 ] || { echo "log: $work/swift-test.log"; KEEP=1; }
exit $status
