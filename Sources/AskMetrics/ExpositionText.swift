/// Renders metric families in Prometheus' text exposition format (version 0.0.4).
///
/// Families come out sorted by name and each family's series by their label values, so the same numbers always give
/// the same page. A histogram's series are its cumulative `_bucket` lines (`le` last among the labels, ending with
/// `+Inf`), then `_sum` and `_count`.
public enum ExpositionText {
    /// The `Content-Type` of a page.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    public static func render(_ families: [MetricFamily]) -> String {
        var text = ""
        text.reserveCapacity(families.count * 160)
        for family in families.sorted(by: { $0.name < $1.name }) {
            text += "# HELP \(family.name) \(escapeHelp(family.help))\n"
            text += "# TYPE \(family.name) \(family.type.rawValue)\n"
            let samples = family.samples.sorted { $0.labels.lexicographicallyPrecedes($1.labels, by: labelOrder) }
            for sample in samples {
                switch sample.value {
                case .number(let value):
                    text += "\(family.name)\(labelText(sample.labels)) \(number(value))\n"
                case .histogram(let histogram):
                    let cumulative = histogram.cumulativeCounts
                    for (index, count) in cumulative.enumerated() {
                        let bound = index < histogram.bounds.count ? number(histogram.bounds[index]) : "+Inf"
                        let labels = sample.labels + [MetricLabel("le", bound)]
                        text += "\(family.name)_bucket\(labelText(labels)) \(count)\n"
                    }
                    text += "\(family.name)_sum\(labelText(sample.labels)) \(number(histogram.sum))\n"
                    text += "\(family.name)_count\(labelText(sample.labels)) \(histogram.count)\n"
                }
            }
        }
        return text
    }

    private static func labelOrder(_ left: MetricLabel, _ right: MetricLabel) -> Bool {
        left.name != right.name ? left.name < right.name : left.value < right.value
    }

    static func labelText(_ labels: [MetricLabel]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.name)=\"\(escapeLabelValue($0.value))\"" }.joined(separator: ",") + "}"
    }

    /// A value as the format writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
    public static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// HELP text: backslash and line feed are escaped.
    public static func escapeHelp(_ text: String) -> String {
        var escaped = ""
        // Scalars, not characters: "\r\n" is one Character, and its line feed must be escaped too.
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    /// Label values: backslash, double quote and line feed are escaped.
    public static func escapeLabelValue(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }
}
