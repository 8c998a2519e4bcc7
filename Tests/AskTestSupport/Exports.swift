// The dependency-free helpers (temporary folders, off-pool work, collected events, an HTTP client) come with this
// target: a test target that has a broker or raw peers imports AskTestSupport alone.
@_exported import AskTestKit
