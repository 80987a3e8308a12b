"""Request decoding's fast path for integer pixels, and the v2 answer as KServe renders it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest
from kserve.protocol.rest.v2_datamodels import InferenceResponse

from serving.codec import (
    _alike_instances,
    _byte_pixels,
    decode_v1,
    decode_v2,
    encode_v2,
    encode_v2_rest,
)

PIXELS = np.random.default_rng(0).integers(0, 256, (2, 28, 28))


def v2(shape: list[int], data: list, datatype: str = "UINT8") -> InferRequest:
    return InferRequest("m", [InferInput("image", shape, datatype, data=data)])


@pytest.mark.parametrize(
    "values",
    [PIXELS[0].reshape(-1).tolist(), PIXELS[0].tolist()],
    ids=["784-values", "28-rows"],
)
def test_integer_pixels_take_the_fast_path_to_the_same_images(values):
    assert _byte_pixels(values) is not None
    images = decode_v1({"instances": [values, values]}, 4)
    expected = np.asarray([values, values]).reshape(2, 28, 28).astype(np.float32)
    assert images.dtype == np.float32
    np.testing.assert_array_equal(images, expected)


@pytest.mark.parametrize("shape", [[2, 28, 28], [2, 1, 28, 28], [2, 784]])
def test_v2_nested_or_flat_integer_data_takes_the_fast_path(shape):
    for data in (PIXELS.reshape(shape).tolist(), PIXELS.reshape(-1).tolist()):
        assert _byte_pixels(data) is not None
        np.testing.assert_array_equal(decode_v2(v2(shape, data), 4), PIXELS.astype(np.float32))


@pytest.mark.parametrize(
    "values",
    [
        [0, 1] * 392,  # only 0s and 1s: maybe booleans
        [0.5] + [7] * 783,  # floats
        [[7] * 28] * 27 + [[7] * 27],  # ragged rows
        [256] + [0] * 783,  # out of range
        [],
    ],
    ids=["zeros-and-ones", "floats", "ragged", "256", "empty"],
)
def test_other_data_takes_the_general_path(values):
    assert _byte_pixels(values) is None


def test_either_path_decides_as_before():
    assert decode_v1({"instances": [[0, 1] * 392]}, 1).max() == 1
    assert decode_v1({"instances": [[True] + [7] * 783]}, 1)[0, 0, 0] == 1  # as numpy takes it
    np.testing.assert_array_equal(decode_v1({"instances": [[0.5] * 784]}, 1), 0.5)
    for values, message in [
        ([True] * 784, "got booleans"),
        ([256] + [0] * 783, "0-255, got 0 to 256"),
        ([[7] * 28] * 27 + [[7] * 27], "rectangular"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            decode_v1({"instances": [values]}, 1)


@pytest.mark.parametrize("request_id", ["r-1", None])
def test_v2_rest_answer_is_kserves_rendering(request_id):
    probabilities = np.random.default_rng(1).dirichlet(np.ones(10), 3).astype(np.float32)
    request = v2([3, 784], [0] * 2352)
    request.id = request_id
    response = encode_v2(probabilities, request, "m")
    expected = InferenceResponse.model_validate(response.to_rest()[0]).model_dump(mode="json")
    got = json.loads(json.dumps(encode_v2_rest(probabilities, request_id, "m")))
    if request_id is None:  # each gets a fresh id
        assert len(got["id"]) == len(expected["id"]) == 36
        got["id"] = expected["id"]
    assert got == expected and list(got) == list(expected)


def test_alike_instances_are_converted_at_once_each_deciding_on_booleans():
    rows, flat = PIXELS[0].tolist(), PIXELS[1].reshape(-1).tolist()
    assert _alike_instances([rows, rows]) is not None
    assert _alike_instances([rows, flat]) is None  # decoded one by one
    for instances in ([rows, rows], [flat, flat], [rows, flat]):
        expected = np.stack([np.asarray(each).reshape(28, 28) for each in instances])
        np.testing.assert_array_equal(decode_v1({"instances": instances}, 4), expected)
    with pytest.raises(
        InvalidInput, match=r"instances\[1\]: pixel values must be numbers .* booleans"
    ):
        decode_v1({"instances": [flat, [True] * 784]}, 4)
    zeros_and_ones = decode_v1({"instances": [flat, [0, 1] * 392]}, 4)
    np.testing.assert_array_equal(zeros_and_ones[1].reshape(-1), [0, 1] * 392)
