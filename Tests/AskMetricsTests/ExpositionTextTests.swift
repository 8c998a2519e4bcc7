import Testing

@testable import AskMetrics

@Suite struct HistogramTests {
    @Test func valuesOnABoundGoInThatBucketAndAboveEveryBoundInInf() {
        var histogram = Histogram(bounds: [0.1, 1, 10])
        for value in [0.05, 0.1, 0.5, 1, 10, 10.5, 1000] { histogram.observe(value) }
        #expect(histogram.counts == [2, 2, 1, 2])
        #expect(histogram.cumulativeCounts == [2, 4, 5, 7])
        #expect(histogram.count == 7)
        #expect(histogram.sum == 0.05 + 0.1 + 0.5 + 1 + 10 + 10.5 + 1000)
    }

    @Test func durationsAreSeconds() {
        var histogram = Histogram(bounds: [0.001, 0.01])
        histogram.observe(Duration.microseconds(500))
        histogram.observe(Duration.milliseconds(5))
        histogram.observe(Duration.seconds(2))
        #expect(histogram.counts == [1, 1, 1])
        #expect(abs(histogram.sum - 2.0055) < 1e-12)
    }
}

@Suite struct ExpositionTextTests {
    @Test func exactPageSortedByNameAndLabels() {
        var latency = Histogram(bounds: [0.1, 0.5, 2])
        latency.observe(0.0625)
        latency.observe(0.25)
        latency.observe(3)
        let families = [
            MetricFamily.histogram("b_latency_seconds", help: "How long.", latency),
            MetricFamily.labelled(
                "a_routed_total",
                .counter,
                help: "Routed messages.",
                label: "kind",
                values: ["ask": 3, "answer": 12]
            ),
            MetricFamily.single("a_queued", .gauge, help: "Queued now.", 7),
        ]
        let expected = """
            # HELP a_queued Queued now.
            # TYPE a_queued gauge
            a_queued 7
            # HELP a_routed_total Routed messages.
            # TYPE a_routed_total counter
            a_routed_total{kind="answer"} 12
            a_routed_total{kind="ask"} 3
            # HELP b_latency_seconds How long.
            # TYPE b_latency_seconds histogram
            b_latency_seconds_bucket{le="0.1"} 1
            b_latency_seconds_bucket{le="0.5"} 2
            b_latency_seconds_bucket{le="2"} 2
            b_latency_seconds_bucket{le="+Inf"} 3
            b_latency_seconds_sum 3.3125
            b_latency_seconds_count 3

            """
        #expect(ExpositionText.render(families) == expected)
    }

    @Test func histogramLabelsComeBeforeLe() {
        var histogram = Histogram(bounds: [1])
        histogram.observe(0.5)
        let family = MetricFamily(
            name: "h",
            help: "h",
            type: .histogram,
            samples: [MetricSample(labels: [MetricLabel("stage", "send")], value: .histogram(histogram))]
        )
        let lines = ExpositionText.render([family]).split(separator: "\n").map(String.init)
        #expect(
            lines == [
                "# HELP h h", "# TYPE h histogram", #"h_bucket{stage="send",le="1"} 1"#,
                #"h_bucket{stage="send",le="+Inf"} 1"#, #"h_sum{stage="send"} 0.5"#, #"h_count{stage="send"} 1"#,
            ]
        )
    }

    @Test func escaping() {
        let family = MetricFamily(
            name: "x_total",
            help: "a \\ backslash\nand a \"quote\"",
            type: .counter,
            samples: [MetricSample(labels: [MetricLabel("code", "a\"b\\c\r\nd")], value: .number(1))]
        )
        let expected = """
            # HELP x_total a \\\\ backslash\\nand a "quote"
            # TYPE x_total counter
            x_total{code="a\\"b\\\\c\r\\nd"} 1

            """
        #expect(ExpositionText.render([family]) == expected)
    }

    @Test func numbers() {
        #expect(ExpositionText.number(0) == "0")
        #expect(ExpositionText.number(-3) == "-3")
        #expect(ExpositionText.number(0.000_05) == "5e-05")
        #expect(ExpositionText.number(2.5) == "2.5")
        #expect(ExpositionText.number(.infinity) == "+Inf")
        #expect(ExpositionText.number(-.infinity) == "-Inf")
        #expect(ExpositionText.number(.nan) == "NaN")
        #expect(ExpositionText.number(1e20) == "1e+20")
    }

    @Test func names() {
        #expect(MetricName.isValid("askrelay_broker_routed_total"))
        #expect(MetricName.isValid("a:b"))
        #expect(!MetricName.isValid("9lives"))
        #expect(!MetricName.isValid("with-dash"))
        #expect(!MetricName.isValid(""))
        #expect(MetricName.isValidLabel("kind"))
        #expect(!MetricName.isValidLabel("a:b"))
        #expect(!MetricName.isValidLabel("__reserved"))
    }

    @Test func registryGroupsSeriesIntoFamilies() {
        let registry = MetricsRegistry()
        let approved = registry.counter("flows_total", help: "Flows.", labels: [MetricLabel("outcome", "approved")])
        let denied = registry.counter("flows_total", help: "Flows.", labels: [MetricLabel("outcome", "denied")])
        let stage = registry.histogram("stage_seconds", help: "Stage.", bounds: [1])
        registry.add(denied)
        registry.add(denied)
        registry.add(approved)
        registry.observe(stage, 0.5)
        registry.observe(stage, 2)
        let expected = """
            # HELP flows_total Flows.
            # TYPE flows_total counter
            flows_total{outcome="approved"} 1
            flows_total{outcome="denied"} 2
            # HELP stage_seconds Stage.
            # TYPE stage_seconds histogram
            stage_seconds_bucket{le="1"} 1
            stage_seconds_bucket{le="+Inf"} 2
            stage_seconds_sum 2.5
            stage_seconds_count 2

            """
        #expect(ExpositionText.render(registry.families()) == expected)
    }
}

@Suite struct MetricsEndpointTests {
    @Test func parses() {
        #expect(MetricsEndpoint(parsing: "127.0.0.1:9464") == MetricsEndpoint(host: "127.0.0.1", port: 9464))
        #expect(MetricsEndpoint(parsing: "localhost:0") == MetricsEndpoint(host: "127.0.0.1", port: 0))
        #expect(MetricsEndpoint(parsing: "0.0.0.0:65535") == MetricsEndpoint(host: "0.0.0.0", port: 65535))
    }

    @Test(arguments: [
        ("9464", "has no port"), ("http://127.0.0.1:9464", "is a URL"), ("127.0.0.1:", "is not a port"),
        ("127.0.0.1:65536", "is not a port"), ("127.0.0.1:-1", "is not a port"), ("host:80", "not an IPv4"),
        ("256.0.0.1:80", "not an IPv4"), ("1.2.3:80", "not an IPv4"), (":9464", "not an IPv4"),
    ])
    func refuses(text: String, problem: String) {
        #expect(MetricsEndpoint(parsing: text) == nil)
        #expect(MetricsEndpoint.problem(text)?.contains(problem) == true, "\(MetricsEndpoint.problem(text) ?? "")")
    }
}

@Suite struct HTTPRequestHeadTests {
    @Test func headEnd() {
        #expect(HTTPRequestHead.end(of: Array("GET / HTTP/1.1\r\nHost: x\r\n\r\nrest".utf8)) == 27)
        #expect(HTTPRequestHead.end(of: Array("GET / HTTP/1.1\n\n".utf8)) == 16)
        #expect(HTTPRequestHead.end(of: Array("GET / HTTP/1.1\r\nHost: x\r\n".utf8)) == nil)
    }

    @Test func parses() throws {
        let head = Array("GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(try HTTPRequestHead.parse(head).get() == HTTPRequestHead(method: "GET", path: "/metrics"))
    }

    @Test(arguments: [
        "GET /metrics\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n", "get /metrics HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2\r\n\r\n", "GET /met\u{1}rics HTTP/1.1\r\n\r\n",
        "\r\n\r\n",
    ])
    func refuses(text: String) {
        #expect(throws: HTTPRequestProblem.self) { try HTTPRequestHead.parse(Array(text.utf8)).get() }
    }
}
