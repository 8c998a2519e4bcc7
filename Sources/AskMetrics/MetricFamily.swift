/// The kinds of metric the exposition format knows and AskRelay uses.
public enum MetricType: String, Sendable {
    case counter, gauge, histogram
}

/// One label of a sample: `name="value"`.
public struct MetricLabel: Sendable, Hashable {
    public let name: String
    public let value: String

    public init(_ name: String, _ value: String) {
        precondition(MetricName.isValidLabel(name), "'\(name)' is not a valid label name")
        self.name = name
        self.value = value
    }
}

/// A value of one series: a number, or a histogram's buckets, sum and count.
public enum MetricValue: Sendable {
    case number(Double)
    case histogram(Histogram)
}

/// One series of a family: its labels and its value.
public struct MetricSample: Sendable {
    public let labels: [MetricLabel]
    public let value: MetricValue

    public init(labels: [MetricLabel] = [], value: MetricValue) {
        self.labels = labels
        self.value = value
    }
}

/// A metric family as a scrape shows it: a name, its help text, its type and its series. A plain value, made by
/// whoever owns the numbers and handed to the server.
public struct MetricFamily: Sendable {
    public let name: String
    public let help: String
    public let type: MetricType
    public var samples: [MetricSample]

    public init(name: String, help: String, type: MetricType, samples: [MetricSample] = []) {
        precondition(MetricName.isValid(name), "'\(name)' is not a valid metric name")
        self.name = name
        self.help = help
        self.type = type
        self.samples = samples
    }

    /// A counter or gauge with one series and no labels.
    public static func single(_ name: String, _ type: MetricType, help: String, _ value: Double) -> MetricFamily {
        MetricFamily(name: name, help: help, type: type, samples: [MetricSample(value: .number(value))])
    }

    /// A counter or gauge with one label, one series per value of it (in the order of the label values).
    public static func labelled(
        _ name: String,
        _ type: MetricType,
        help: String,
        label: String,
        values: [String: Int]
    ) -> MetricFamily {
        let samples = values.sorted { $0.key < $1.key }.map { entry in
            MetricSample(labels: [MetricLabel(label, entry.key)], value: .number(Double(entry.value)))
        }
        return MetricFamily(name: name, help: help, type: type, samples: samples)
    }

    /// A histogram with one series and no labels.
    public static func histogram(_ name: String, help: String, _ histogram: Histogram) -> MetricFamily {
        MetricFamily(name: name, help: help, type: .histogram, samples: [MetricSample(value: .histogram(histogram))])
    }
}

/// The exposition format's name rules.
public enum MetricName {
    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    public static func isValid(_ name: String) -> Bool {
        valid(name, extra: ":")
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, and not starting with `__` (reserved).
    public static func isValidLabel(_ name: String) -> Bool {
        valid(name, extra: "") && !name.hasPrefix("__")
    }

    private static func valid(_ name: String, extra: String) -> Bool {
        guard let first = name.utf8.first else { return false }
        func letter(_ byte: UInt8) -> Bool {
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
                || extra.utf8.contains(byte)
        }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }
}
