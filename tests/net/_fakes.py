"""Test doubles for the network guard: a scripted resolver, a recording transport and a tiny
HTTP server on 127.0.0.1. Nothing here performs a real DNS lookup or leaves the machine."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address, IPv6Address, ip_address

import anyio.lowlevel
import httpx2

# A public address that is never contacted: every test that resolves to it records instead.
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:4700:4700::1111"


class FakeResolver:
    """Answers from a script: ``answers[host]`` is the list of successive record sets (the last
    one repeats). An unknown host fails like ``getaddrinfo`` does."""

    def __init__(self, answers: Mapping[str, Sequence[Sequence[str]]]) -> None:
        self._answers = answers
        self.calls: list[tuple[str, int]] = []

    async def resolve(self, host: str, port: int) -> list[IPv4Address | IPv6Address]:
        rounds = [n for h, n in self.calls if h == host]
        self.calls.append((host, port))
        await anyio.lowlevel.checkpoint()  # a real lookup yields: let concurrent requests race here
        if host not in self._answers:
            raise socket.gaierror(socket.EAI_NONAME, f"fake resolver: no such name {host!r}")
        script = self._answers[host]
        return [ip_address(a) for a in script[min(len(rounds), len(script) - 1)]]


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Records what would have been sent and answers 200 without touching the network."""

    def __init__(self) -> None:
        self.sent: list[httpx2.Request] = []
        self.closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        return httpx2.Response(200, content=b"ok", extensions={"recorded": True})

    async def aclose(self) -> None:
        self.closed = True


class LoopbackServer:
    """An HTTP(S) server on 127.0.0.1: ``redirects[path]`` answers 302 to that location; any other
    path answers 200 with the ``Host`` header it received as the body."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.redirects: dict[str, str] = {}
        self.hits: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: connection reuse is part of what is tested

            def do_GET(self) -> None:
                host = self.headers.get("Host", "")
                server.hits.append((self.path, host))
                location = server.redirects.get(self.path)
                if location is not None:
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = host.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]

    @contextmanager
    def running(self) -> Generator[LoopbackServer]:
        thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join()
