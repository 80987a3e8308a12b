"""The REST shortcut: plain JSON predictions answered as KServe would, everything else passed on."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import numpy as np
import orjson
import pytest
from kserve.model_repository import ModelRepository
from kserve.protocol.infer_type import InferInput, InferRequest
from kserve.protocol.rest.v2_datamodels import InferenceResponse
from prometheus_client import REGISTRY

from serving.shortcut import PredictShortcut

MODEL_NAME = "fashion-mnist"
V1 = f"/v1/models/{MODEL_NAME}:predict"
V2 = f"/v2/models/{MODEL_NAME}/infer"
JSON = {"content-type": "application/json"}


class KServeStandIn:
    """The app behind the shortcut: records each body it is given, answers 418."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        body, message = b"", {"more_body": True}
        while message.get("more_body"):
            message = await receive()
            body += message["body"]
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def kserve():
    return KServeStandIn()


@pytest.fixture
def shortcut(model, kserve):
    models = ModelRepository()
    models.update(model)
    return PredictShortcut(kserve, models)


def call(app, path: str, body: bytes, headers: dict, method="POST", chunks=1) -> list[dict]:
    """The ASGI messages ``app`` sends for one request whose body comes in ``chunks`` parts."""
    return asyncio.run(exchange(app, path, body, headers, method, chunks))


async def exchange(app, path: str, body: bytes, headers: dict, method="POST", chunks=1):
    """:func:`call`, in the running event loop."""
    size = -(-len(body) // chunks) or 1
    parts = [body[start : start + size] for start in range(0, len(body), size)] or [b""]
    messages = [
        {"type": "http.request", "body": part, "more_body": index < len(parts) - 1}
        for index, part in enumerate(parts)
    ]
    encoded = [(name.encode(), value.encode()) for name, value in headers.items()]
    scope = {"type": "http", "method": method, "path": path, "headers": encoded}
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def answered(sent: list[dict]) -> bytes:
    """The body of a 200 JSON answer with a correct Content-Length."""
    start, body = sent
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body["body"])
    return body["body"]


def v2_body(images: np.ndarray, **fields) -> dict:
    """A v2 request of one UINT8 [N, 784] tensor, with more ``fields``."""
    data = images.reshape(-1).tolist()
    tensor = {"name": "image", "shape": [len(images), 784], "datatype": "UINT8", "data": data}
    return {"inputs": [tensor], **fields}


def test_v1_answer_is_the_models(shortcut, kserve, model, test_images, offline_probabilities):
    request = {"instances": test_images[:5].tolist()}
    body = answered(call(shortcut, V1, orjson.dumps(request), {}, chunks=3))
    assert kserve.bodies == []
    # KServe's path answers orjson.dumps of the same dict (its ORJSONResponse).
    assert body == orjson.dumps(model.predict(model.preprocess(request)))
    probabilities = [p["probabilities"] for p in json.loads(body)["predictions"]]
    np.testing.assert_allclose(probabilities, offline_probabilities[:5], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("extra", [{"id": "r-1"}, {"id": "r-2", "parameters": {}, "outputs": None}])
def test_v2_answer_is_kserves_rendering(
    shortcut, kserve, model, test_images, offline_probabilities, extra
):
    body = answered(call(shortcut, V2, orjson.dumps(v2_body(test_images[:3], **extra)), JSON))
    assert kserve.bodies == []
    tensor = InferInput("image", [3, 784], "UINT8", data=test_images[:3].reshape(-1).tolist())
    request = InferRequest(MODEL_NAME, [tensor], request_id=extra["id"])
    response = model.predict(model.preprocess(request))
    # KServe's REST path: InferResponse.to_rest(), then its pydantic model, then JSON.
    expected = InferenceResponse.model_validate(response.to_rest()[0]).model_dump(mode="json")
    got = json.loads(body)
    assert got == expected and list(got) == list(expected)
    assert [list(output) for output in got["outputs"]] == [list(o) for o in expected["outputs"]]
    values = np.reshape(got["outputs"][1]["data"], (3, 10))
    np.testing.assert_allclose(values, offline_probabilities[:3], rtol=1e-5, atol=1e-7)


def test_requests_read_together_share_a_forward_pass(shortcut, model, test_images):
    """A v1 and a v2 request ready in the same loop turn: one pass, each its own answer."""
    v1 = orjson.dumps({"instances": test_images[:2].tolist()})
    v2 = orjson.dumps(v2_body(test_images[2:5], id="r-3"))
    alone = [answered(call(shortcut, V1, v1, {})), answered(call(shortcut, V2, v2, JSON))]
    passes = count("request_forward_pass_shared_by")

    async def together():
        return await asyncio.gather(
            exchange(shortcut, V1, v1, {}), exchange(shortcut, V2, v2, JSON)
        )

    shared = [json.loads(answered(sent)) for sent in asyncio.run(together())]
    assert count("request_forward_pass_shared_by") == passes + 1
    expected = [json.loads(body) for body in alone]
    assert [p["label"] for p in shared[0]["predictions"]] == [
        p["label"] for p in expected[0]["predictions"]
    ]
    np.testing.assert_allclose(
        [p["probabilities"] for p in shared[0]["predictions"]],
        [p["probabilities"] for p in expected[0]["predictions"]],
        rtol=1e-5,
        atol=1e-7,
    )
    assert shared[1]["id"] == "r-3" and shared[1]["outputs"][0] == expected[1]["outputs"][0]
    np.testing.assert_allclose(
        shared[1]["outputs"][1]["data"], expected[1]["outputs"][1]["data"], rtol=1e-5, atol=1e-7
    )


def test_v2_answer_without_an_id_gets_a_fresh_one(shortcut, test_images):
    first, second = (
        json.loads(answered(call(shortcut, V2, orjson.dumps(v2_body(test_images[:1])), JSON)))
        for _ in range(2)
    )
    assert len(first["id"]) == 36 and first["id"] != second["id"]


PIXELS = [0, 255] * 392
V1_BODY = orjson.dumps({"instances": [PIXELS]})
CLOUD_EVENT = {key: "x" for key in ("time", "type", "source", "id", "specversion")}


def tensor(**changes) -> list[dict]:
    """The inputs of a valid one-image v2 request, with ``changes`` to its tensor."""
    return [v2_body(np.ones((1, 784)))["inputs"][0] | changes]


PASSED_ON = [
    # (id, method, path, body, headers): requests KServe's own path must answer
    ("get", "GET", V1, b"", {}),
    ("unknown-model", "POST", "/v1/models/nope:predict", V1_BODY, {}),
    ("explain", "POST", f"/v1/models/{MODEL_NAME}:explain", V1_BODY, {}),
    ("v1-not-json", "POST", V1, b"{instances", {}),
    ("v1-a-list", "POST", V1, b"[]", {}),
    ("v1-rejected", "POST", V1, orjson.dumps({"instances": [[0] * 783]}), {}),
    ("v1-booleans", "POST", V1, orjson.dumps({"instances": [[True] * 784]}), {}),
    ("v1-cloud-event-headers", "POST", V1, V1_BODY, {"ce-id": "1"}),
    (
        "v1-structured-cloud-event",
        "POST",
        V1,
        orjson.dumps(CLOUD_EVENT | {"data": {"instances": [PIXELS]}}),
        {},
    ),
    ("v1-cloud-event-type", "POST", V1, V1_BODY, {"content-type": "application/cloudevents+json"}),
]
V2_PASSED_ON = {
    "v2-binary-outputs": ({"parameters": {"binary_data_output": True}}, JSON),
    "v2-requested-outputs": ({"outputs": [{"name": "label"}]}, JSON),
    "v2-numeric-id": ({"id": 7}, JSON),
    "v2-outputs-not-a-list": ({"outputs": {}}, JSON),
    "v2-two-inputs": ({"inputs": tensor() * 2}, JSON),
    "v2-float-shape": ({"inputs": tensor(shape=[1.0, 784])}, JSON),
    "v2-tensor-parameters": ({"inputs": tensor(parameters={"a": 1})}, JSON),
    "v2-rejected": ({"inputs": tensor(datatype="INT32")}, JSON),
    "v2-no-content-type": ({}, {}),
    "v2-text": ({}, {"content-type": "text/plain"}),
    "v2-binary-extension": ({}, JSON | {"inference-header-content-length": "10"}),
}
PASSED_ON += [
    (name, "POST", V2, orjson.dumps(v2_body(np.ones((1, 784))) | fields), headers)
    for name, (fields, headers) in V2_PASSED_ON.items()
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers"),
    [pytest.param(*case[1:], id=case[0]) for case in PASSED_ON],
)
def test_other_requests_go_to_kserve_with_their_body(shortcut, kserve, method, path, body, headers):
    sent = call(shortcut, path, body, headers, method=method, chunks=2)
    assert sent[0]["status"] == 418
    assert kserve.bodies == [body]


def test_a_model_not_ready_is_kserves_to_answer(shortcut, kserve, model):
    model.ready = False
    try:
        assert call(shortcut, V1, V1_BODY, {})[0]["status"] == 418
    finally:
        model.ready = True
    assert kserve.bodies == [V1_BODY]


def test_a_client_gone_before_its_body_is_complete_gets_nothing(shortcut, kserve):
    sent = []

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": V1, "headers": []}
    asyncio.run(shortcut(scope, receive, send))
    assert sent == [] and kserve.bodies == []


def count(metric: str) -> float:
    """How many observations KServe's histogram ``metric`` holds for the model."""
    return REGISTRY.get_sample_value(f"{metric}_count", {"model_name": MODEL_NAME}) or 0.0


def test_kserve_metrics_and_latency_line(shortcut, model, caplog):
    """KServe's histograms count each answer; its latency line only when it is asked for."""
    metrics = (
        "request_preprocess_seconds",
        "request_predict_seconds",
        "request_postprocess_seconds",
    )
    before = [count(metric) for metric in metrics]
    with caplog.at_level(logging.INFO, logger="kserve.trace"):
        answered(call(shortcut, V1, V1_BODY, {"x-request-id": "abc"}))
        assert caplog.messages == []
        model.enable_latency_logging = True
        try:
            answered(call(shortcut, V1, V1_BODY, {"x-request-id": "abc"}))
        finally:
            model.enable_latency_logging = False
    assert [count(metric) - old for metric, old in zip(metrics, before, strict=True)] == [2, 2, 2]
    (line,) = caplog.messages
    assert line.startswith("requestId: abc, preprocess_ms: ")
    assert "explain_ms: 0, predict_ms: " in line and line.endswith("postprocess_ms: 0.0")


def test_the_same_answers_through_kserve_and_the_shortcut(serve, test_images):
    """Over HTTP: a ``ce-`` header that is no cloud event sends a request KServe's way.

    KServe's timing middleware logs a ``time:wall`` line naming the path of each request
    through its app; a request to /v2/health/live after the shortcut's marks where its
    line would be.
    """
    requests = [
        (V1, {"instances": test_images[:4].tolist()}),
        (V2, v2_body(test_images[:4], id="same")),
    ]
    with serve() as server:
        for path, body in requests:
            start = len(server.log.read_text())
            shortcut = server.post(path, json=body)
            assert server.get("/v2/health/live").status_code == 200
            assert timing_lines(server, start, "/v2/health/live") == 1
            assert timing_lines(server, start, path, wait=0) == 0
            kserve = server.post(path, json=body, headers={"ce-not-an-event": "1"})
            assert timing_lines(server, start, path) == 1
            assert shortcut.status_code == kserve.status_code == 200
            assert shortcut.content == kserve.content
            assert shortcut.headers["content-type"] == kserve.headers["content-type"]
        assert (
            "event loop: uvloop; REST prediction shortcut and drain: on" in server.log.read_text()
        )


def timing_lines(server, start: int, path: str, wait: float = 10.0) -> int:
    """KServe's ``time:wall`` lines for ``path`` after ``start``; waits up to ``wait`` s for one."""
    line = f"kserve.io{path.replace('/', '.')}: "
    deadline = time.monotonic() + wait
    while True:
        log = server.log.read_text()[start:].splitlines()
        count = sum(line in each and "time:wall" in each for each in log)
        if count or time.monotonic() >= deadline:
            return count
        time.sleep(0.05)


def test_the_latency_line_is_off_unless_asked_for():
    from serving.__main__ import build_parser, import_model_server

    parser = build_parser(import_model_server().parser)
    assert parser.parse_args([]).enable_latency_logging is False
    assert parser.parse_args(["--enable_latency_logging", "true"]).enable_latency_logging is True
