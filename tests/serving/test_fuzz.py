"""Property-based fuzz: malformed requests to a real server never get a 5xx or stop it."""

from __future__ import annotations

import base64
import io
import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

MODEL_NAME = "fashion-mnist"
PATHS = {"v1": f"/v1/models/{MODEL_NAME}:predict", "v2": f"/v2/models/{MODEL_NAME}/infer"}
EXAMPLES = 1000
PNG_HEADER = b"\x89PNG\r\n\x1a\n"


@dataclass
class Attempt:
    """One generated request."""

    path: str
    body: bytes
    headers: dict


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)
odd_pixels = st.sampled_from([0, 255, 256, -1, 1.5, 1e308, float("nan"), "7", True, None, [], {}])


@st.composite
def pixel_arrays(draw) -> list:
    """Lists of one repeated value, flat or as rows, of near-valid sizes."""
    value = draw(odd_pixels)
    rows, cols = draw(st.sampled_from([27, 28, 29, 0, 1])), draw(st.sampled_from([28, 27, 0]))
    if draw(st.booleans()):
        return [value] * draw(st.sampled_from([783, 784, 785, 1568, 0]))
    return [[value] * cols for _ in range(rows)]


def png(width: int, height: int, mode: str) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (width, height), 128).save(buffer, "PNG")
    return buffer.getvalue()


encoded_images = st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=64).map(lambda tail: PNG_HEADER + tail),
    st.builds(png, st.integers(1, 40), st.integers(1, 40), st.sampled_from(["L", "RGB", "1"])),
    st.builds(lambda data, cut: data[:cut], st.just(png(28, 28, "L")), st.integers(0, 80)),
).map(lambda data: base64.b64encode(data).decode())
b64_fields = st.fixed_dictionaries({"b64": encoded_images | st.text()})
image_instances = st.fixed_dictionaries({"image_bytes": b64_fields | json_values})
v1_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"instances": st.lists(pixel_arrays() | image_instances | json_values, max_size=3)}
    ),
    st.fixed_dictionaries({"instances": json_values}),
)
v2_tensors = st.fixed_dictionaries(
    {
        "name": st.text(max_size=8),
        "shape": st.lists(st.integers(-2, 2**40), max_size=5)
        | st.sampled_from([[1, 784], [2, 784], [1, 28, 28], [1, 1, 28, 28], [0, 784]]),
        "datatype": st.sampled_from(["UINT8", "FP32", "FP16", "INT32", "BYTES", "BOOL", "uint8"])
        | st.text(max_size=6),
        "data": pixel_arrays() | json_values,
    },
    optional={"parameters": json_values},
)
v2_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"inputs": st.lists(v2_tensors, max_size=2)},
        optional={"id": json_values, "outputs": json_values, "parameters": json_values},
    ),
)
raw_bodies = st.one_of(
    st.binary(max_size=100),
    st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 5000).map(lambda depth: b'{"instances": ' + b"[" * depth),
)
content_types = st.sampled_from(
    ["application/json", "text/plain", "application/octet-stream", "application/json; x=1", None]
)
binary_headers = st.fixed_dictionaries(
    {"inference-header-content-length": st.sampled_from(["0", "2", "-1", "999999", "x", ""])}
)
cloud_event_headers = st.fixed_dictionaries(
    {name: st.text("abc1.", max_size=4) for name in ("ce-specversion", "ce-source", "ce-type")}
    | {"ce-id": st.just("1")}
)


def encode(value: object) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity stay in, as some clients send them


@st.composite
def attempts(draw) -> Attempt:
    protocol = draw(st.sampled_from(["v1", "v2"]))
    body = draw(raw_bodies | (v1_bodies if protocol == "v1" else v2_bodies).map(encode))
    headers = {"content-type": draw(content_types)}
    headers.update(draw(st.one_of(st.just({}), binary_headers, cloud_event_headers)))
    return Attempt(PATHS[protocol], body, {k: v for k, v in headers.items() if v is not None})


def test_malformed_requests_never_get_5xx(serve, test_images):
    statuses = Counter()
    with serve("--max_batch_size", "4") as server, requests.Session() as session:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(attempt=attempts())
        def post(attempt: Attempt):
            url = server.url + attempt.path
            response = session.post(url, data=attempt.body, headers=attempt.headers, timeout=30)
            statuses[response.status_code] += 1
            assert response.status_code < 500, (attempt, response.text, server.log_tail())

        post()
        print("fuzz statuses:", dict(statuses))
        assert sum(statuses.values()) >= EXAMPLES
        assert statuses[400] >= EXAMPLES // 2  # most reach our decoder, not just FastAPI's
        assert server.process.poll() is None
        instance = np.asarray(test_images[0]).tolist()
        response = session.post(server.url + PATHS["v1"], json={"instances": [instance]})
        assert response.status_code == 200, response.text
