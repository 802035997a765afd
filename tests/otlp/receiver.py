"""An OTLP/HTTP trace receiver for flexrun's integration tests, decoding what it receives with the
official OpenTelemetry protobuf definitions (`opentelemetry-proto` from PyPI, pinned in
scripts/test, which installs it into target/test-tools/otel-venv).

    python tests/otlp/receiver.py PORT [--mode ok|fail|hang]

listens on 127.0.0.1:PORT (0: a port the kernel chooses) and prints one line `listening <port>`
to stdout once it does. Routes:

- POST /v1/traces: an ExportTraceServiceRequest, Content-Type application/x-protobuf, the body
  gzip-compressed or not (Content-Encoding: gzip). Answers by the mode:
  - ok (the default): stores every span (see `span_json`) and answers 200 with an empty
    ExportTraceServiceResponse (application/x-protobuf). A body that does not decode: 400 (415
    for another Content-Type or Content-Encoding), storing nothing.
  - fail: answers 503 and stores no span.
  - hang: sleeps 60 s, then answers 503; stores no span.
  Every request is recorded, whatever the mode (see GET /requests).
- POST /control: JSON {"mode": "ok" | "fail" | "hang"}, the mode from now on.
- GET /spans: every span stored so far, in the order received, as a JSON list.
- GET /requests: every POST /v1/traces so far, in order: {"headers": {lowercased name: value},
  "spans": the number of spans in its body (0 when it did not decode), "mode": the mode it met,
  "status": the status it was answered with (null while a `hang` request still sleeps)}.
- POST /reset: forgets the spans and requests.
- GET /healthz: 200 "ok" (readiness).

State lives in this process: a test that needs a clean receiver starts one (or POSTs /reset).
"""

import argparse
import gzip
import json
import math
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
except ImportError as error:  # the helper (tests/support/otlp.rs) reads exit status 3 as "not installed"
    print(
        f"tests/otlp/receiver.py: cannot import the OpenTelemetry protobuf definitions ({error}): "
        "scripts/test installs opentelemetry-proto into target/test-tools/otel-venv and points "
        "FLEXRUN_OTEL_PYTHON at its python",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(3)

MODES = ("ok", "fail", "hang")
HANG_SECONDS = 60

LOCK = threading.Lock()
SPANS: list[dict] = []
REQUESTS: list[dict] = []
MODE = "ok"


def any_value(value):
    """An AnyValue as JSON: string, int, double, bool, list (array), object (kvlist), lowercase
    hex (bytes), null (unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind == "double_value" and not math.isfinite(value.double_value):
        return str(value.double_value)  # JSON has no NaN or infinity
    return getattr(value, kind)


def attributes(key_values):
    return {kv.key: any_value(kv.value) for kv in key_values}


def enum_name(enum, number):
    try:
        return enum.Name(number)
    except ValueError:  # a value newer than these definitions
        return str(number)


def span_json(span, resource, scope):
    return {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
        "traceState": span.trace_state,
        "flags": span.flags,
        "name": span.name,
        "kind": enum_name(Span.SpanKind, span.kind),
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "status": {"code": enum_name(Status.StatusCode, span.status.code), "message": span.status.message},
        "events": [
            {"name": e.name, "timeUnixNano": e.time_unix_nano, "attributes": attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {"traceId": l.trace_id.hex(), "spanId": l.span_id.hex(), "attributes": attributes(l.attributes)}
            for l in span.links
        ],
        "resource": resource,
        "scope": scope.name,
        "scopeVersion": scope.version,
    }


def decode(body):
    """The spans of an ExportTraceServiceRequest as JSON; DecodeError when it is not one."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(span_json(span, resource, scope_spans.scope))
    return spans


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "flexrun-otlp-receiver"

    def do_GET(self):
        if self.path in ("/spans", "/requests"):
            with LOCK:
                body = json.dumps(SPANS if self.path == "/spans" else REQUESTS).encode()
            self.send(200, body, "application/json")
        elif self.path == "/control":
            self.send_json(200, {"mode": MODE})
        elif self.path == "/healthz":
            self.send(200, b"ok", "text/plain")
        else:
            self.send(404, b"not found", "text/plain")

    def do_POST(self):
        try:
            body = self.read_body()
        except ValueError as error:
            self.send(400, str(error).encode(), "text/plain")
            self.close_connection = True
            return
        if self.path == "/v1/traces":
            self.export(body)
        elif self.path == "/control":
            self.control(body)
        elif self.path == "/reset":
            with LOCK:
                SPANS.clear()
                REQUESTS.clear()
            self.send_json(200, {})
        else:
            self.send(404, b"not found", "text/plain")

    def export(self, body):
        headers = {name.lower(): value for name, value in self.headers.items()}
        record = {"headers": headers, "spans": 0, "mode": MODE, "status": None}
        with LOCK:
            REQUESTS.append(record)
        status, text, spans = self.decode_export(body, headers)
        with LOCK:
            record["spans"] = len(spans)
        if record["mode"] == "fail":
            status, text = 503, b"fail mode"
        elif record["mode"] == "hang":
            time.sleep(HANG_SECONDS)
            status, text = 503, b"hang mode"
        elif status == 200:
            with LOCK:
                SPANS.extend(spans)
        with LOCK:
            record["status"] = status
        self.log_message("export: %d span(s), mode %s: %d", len(spans), record["mode"], status)
        if status == 200:
            self.send(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")
        else:
            self.send(status, text, "text/plain")

    @staticmethod
    def decode_export(body, headers):
        """(status, error text, spans) of an export's body."""
        media_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/x-protobuf":
            return 415, f"Content-Type {media_type!r}: only application/x-protobuf".encode(), []
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as error:
                return 400, f"gzip: {error}".encode(), []
        elif encoding != "identity":
            return 415, f"Content-Encoding {encoding!r}: only gzip".encode(), []
        try:
            return 200, b"", decode(body)
        except DecodeError as error:
            return 400, f"not an ExportTraceServiceRequest: {error}".encode(), []

    def control(self, body):
        global MODE
        try:
            mode = json.loads(body)["mode"]
        except (ValueError, KeyError, TypeError):
            self.send(400, b'expected {"mode": "ok" | "fail" | "hang"}', "text/plain")
            return
        if mode not in MODES:
            self.send(400, f"mode {mode!r}: one of {', '.join(MODES)}".encode(), "text/plain")
            return
        MODE = mode
        self.log_message("mode %s", mode)
        self.send_json(200, {"mode": mode})

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit():
            raise ValueError(f"Content-Length {length!r}")
        return self.rfile.read(int(length))

    def send_json(self, status, value):
        self.send(status, json.dumps(value).encode(), "application/json")

    def send(self, status, body, content_type):
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a `hang` request, typically)


def main():
    global MODE
    parser = argparse.ArgumentParser(description="OTLP/HTTP trace receiver for flexrun's tests")
    parser.add_argument("port", type=int)
    parser.add_argument("--mode", choices=MODES, default="ok")
    args = parser.parse_args()
    MODE = args.mode
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
