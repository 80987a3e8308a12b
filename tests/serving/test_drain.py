"""Draining (serving/drain.py): after ``GET /drain`` every answer closes its connection.

The preStop hook of the InferenceService calls it when the pod is deleted (k8s.io/
kubernetes v1.36.3 pkg/kubelet/kuberuntime/kuberuntime_container.go: the hook runs, then
SIGTERM); tests/cluster/test_serving_faults.py rolls a model out under traffic through it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import requests

from serving.drain import Drain

MODEL_NAME = "fashion-mnist"


async def answer_ok(scope, receive, send):
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"connection", b"keep-alive")]}
    )
    await send({"type": "http.response.body", "body": b"{}"})


def request(app, path: str, method: str = "POST", peer: str = "127.0.0.1") -> list[dict]:
    """The ASGI messages ``app`` sends for one request."""
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": method, "headers": [], "client": (peer, 5000)}
    asyncio.run(app(scope, receive, send))
    return sent


def test_answers_close_their_connection_only_once_draining():
    app = Drain(answer_ok, seconds=0.05)
    before = request(app, "/v1/models/m:predict")[0]["headers"]
    assert before == [(b"connection", b"keep-alive")]
    started = time.monotonic()
    drained = request(app, "/drain", "GET")
    assert time.monotonic() - started >= 0.05
    assert (drained[0]["status"], drained[1]["body"]) == (200, b"drained\n")
    after = request(app, "/v1/models/m:predict")[0]["headers"]
    assert after == [(b"connection", b"close")]


@pytest.mark.parametrize("peer", ["10.0.0.7", "::ffff:10.0.0.7", "fe80::1", "not-an-ip"])
def test_a_caller_outside_the_pod_cannot_drain_it(peer):
    app = Drain(answer_ok, seconds=0)
    refused = request(app, "/drain", "GET", peer)
    assert refused[0]["status"] == 403
    assert refused[1]["body"] == b'{"error":"/drain is taken from inside the pod only"}\n'
    assert not app.draining
    assert request(app, "/drain", "GET", "::1")[0]["status"] == 200


def test_a_real_predictor_drains_keeps_answering_and_closes_each_connection(serve, test_images):
    body = {"instances": [test_images[0].tolist()]}
    with serve("--drain_seconds", "3") as server, requests.Session() as session:
        path = f"{server.url}/v1/models/{MODEL_NAME}:predict"
        first = session.post(path, json=body, timeout=30)
        assert first.status_code == 200 and first.headers.get("connection") != "close"
        drained: list = []
        caller = threading.Thread(
            target=lambda: drained.append(requests.get(f"{server.url}/drain", timeout=30))
        )
        started = time.monotonic()
        caller.start()
        time.sleep(0.5)
        during = session.post(path, json=body, timeout=30)
        assert during.status_code == 200 and during.headers["connection"] == "close"
        assert during.json() == first.json()
        caller.join()
        assert drained[0].status_code == 200 and time.monotonic() - started >= 3
