#!/usr/bin/env python3
"""A small OTLP/HTTP JSON trace receiver for the tests: every request is parsed with the official OpenTelemetry
protobuf definitions (PyPI opentelemetry-proto), not with AskRelay's own reader.

Listens on 127.0.0.1 (an ephemeral port), prints `listening PORT`, and for each POST /v1/traces: converts the ids
from OTLP/JSON's hex to protobuf JSON's base64 (the one difference between the two encodings), parses the body
strictly into ExportTraceServiceRequest (an unknown field or a wrong type is an error), appends one JSON line per
request to OUT (service name and every span as parsed) and answers 200; a body that does not parse gets 400 with
the parser's message. With --refuse it answers every request 503. Ends on SIGTERM.
"""

import base64
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT = sys.argv[1]
REFUSE = "--refuse" in sys.argv[2:]


def hex_ids_to_base64(request):
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return request


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if REFUSE:
            return self.answer(503, "refused by the test receiver")
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/json":
            return self.answer(404, "POST /v1/traces with Content-Type application/json")
        try:
            parsed = json_format.Parse(
                json.dumps(hex_ids_to_base64(json.loads(body))), trace_service_pb2.ExportTraceServiceRequest()
            )
        except Exception as error:  # the parser's own message goes back to the exporter
            return self.answer(400, "%s" % error)
        for resource in parsed.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            instance = next(
                (a.value.string_value for a in resource.resource.attributes if a.key == "service.instance.id"), None
            )
            spans = []
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append({
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                        "kind": span.kind, "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "status": span.status.code, "status_message": span.status.message,
                        "attributes": {a.key: a.value.string_value for a in span.attributes},
                    })
            with open(OUT, "a") as out:
                out.write(json.dumps({"service": service, "instance": instance, "spans": spans}) + "\n")
        self.answer(200, "{}")

    def answer(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *arguments):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("listening %d" % server.server_address[1], flush=True)
server.serve_forever()
