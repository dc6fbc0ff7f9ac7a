"""Span export is switched on by the standard OTEL_* variables, and only by them."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from codemode._otel_export import export_from_environment


def test_without_an_endpoint_nothing_is_installed() -> None:
    assert export_from_environment({}) is False


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, int]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        Collector.received.append((self.path, length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def collector() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.integration
def test_a_run_exports_its_spans_to_the_configured_collector(collector: str) -> None:
    """A real OTLP/HTTP export from a codemode process to a collector listening on 127.0.0.1."""
    Collector.received.clear()
    program = (
        "from codemode._otel_export import export_from_environment\n"
        "from codemode._tracing import tracer\n"
        "from opentelemetry import trace\n"
        "assert export_from_environment()\n"
        "with tracer().start_as_current_span('codemode.run'):\n"
        "    pass\n"
        "trace.get_tracer_provider().shutdown()\n"  # flushes the batch
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert [path for path, _ in Collector.received] == ["/v1/traces"]
    assert Collector.received[0][1] > 0
