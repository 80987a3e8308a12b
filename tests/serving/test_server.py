"""The predictor over real HTTP: a `python -m serving` process serving a really trained model."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.runtime.local_predictor import PredictorError, running_predictor
from trainer.data import CLASS_NAMES

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "fashion-mnist"
MAX_BATCH_SIZE = 64
V1 = f"/v1/models/{MODEL_NAME}:predict"
V2 = f"/v2/models/{MODEL_NAME}/infer"


@pytest.fixture(scope="module")
def server(serve):
    with serve("--max_batch_size", str(MAX_BATCH_SIZE)) as running:
        yield running


def image_bytes(pixels: np.ndarray, mode: str = "L", fmt: str = "PNG") -> dict:
    """A v1 instance holding the pixels as an encoded image."""
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).convert(mode).save(buffer, fmt)
    return {"image_bytes": {"b64": base64.b64encode(buffer.getvalue()).decode()}}


def v2_request(shape: list[int], datatype: str = "UINT8", data: list | None = None) -> dict:
    """A v2 request with one input tensor; zeros unless `data` is given."""
    if data is None:
        data = [0] * int(np.prod(shape)) if all(n > 0 for n in shape) else []
    return {"inputs": [{"name": "image", "shape": shape, "datatype": datatype, "data": data}]}


def test_health_and_metadata(server):
    assert server.get("/v2/health/ready").json() == {"ready": True}
    assert server.get("/v2/health/live").json() == {"live": True}
    assert server.get(f"/v1/models/{MODEL_NAME}").json() == {"name": MODEL_NAME, "ready": True}
    assert server.get(f"/v2/models/{MODEL_NAME}/ready").json() == {
        "name": MODEL_NAME,
        "ready": True,
    }
    metadata = server.get(f"/v2/models/{MODEL_NAME}").json()
    assert metadata["name"] == MODEL_NAME
    assert metadata["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 784]}]
    assert metadata["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [-1]},
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
    ]


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda img: img.tolist(), id="28x28-rows"),
        pytest.param(lambda img: img.reshape(-1).tolist(), id="784-flat"),
        pytest.param(lambda img: img.astype(np.float64).tolist(), id="float-rows"),
        pytest.param(image_bytes, id="png"),
        pytest.param(lambda img: image_bytes(img, "RGB"), id="png-rgb"),
    ],
)
def test_v1_predictions_equal_offline_model(server, test_images, offline_probabilities, encode):
    response = server.post(V1, json={"instances": [encode(img) for img in test_images]})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == len(test_images)
    labels = [p["label"] for p in predictions]
    assert labels == offline_probabilities.argmax(axis=1).tolist()
    assert [p["class_name"] for p in predictions] == [CLASS_NAMES[label] for label in labels]
    probabilities = np.array([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(probabilities, offline_probabilities, atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_v1_mixed_instances_and_jpeg(server, test_images, offline_probabilities):
    instances = [test_images[0].tolist(), image_bytes(test_images[1], fmt="JPEG")]
    response = server.post(V1, json={"instances": instances})
    assert response.status_code == 200, response.text
    first, jpeg = response.json()["predictions"]
    assert first["label"] == int(offline_probabilities[0].argmax())
    assert jpeg["class_name"] == CLASS_NAMES[jpeg["label"]]  # lossy: only the form is fixed
    assert sum(jpeg["probabilities"]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    ("shape", "datatype"),
    [
        ([32, 28, 28], "UINT8"),
        ([32, 1, 28, 28], "FP32"),
        ([32, 784], "UINT8"),
        ([32, 784], "FP32"),
    ],
)
def test_v2_predictions_equal_offline_model(
    server, test_images, offline_probabilities, shape, datatype
):
    body = v2_request(shape, datatype, test_images.reshape(-1).tolist()) | {"id": "request-7"}
    response = server.post(V2, json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["id"], result["model_name"]) == ("request-7", MODEL_NAME)
    outputs = {output["name"]: output for output in result["outputs"]}
    assert (outputs["label"]["datatype"], outputs["label"]["shape"]) == ("INT64", [32])
    assert outputs["label"]["data"] == offline_probabilities.argmax(axis=1).tolist()
    probabilities = outputs["probabilities"]
    assert (probabilities["datatype"], probabilities["shape"]) == ("FP32", [32, 10])
    values = np.array(probabilities["data"]).reshape(32, 10)
    np.testing.assert_allclose(values, offline_probabilities, atol=1e-5)
    np.testing.assert_allclose(values.sum(axis=1), 1.0, atol=1e-5)


def forward_passes(server) -> tuple[float, float]:
    """From /metrics: the REST shortcut's forward passes, and the requests they answered."""
    metrics = server.get("/metrics").text
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("request_forward_pass_shared_by_") and MODEL_NAME in line
    }
    return (
        values.get("request_forward_pass_shared_by_count", 0.0),
        values.get("request_forward_pass_shared_by_sum", 0.0),
    )


def test_concurrent_requests_share_passes_and_each_gets_its_own_answer(
    server, test_images, offline_probabilities
):
    """8 clients at once, each asking about its own image 25 times (v1 and v2 alternating).

    Every answer must be its image's; some passes must have served several requests,
    and one client alone gets one pass per request. "Alone" is read from uvicorn's
    ``server_state.tasks``: uvicorn 0.55.0 ``uvicorn/protocols/http/httptools_impl.py``
    (``_start_asgi_task``; ``h11_impl.py`` likewise) adds each request's task when its
    headers are parsed and discards it when the task is done; KServe 0.21.0
    ``kserve/protocol/rest/server.py`` (``RESTServer``) runs a ``uvicorn.Server`` subclass.
    """
    before = forward_passes(server)

    def client(index: int) -> list[list[float]]:
        got = []
        for round_index in range(25):
            if round_index % 2:
                body = v2_request([1, 784], data=test_images[index].reshape(-1).tolist())
                outputs = server.post(V2, json=body).json()["outputs"]
                got.append(outputs[1]["data"])
            else:
                answer = server.post(V1, json={"instances": [test_images[index].tolist()]})
                got.append(answer.json()["predictions"][0]["probabilities"])
        return got

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(client, range(8)))
    for index, got in enumerate(answers):
        expected = np.broadcast_to(offline_probabilities[index], (25, 10))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    passes, requests = np.subtract(forward_passes(server), before)
    assert requests == 200 and passes < requests
    before = forward_passes(server)
    for _ in range(10):
        server.post(V1, json={"instances": [test_images[0].tolist()]})
    assert tuple(np.subtract(forward_passes(server), before)) == (10, 10)


def test_v2_requested_outputs(server, test_images, offline_probabilities):
    body = v2_request([2, 784], data=test_images[:2].reshape(-1).tolist())
    body["outputs"] = [{"name": "label"}]
    response = server.post(V2, json=body)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert output["name"] == "label"
    assert output["data"] == offline_probabilities[:2].argmax(axis=1).tolist()


def _instances(count: int) -> dict:
    return {"instances": [[0] * 784] * count}


def error_message(response) -> str:
    """KServe's {"error": ...} or FastAPI's {"detail": ...} (its own body validation)."""
    body = response.json()
    return body["error"] if "error" in body else json.dumps(body["detail"])


RAW = "raw"  # the body is sent as these exact bytes (to write NaN, broken JSON, ...)
BAD_REQUESTS = [
    # (id, path, body, headers, part of the error message)
    ("v1-not-json", V1, (RAW, b"{instances"), {}, "Unrecognized request format"),
    (
        "v1-not-json-as-a-form",  # curl's -d without a content type
        V1,
        (RAW, b"{instances"),
        {"content-type": "application/x-www-form-urlencoded"},
        "request body is not valid JSON",
    ),
    ("v1-nan", V1, (RAW, b'{"instances": [[NaN]]}'), {}, "Unrecognized request format"),
    ("v1-list-body", V1, [[0] * 784], {}, "expected a JSON object"),
    ("v1-missing-instances", V1, {"inputs": []}, {}, "instances"),
    ("v1-instances-not-list", V1, {"instances": {"a": 1}}, {}, '"instances" must be a list'),
    ("v1-empty", V1, _instances(0), {}, "between 1 and 64"),
    ("v1-too-many", V1, _instances(MAX_BATCH_SIZE + 1), {}, "got 65"),
    ("v1-wrong-shape", V1, {"instances": [[[0] * 28] * 27]}, {}, "got shape [27, 28]"),
    ("v1-783-values", V1, {"instances": [[0] * 783]}, {}, "got shape [783]"),
    ("v1-ragged", V1, {"instances": [[[0] * 28] * 27 + [[0] * 5]]}, {}, "rectangular"),
    ("v1-strings", V1, {"instances": [["0"] * 784]}, {}, "got strings"),
    ("v1-booleans", V1, {"instances": [[True] * 784]}, {}, "got booleans"),
    ("v1-over-255", V1, {"instances": [[0] * 783 + [256]]}, {}, "0-255, got 0 to 256"),
    ("v1-negative", V1, {"instances": [[-1] + [0] * 783]}, {}, "0-255, got -1 to 0"),
    ("v1-number-instance", V1, {"instances": [7]}, {}, "instances[0]: expected 28 rows"),
    ("v1-bad-base64", V1, {"instances": [{"image_bytes": {"b64": "%%%"}}]}, {}, "base64"),
    (
        "v1-not-an-image",
        V1,
        {"instances": [{"image_bytes": {"b64": base64.b64encode(b"GIF89a...").decode()}}]},
        {},
        "neither a PNG nor a JPEG",
    ),
    (
        "v1-image-32x32",
        V1,
        {"instances": [image_bytes(np.zeros((32, 32)))]},
        {},
        "must be 28x28 pixels, got 32x32",
    ),
    ("v1-image-no-b64", V1, {"instances": [{"image_bytes": {"data": ""}}]}, {}, '"b64" string'),
    ("v1-unknown-object", V1, {"instances": [{"pixels": []}]}, {}, "image_bytes"),
    ("v2-not-json", V2, (RAW, b"{inputs"), {}, "JSON decode error"),
    ("v2-missing-inputs", V2, {"instances": []}, {}, "inputs"),
    ("v2-no-inputs", V2, {"inputs": []}, {}, "exactly one input tensor, got 0"),
    (
        "v2-two-inputs",
        V2,
        {"inputs": v2_request([1, 784])["inputs"] * 2},
        {},
        "exactly one input tensor, got 2",
    ),
    (
        "v2-int32",
        V2,
        v2_request([1, 784], "INT32"),
        {},
        "UINT8 or FP32 (pixel values 0-255), got INT32",
    ),
    ("v2-bad-shape", V2, v2_request([1, 28, 27]), {}, "shape must be [N, 28, 28]"),
    ("v2-batch-0", V2, v2_request([0, 784]), {}, "between 1 and 64"),
    ("v2-too-many", V2, v2_request([MAX_BATCH_SIZE + 1, 784]), {}, "got 65"),
    (
        "v2-size-mismatch",
        V2,
        v2_request([2, 784], data=[0] * 784),
        {},
        "needs 1568 values, got 784",
    ),
    ("v2-over-255", V2, v2_request([1, 784], data=[300] * 784), {}, "0-255"),
    ("v2-uint8-floats", V2, v2_request([1, 784], data=[0.5] * 784), {}, "must be integers"),
    ("v2-strings", V2, v2_request([1, 784], "FP32", ["a"] * 784), {}, "got strings"),
    (
        "v2-nan",
        V2,
        (RAW, json.dumps(v2_request([1, 784], "FP32", [float("nan")] * 784)).encode()),
        {},
        "finite",
    ),
    (
        "v2-infinity",
        V2,
        (RAW, json.dumps(v2_request([1, 784], "FP32", [float("inf")] * 784)).encode()),
        {},
        "finite",
    ),
    ("v2-unknown-output", V2, v2_request([1, 784]) | {"outputs": [{"name": "x"}]}, {}, "'x'"),
    (
        "v2-binary-bad-length",
        V2,
        (RAW, b'{"inputs": []}'),
        {"content-type": "application/octet-stream", "inference-header-content-length": "abc"},
        "malformed request",
    ),
    (
        "v2-binary-no-inputs",
        V2,
        (RAW, b"{}"),
        {"content-type": "application/octet-stream", "inference-header-content-length": "2"},
        "malformed request",
    ),
    ("unknown-model", "/v1/models/nope:predict", _instances(1), {}, "nope"),
]


@pytest.mark.parametrize(
    ("path", "body", "headers", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_REQUESTS],
)
def test_bad_request_gets_4xx_with_message(server, path, body, headers, message):
    if isinstance(body, tuple):
        headers = {"content-type": "application/json"} | headers
        response = server.post(path, data=body[1], headers=headers)
    else:
        response = server.post(path, json=body, headers=headers)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert message in error_message(response)
    assert server.process.poll() is None


def test_v1_body_without_json_content_type(server, test_images, offline_probabilities):
    body = json.dumps({"instances": [test_images[0].tolist()]})
    response = server.post(V1, data=body, headers={"content-type": "text/plain"})
    assert response.status_code == 200, response.text
    assert response.json()["predictions"][0]["label"] == int(offline_probabilities[0].argmax())


def run_serving(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "serving", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_missing_model_dir_is_a_one_line_error(tmp_path):
    result = run_serving("--model_dir", str(tmp_path), "--http_port", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"python -m serving: error: {tmp_path}: no model.pt; not a model directory"
    ]


def test_bad_max_batch_size_is_a_usage_error(tmp_path):
    result = run_serving("--model_dir", str(tmp_path), "--max_batch_size", "0")
    assert result.returncode == 2
    assert "max_batch_size must be in 1..65536, got 0" in result.stderr


def test_each_rejected_request_is_one_log_line(serve, test_images):
    """KServe logs a traceback for every 4xx; the predictor logs one line per rejection."""
    with serve() as server:
        before = server.log.read_text().splitlines()
        for _ in range(5):
            assert server.post(V1, json={"instances": [[0] * 783]}).status_code == 400
        assert server.post(V2, json={"inputs": "x"}).status_code == 422
        assert server.post("/v1/models/nope:predict", json=_instances(1)).status_code == 404
        assert server.post(V1, json={"instances": [test_images[0].tolist()]}).status_code == 200
        new = server.log.read_text().splitlines()[len(before) :]
    rejected = [line for line in new if "rejected request" in line]
    assert len(rejected) == 7, "\n".join(new)
    assert sum("got shape [783]" in line for line in rejected) == 5
    assert "Traceback" not in "\n".join(new)
    assert len(new) < 6 * 8, "\n".join(new)  # KServe logs 4 lines per request; tracebacks 33


def broken_copy(model_dir: Path, into: Path, name: str, damage) -> Path:
    """A copy of the model directory whose file ``name`` is replaced by ``damage(content)``."""
    copy = into / f"broken-{name}"
    copy.mkdir()
    for path in model_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / name).write_bytes(damage((copy / name).read_bytes()))
    return copy


@pytest.mark.parametrize(
    ("name", "damage", "message"),
    [
        ("model.pt", lambda data: data[: len(data) // 2], "model.pt: not a readable PyTorch"),
        ("model.pt", lambda data: b"", "model.pt: not a readable PyTorch"),
        ("model.json", lambda data: data[:-20], "model.json: malformed model card"),
        ("model.json", lambda data: b'{"architecture": 5}', "model.json: malformed model card"),
    ],
    ids=["truncated-weights", "empty-weights", "truncated-card", "card-of-wrong-fields"],
)
def test_a_broken_model_directory_is_a_one_line_error(
    trained_model_dir, tmp_path, name, damage, message
):
    broken = broken_copy(trained_model_dir, tmp_path, name, damage)
    result = run_serving("--model_dir", str(broken), "--http_port", "1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m serving: error: {broken}/"), lines
    assert message in lines[0]


def test_a_predictor_not_ready_in_time_is_one_error(trained_model_dir, tmp_path):
    """Loading torch and KServe takes seconds: half a second is too short, and says so."""
    log = tmp_path / "server.log"
    with (
        log.open("w+") as output,
        pytest.raises(PredictorError) as error,
        running_predictor(trained_model_dir, output, timeout_seconds=0.5) as predictor,
    ):
        pytest.fail(f"ready at {predictor.url} within 0.5 s")
    assert str(error.value).startswith("the predictor's start did not finish within 0.5 s")
