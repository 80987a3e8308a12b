"""A v1 predictor on a loopback port that answers from the packed test set's own labels.

For the default tier's post-deploy checks: the "service" the deploy step checks after a
rollout. It knows each test image's label, so it answers right (``shift`` 0), or wrong by
``shift`` classes; ``statuses`` fail the next requests; ``padding`` bloats every answer.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


class FakePredictor:
    """Serve ``POST /v1/models/<name>:predict`` at ``self.url`` until the block ends."""

    def __init__(self, dataset_dir):
        from trainer.data import load_packed

        test = load_packed(dataset_dir).test
        pairs = zip(test.images, test.labels, strict=True)
        self.labels = {image.tobytes(): int(label) for image, label in pairs}
        self.shift, self.padding = 0, 0
        self.statuses: list[int] = []  # of the next requests; then 200
        self.requests: list[int] = []  # images in each request answered
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakePredictor:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, instances: list) -> tuple[int, bytes]:
        """The status and body for one request's instances."""
        if self.statuses:
            return self.statuses.pop(0), b'{"error": "scripted"}'
        images = np.array(instances, dtype=np.uint8)
        self.requests.append(len(images))
        labels = [(self.labels[image.tobytes()] + self.shift) % 10 for image in images]
        body = json.dumps({"predictions": [{"label": label} for label in labels]})
        return 200, (body + " " * self.padding).encode()

    def _handler(self):
        predictor = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = predictor.answer(body["instances"])
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):  # keep pytest's output clean
                pass

        return Handler
