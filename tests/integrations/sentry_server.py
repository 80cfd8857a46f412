"""A Sentry ingest endpoint of the tests' own, on 127.0.0.1: it keeps the events of the
envelopes sentry-sdk's HTTP transport posts to it (gzip, brotli or plain), read back with
sentry-sdk's own envelope parser."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sentry_sdk.envelope import Envelope


class SentryServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.port}/1"

    def keep(self, body: bytes) -> None:
        for item in Envelope.deserialize(body).items:
            if item.type == "event" and item.payload.json is not None:
                with self.lock:
                    self.events.append(item.payload.json)


def _decoded(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding == "br":
        import brotli  # type: ignore[import-not-found]

        return bytes(brotli.decompress(body))
    return body


@contextmanager
def sentry_server() -> Iterator[SentryServer]:
    kept: list[SentryServer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            kept[0].keep(_decoded(body, self.headers.get("Content-Encoding", "")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    kept.append(SentryServer(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield kept[0]
    finally:
        server.shutdown()
        server.server_close()
