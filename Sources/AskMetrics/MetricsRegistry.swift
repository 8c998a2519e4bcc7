import Synchronization

/// Counters and histograms that several threads or tasks update, under one lock each update takes briefly.
///
/// Series are registered up front and updated through their handle: an update is the lock, an index and an add,
/// with no allocation. ``families()`` copies the numbers out for a scrape.
public final class MetricsRegistry: Sendable {
    /// A registered counter series.
    public struct Counter: Sendable {
        let index: Int
    }

    /// A registered histogram series.
    public struct HistogramSeries: Sendable {
        let index: Int
    }

    private struct Series<Value: Sendable>: Sendable {
        let name: String
        let help: String
        let labels: [MetricLabel]
        var value: Value
    }

    private struct Storage: Sendable {
        var counters: [Series<Double>] = []
        var histograms: [Series<Histogram>] = []
    }

    private let storage = Mutex(Storage())

    public init() {}

    /// Registers a counter series (same name, same help, other labels: another series of the family).
    public func counter(_ name: String, help: String, labels: [MetricLabel] = []) -> Counter {
        precondition(MetricName.isValid(name), "'\(name)' is not a valid metric name")
        return storage.withLock { storage in
            storage.counters.append(Series(name: name, help: help, labels: labels, value: 0))
            return Counter(index: storage.counters.count - 1)
        }
    }

    /// Registers a histogram series with fixed bucket bounds.
    public func histogram(
        _ name: String,
        help: String,
        bounds: [Double],
        labels: [MetricLabel] = []
    ) -> HistogramSeries {
        precondition(MetricName.isValid(name), "'\(name)' is not a valid metric name")
        return storage.withLock { storage in
            storage.histograms.append(Series(name: name, help: help, labels: labels, value: Histogram(bounds: bounds)))
            return HistogramSeries(index: storage.histograms.count - 1)
        }
    }

    public func add(_ counter: Counter, _ amount: Double = 1) {
        storage.withLock { $0.counters[counter.index].value += amount }
    }

    public func observe(_ series: HistogramSeries, _ value: Double) {
        storage.withLock { $0.histograms[series.index].value.observe(value) }
    }

    /// The current value of a counter (tests, summaries).
    public func value(_ counter: Counter) -> Double {
        storage.withLock { $0.counters[counter.index].value }
    }

    /// A copy of a histogram series (tests, summaries).
    public func histogram(_ series: HistogramSeries) -> Histogram {
        storage.withLock { $0.histograms[series.index].value }
    }

    /// Every registered series, grouped into families by name (the help of a family's first series).
    public func families() -> [MetricFamily] {
        let storage = storage.withLock { $0 }
        var families: [String: MetricFamily] = [:]
        for series in storage.counters {
            families[series.name, default: MetricFamily(name: series.name, help: series.help, type: .counter)]
                .samples.append(MetricSample(labels: series.labels, value: .number(series.value)))
        }
        for series in storage.histograms {
            families[series.name, default: MetricFamily(name: series.name, help: series.help, type: .histogram)]
                .samples.append(MetricSample(labels: series.labels, value: .histogram(series.value)))
        }
        return Array(families.values)
    }
}

/// The latest families a producer (a loop thread) published, for the server thread to read.
///
/// Publishing swaps one array under a lock nobody holds for long; the server renders outside it.
public final class MetricsCell: Sendable {
    private let latest = Mutex<[MetricFamily]>([])

    public init() {}

    public func publish(_ families: [MetricFamily]) {
        latest.withLock { $0 = families }
    }

    public func read() -> [MetricFamily] {
        latest.withLock { $0 }
    }
}
