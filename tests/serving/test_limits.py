"""The predictor under abuse, over real HTTP against the real KServe model server: the body
limit (serving/limits.py), the drain taken from inside the pod only (serving/drain.py), and
what it listens on.

Upstream behaviour relied on: uvicorn (h11) hands the app a request as soon as its headers
are in, the body comes with later ``http.request`` messages (uvicorn
``uvicorn/protocols/http/h11_impl.py``, ``handle_events``), so a 413 from Content-Length goes
out before the body is read; KServe 0.21's REST server always listens on 0.0.0.0
(``kserve/protocol/rest/server.py``, ``RESTServer.__init__``), and ``ModelServer.start``
builds its servers before ``setup_event_loop`` and binds them after it
(``kserve/model_server.py``); ``--enable_grpc`` defaults to true there.
"""

from __future__ import annotations

import json
import socket
import time

import psutil
import pytest

from serving.defaults import MAX_BATCH_SIZE
from serving.limits import body_limit

MODEL_NAME = "fashion-mnist"
PREDICT = f"/v1/models/{MODEL_NAME}:predict"


def raw(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """Send ``request`` as it is to the server at ``url``; everything it answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        try:
            connection.sendall(request)
        except OSError:  # the server answered and closed before taking it all
            pass
        chunks = []
        try:
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks)


def status_and_body(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_a_body_over_the_limit_is_refused_from_its_content_length_unread(serve):
    limit = body_limit(MAX_BATCH_SIZE)
    with serve() as server:
        # Only the headers: a server that waited for the body would never answer.
        head = (
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {limit + 1}\r\n\r\n"
        ).encode()
        started = time.monotonic()
        status, body = status_and_body(raw(server.url, head))
        assert time.monotonic() - started < 5
        assert status == 413
        assert body.count(b"\n") == 1
        assert json.loads(body) == {
            "error": f"request body too large: {limit + 1} bytes, over the limit of {limit} bytes"
        }
        # The largest batch the predictor takes still fits: 256 images of 784 "255.0" values.
        batch = {"instances": [[255.0] * 784] * MAX_BATCH_SIZE}
        assert server.post(PREDICT, json=batch).status_code == 200


def test_a_chunked_body_is_cut_off_at_the_limit_and_the_memory_stays_flat(serve):
    """Each request streams 64 MiB; the server holds at most the limit (~4.8 MB) of it."""
    chunk = b"[" + b"1," * 32767 + b"1]"  # 64 KiB
    piece = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    head = (
        f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    with serve() as server:
        process = psutil.Process(server.process.pid)
        before = process.memory_info().rss
        for _ in range(4):
            status, body = status_and_body(raw(server.url, head + piece * 1024, timeout=30))
            assert status == 413
            assert b"a chunked body, over the limit of" in body
        grown = process.memory_info().rss - before
        assert grown < 32 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


def outside_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_the_drain_is_taken_from_inside_the_pod_only(serve):
    address = outside_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    with serve("--http_host=0.0.0.0", "--drain_seconds=0") as server:
        port = server.url.rsplit(":", 1)[1]
        answer = raw(f"http://{address}:{port}", b"GET /drain HTTP/1.1\r\nHost: x\r\n\r\n")
        status, body = status_and_body(answer)
        assert (status, json.loads(body)) == (
            403,
            {"error": "/drain is taken from inside the pod only"},
        )
        assert "Connection: close" not in server.post(PREDICT, json={"instances": []}).headers.get(
            "connection", ""
        )
        inside = raw(server.url, b"GET /drain HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_and_body(inside) == (200, b"drained\n")


def listening(pid: int) -> set[tuple[str, int]]:
    return {
        (connection.laddr.ip, connection.laddr.port)
        for connection in psutil.Process(pid).connections("inet")
        if connection.status == psutil.CONN_LISTEN
    }


def test_a_local_predictor_listens_on_loopback_and_http_only(serve):
    with serve() as server:
        port = int(server.url.rsplit(":", 1)[1])
        assert listening(server.process.pid) == {("127.0.0.1", port)}  # no gRPC on 8081
