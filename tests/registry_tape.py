"""Recorded answers of a real Kubeflow Model Registry server, played back over real HTTP.

A fake, for the default tier, where no Model Registry server can run (its Go module is
refused by the module proxy; the by-hand ``model_registry`` tier runs the real one). A
``Tape`` is an HTTP server on a loopback port. Recording, it forwards each request to the
real server and keeps the exchange; playing back, it answers each request with the next
recorded answer, if the request is the recorded one (method, path and query, JSON body),
and otherwise answers 599 and notes the difference in ``mismatches``, so that a test whose
code asks something else fails. Values that differ between runs (a temporary folder, a
model name made unique for the recording) are kept as ``{{key}}`` placeholders.

Record a tape again against a real server (docs/development.md, "Model Registry"):
``FMNIST_RECORD_REGISTRY=http://127.0.0.1:8080 make test`` on the registry tests.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

MISMATCH = 599


class Tape:
    """Play back ``path`` (or record it, forwarding to ``upstream``) at ``self.address``."""

    def __init__(self, path: Path, substitutions: dict[str, str], upstream: str | None = None):
        self.path, self.upstream = path, upstream
        self.substitutions = substitutions
        self.exchanges: list[dict] = [] if upstream else json.loads(path.read_text())
        self.position, self.mismatches = 0, []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.lock = threading.Lock()

    def __enter__(self) -> Tape:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.upstream and not exc[0]:
            self.path.write_text(json.dumps(self.exchanges, indent=1, sort_keys=True) + "\n")

    def _stored(self, text: str) -> str:
        for key, value in self.substitutions.items():
            text = text.replace(value, "{{" + key + "}}")
        return text

    def _current(self, text: str) -> str:
        for key, value in self.substitutions.items():
            text = text.replace("{{" + key + "}}", value)
        return text

    def answer(self, method: str, target: str, body: str) -> tuple[int, str]:
        """The answer to one request: the server's (recording) or the recorded one."""
        request = {"method": method, "target": self._stored(target), "body": self._stored(body)}
        with self.lock:
            if self.upstream:
                status, text = _forward(self.upstream, method, target, body)
                self.exchanges.append({**request, "status": status, "answer": self._stored(text)})
                return status, text
            expected = self.exchanges[self.position] if self.position < len(self.exchanges) else {}
            recorded = {key: expected.get(key) for key in request}
            if recorded != request:
                self.mismatches.append({"expected": recorded, "got": request})
                return MISMATCH, json.dumps({"mismatch": request})
            self.position += 1
            return expected["status"], self._current(expected["answer"])

    def _handler(self):
        tape = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = _canonical(self.rfile.read(length).decode()) if length else ""
                status, text = tape.answer(self.command, self.path, body)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _any

            def log_message(self, *args):  # quiet
                pass

        return Handler


def _canonical(body: str) -> str:
    """A JSON body with sorted keys (a client may order them differently)."""
    try:
        return json.dumps(json.loads(body), sort_keys=True)
    except ValueError:
        return body


def _forward(upstream: str, method: str, target: str, body: str) -> tuple[int, str]:
    parsed = urlparse(upstream)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    headers = {"Content-Type": "application/json"} if body else {}
    connection.request(method, target, body=body or None, headers=headers)
    response = connection.getresponse()
    return response.status, response.read().decode()
