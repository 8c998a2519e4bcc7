import AskSimulation

extension LatencySummary {
    /// A summary from figures known already (a sweep step's percentiles, a test's). LatencySummary's memberwise
    /// initializer is internal to AskSimulation; should it become public, this one goes.
    init(
        count: UInt64,
        minUs: Double,
        meanUs: Double,
        p50Us: Double,
        p90Us: Double,
        p99Us: Double,
        p999Us: Double,
        maxUs: Double
    ) {
        self = LatencyHistogram().summary
        self.count = count
        self.minUs = minUs
        self.meanUs = meanUs
        self.p50Us = p50Us
        self.p90Us = p90Us
        self.p99Us = p99Us
        self.p999Us = p999Us
        self.maxUs = maxUs
    }
}
