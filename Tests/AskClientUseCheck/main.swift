import AskClient
import Foundation

// A client use that imports AskClient alone: building it is the check that AskClient's public API names no ZeroMQ
// type (a center is given an opaque `ClientContext`; CURVE settings, options and logger are AskClient's own or
// re-exported by it). PackageLayoutTests checks that this target depends on AskClient only and imports no ZeroMQ.
// Run as `askclient-usecheck <broker endpoint> [seconds]`: hosts child c1 and guardian g1 of family f1, waits up to
// `seconds` (default 10) for each to be registered, prints `registered` (exit 0) or `not registered` (exit 1), and
// stops them.

let arguments = CommandLine.arguments.dropFirst()
guard let broker = arguments.first else {
    FileHandle.standardError.write(Data("usage: askclient-usecheck <broker endpoint> [seconds]\n".utf8))
    exit(64)
}
let wait = Duration.seconds(arguments.dropFirst().first.flatMap { Int($0) } ?? 10)
let context = try ClientContext()
var childOptions = AskCenter.Options()
childOptions.curve = try CurveOptions.load(keyFile: nil, brokerKey: nil)
let center = try AskCenter(
    broker: broker,
    children: [ChildIdentity(id: "c1", family: "f1")],
    stateDirectory: nil,
    logger: AskLogger(label: "usecheck", level: .warning),
    context: context,
    options: childOptions
)
let guardians = try GuardianCenter(
    broker: broker,
    guardians: [GuardianIdentity(id: "g1", family: "f1")],
    logger: AskLogger(label: "usecheck", level: .warning),
    context: context,
    options: GuardianCenter.Options()
)
let childRegistered = await center.waitUntilRegistered(timeout: wait)
let guardianRegistered = await guardians.waitUntilRegistered(timeout: wait)
let registered = childRegistered && guardianRegistered
let child: ChildSession = center.child("c1")
_ = child.responses(for: CommunicationTopic.self)
await center.stop()
await guardians.stop()
print(registered ? "registered" : "not registered")
exit(registered ? 0 : 1)
