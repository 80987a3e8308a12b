"""Request decoding and response encoding for the FashionMNIST predictor.

Every decoder returns a float32 array ``[N, 28, 28]`` of pixel values 0-255 (as in the
dataset) or raises :class:`kserve.errors.InvalidInput`, which KServe answers with a 400
whose ``error`` names what was wrong.

Accepted requests:

- v1 ``{"instances": [...]}``: each instance is 28 rows of 28 pixel values, a flat list
  of 784 pixel values, or ``{"image_bytes": {"b64": "<PNG or JPEG>"}}``. Instances of
  different kinds may be mixed in one request.
- v2 (Open Inference Protocol): exactly one input tensor (any name) of shape
  ``[N, 28, 28]``, ``[N, 1, 28, 28]`` or ``[N, 784]``, datatype ``UINT8`` or ``FP32``
  (FP32 still in 0-255).

Pixel values must be finite numbers in 0-255; ``UINT8`` data must be integers. A
request holds 1 to ``max_batch_size`` images.

Encoded images (``image_bytes``) must be PNG or JPEG of exactly 28x28 pixels; any other
size is rejected with a 400 that names the size. They are not resized: the network
only knows the dataset's centred, dark-background 28x28 items, and a silently
shrunk photo would get a confident but meaningless answer. Colour, alpha, palette
and 16-bit images are converted to 8-bit grayscale with Pillow (ITU-R 601-2 luma,
alpha dropped); FashionMNIST pixels are light-on-dark, so callers must not invert.
"""

from __future__ import annotations

import base64
import binascii
import io
import uuid
from collections.abc import Sequence
from itertools import chain

import numpy as np
import orjson
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse
from PIL import Image

from trainer.data import IMAGE_SIZE

PIXELS = IMAGE_SIZE * IMAGE_SIZE
V2_DATATYPES = ("UINT8", "FP32")
V2_ITEM_SHAPES = ([IMAGE_SIZE, IMAGE_SIZE], [1, IMAGE_SIZE, IMAGE_SIZE], [PIXELS])
IMAGE_FORMATS = ["PNG", "JPEG"]
DTYPE_WORDS = {"b": "booleans", "U": "strings", "S": "strings", "O": "non-numeric or huge values"}
INSTANCE_FORMS = (
    '28 rows of 28 pixel values, 784 pixel values or {"image_bytes": {"b64": "<PNG or JPEG>"}}'
)


def decode_v1(body: object, max_batch_size: int) -> np.ndarray:
    """Images [N, 28, 28] from a v1 body (already parsed JSON, or raw bytes)."""
    if isinstance(body, (bytes, bytearray)):
        body = _parse_json(bytes(body))
    if not isinstance(body, dict) or "instances" not in body:
        raise InvalidInput(f'expected a JSON object {{"instances": [...]}}, got {_kind(body)}')
    instances = body["instances"]
    if not isinstance(instances, list):
        raise InvalidInput(f'"instances" must be a list, got {_kind(instances)}')
    _check_count(len(instances), max_batch_size, "number of instances")
    images = _alike_instances(instances)
    if images is not None:
        return images
    return np.stack([_decode_instance(item, f"instances[{i}]") for i, item in enumerate(instances)])


def decode_v2(request: InferRequest, max_batch_size: int) -> np.ndarray:
    """Images [N, 28, 28] from a v2 inference request with one input tensor."""
    if len(request.inputs) != 1:
        raise InvalidInput(f"expected exactly one input tensor, got {len(request.inputs)}")
    tensor = request.inputs[0]
    where = f"input {tensor.name!r}"
    if tensor.datatype not in V2_DATATYPES:
        raise InvalidInput(
            f"{where}: datatype must be UINT8 or FP32 (pixel values 0-255), got {tensor.datatype}"
        )
    batch = _v2_batch_size(list(tensor.shape), max_batch_size, where)
    pixels = _tensor_values(tensor, where)
    if pixels.size != batch * PIXELS:
        raise InvalidInput(
            f"{where}: shape {list(tensor.shape)} needs {batch * PIXELS} values, got {pixels.size}"
        )
    if tensor.datatype == "UINT8" and pixels.dtype.kind == "f":
        raise InvalidInput(f"{where}: UINT8 data must be integers, got floating-point values")
    _check_pixel_range(pixels, where)
    return pixels.reshape(batch, IMAGE_SIZE, IMAGE_SIZE).astype(np.float32)


def encode_v1(probabilities: np.ndarray, class_names: Sequence[str]) -> dict:
    """The v1 response: per image the class index, its name and the 10 probabilities."""
    labels = probabilities.argmax(axis=1).tolist()
    return {
        "predictions": [
            {"label": label, "class_name": class_names[label], "probabilities": row}
            for label, row in zip(labels, probabilities.tolist(), strict=True)
        ]
    }


def encode_v2(probabilities: np.ndarray, request: InferRequest, model_name: str) -> InferResponse:
    """The v2 response: outputs ``label`` (INT64 [N]) and ``probabilities`` (FP32 [N, 10])."""
    batch, classes = probabilities.shape
    # Lists, not arrays: InferResponse.to_grpc() tests an array's truth value and fails.
    labels = probabilities.argmax(axis=1).tolist()
    outputs = [
        InferOutput("label", [batch], "INT64", data=labels),
        InferOutput("probabilities", [batch, classes], "FP32", data=probabilities.ravel().tolist()),
    ]
    return InferResponse(
        response_id=response_id(request.id),
        model_name=model_name,
        infer_outputs=outputs,
        use_binary_outputs=request.use_binary_outputs,
        requested_outputs=request.request_outputs,
    )


def encode_v2_rest(probabilities: np.ndarray, request_id: str | None, model_name: str) -> dict:
    """:func:`encode_v2`'s answer as KServe's REST server renders it: the same fields, in order.

    For :mod:`serving.shortcut`, which answers without KServe's pydantic round trip.
    """
    batch, classes = probabilities.shape
    outputs = [
        ("label", [batch], "INT64", probabilities.argmax(axis=1).tolist()),
        ("probabilities", [batch, classes], "FP32", probabilities.ravel().tolist()),
    ]
    return {
        "model_name": model_name,
        "model_version": None,
        "id": response_id(request_id),
        "parameters": None,
        "outputs": [
            {"name": name, "shape": shape, "datatype": kind, "parameters": None, "data": data}
            for name, shape, kind, data in outputs
        ],
    }


def response_id(request_id: str | None) -> str:
    """The v2 answer's id: the request's, or a fresh one when it has none (as KServe does)."""
    return request_id or str(uuid.uuid4())


def _parse_json(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc


def _kind(value: object) -> str:
    """A short description of a JSON value for error messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    names.update({int: "a number", float: "a number", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def _check_count(count: int, max_batch_size: int, what: str) -> None:
    if not 1 <= count <= max_batch_size:
        raise InvalidInput(
            f"{what} must be between 1 and {max_batch_size} (--max_batch_size), got {count}"
        )


def _alike_instances(instances: list) -> np.ndarray | None:
    """All instances converted at once when each is integer pixels 0-255 of the same form.

    None otherwise: then each instance is decoded alone, as is one of only 0s and 1s
    here too (it may be booleans, see :func:`_byte_pixels`).
    """
    pixels = _byte_pixels(instances)
    if pixels is None or pixels.shape[1:] not in ((IMAGE_SIZE, IMAGE_SIZE), (PIXELS,)):
        return None
    images = pixels.reshape(-1, IMAGE_SIZE, IMAGE_SIZE)
    if (images.max(axis=(1, 2)) <= 1).any():
        return None
    return images.astype(np.float32)


def _decode_instance(instance: object, where: str) -> np.ndarray:
    if isinstance(instance, dict):
        return _decode_image_bytes(instance, where)
    if not isinstance(instance, list):
        raise InvalidInput(f"{where}: expected {INSTANCE_FORMS}; got {_kind(instance)}")
    pixels = _to_array(instance, where)
    if pixels.shape not in ((IMAGE_SIZE, IMAGE_SIZE), (PIXELS,)):
        raise InvalidInput(
            f"{where}: expected 28 rows of 28 pixel values or 784 pixel values, "
            f"got shape {list(pixels.shape)}"
        )
    _check_pixel_range(pixels, where)
    return pixels.reshape(IMAGE_SIZE, IMAGE_SIZE).astype(np.float32)


def _decode_image_bytes(instance: dict, where: str) -> np.ndarray:
    encoded = instance.get("image_bytes")
    if set(instance) != {"image_bytes"} or not isinstance(encoded, dict):
        raise InvalidInput(f'{where}: an object instance must be {{"image_bytes": {{"b64": ...}}}}')
    text = encoded.get("b64")
    if not isinstance(text, str):
        raise InvalidInput(f'{where}: "image_bytes" needs a "b64" string, got {_kind(text)}')
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"{where}: image_bytes.b64 is not valid base64 ({exc})") from exc
    return _decode_image(data, where)


def _decode_image(data: bytes, where: str) -> np.ndarray:
    try:
        image = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
        if image.size != (IMAGE_SIZE, IMAGE_SIZE):
            raise InvalidInput(
                f"{where}: image must be 28x28 pixels, got {image.width}x{image.height}"
            )
        return np.asarray(image.convert("L"), dtype=np.float32)
    except InvalidInput:
        raise
    except Image.UnidentifiedImageError as exc:
        raise InvalidInput(f"{where}: image_bytes is neither a PNG nor a JPEG image") from exc
    # Pillow parses untrusted bytes and signals a bad file with many exception types
    # (OSError, SyntaxError, ValueError, DecompressionBombError, ...): all mean "not an image".
    except Exception as exc:
        raise InvalidInput(f"{where}: image_bytes is not a decodable PNG or JPEG ({exc})") from exc


def _v2_batch_size(shape: list[int], max_batch_size: int, where: str) -> int:
    if len(shape) < 2 or shape[1:] not in V2_ITEM_SHAPES:
        raise InvalidInput(
            f"{where}: shape must be [N, 28, 28], [N, 1, 28, 28] or [N, 784], got {shape}"
        )
    _check_count(shape[0], max_batch_size, f"{where}: batch size N")
    return shape[0]


def _tensor_values(tensor: InferInput, where: str) -> np.ndarray:
    if isinstance(tensor.data, list) and tensor.data:  # JSON data, or typed gRPC contents
        return _to_array(tensor.data, where)
    try:  # raw bytes (gRPC raw_input_contents, binary extension); empty data ends here too
        return tensor.as_numpy()
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"{where}: tensor data does not match its shape ({exc})") from exc


def _to_array(values: list, where: str) -> np.ndarray:
    pixels = _byte_pixels(values)
    if pixels is not None:
        return pixels
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise InvalidInput(f"{where}: not a rectangular array of numbers ({exc})") from exc
    if array.dtype.kind not in "iuf":
        got = DTYPE_WORDS.get(array.dtype.kind, array.dtype.name)
        raise InvalidInput(f"{where}: pixel values must be numbers 0-255, got {got}")
    return array


def _byte_pixels(values: list) -> np.ndarray | None:
    """uint8 pixels of a rectangular nest of lists of integers 0-255; None for anything else.

    The usual request, converted about three times faster than by ``np.asarray`` (which
    must find each value's type): ``bytes()`` takes exactly the integers 0-255 and raises on
    floats, strings and values out of range, which then take the general path with its
    error messages. So does data of only 0s and 1s: it may be booleans, which that rejects.
    """
    shape, flat = [len(values)], values
    while flat and type(flat[0]) is list:
        width = len(flat[0])
        if not width or not all(type(row) is list and len(row) == width for row in flat):
            return None
        shape.append(width)
        flat = list(chain.from_iterable(flat))
    try:
        pixels = np.frombuffer(bytes(flat), dtype=np.uint8)
    except (TypeError, ValueError):
        return None
    return pixels.reshape(shape) if pixels.size and pixels.max() > 1 else None


def _check_pixel_range(pixels: np.ndarray, where: str) -> None:
    if pixels.dtype == np.uint8:  # from _byte_pixels (or raw UINT8 bytes): 0-255 by construction
        return
    if not np.isfinite(pixels).all():
        raise InvalidInput(f"{where}: pixel values must be finite, got NaN or infinity")
    low, high = pixels.min(), pixels.max()
    if low < 0 or high > 255:
        raise InvalidInput(f"{where}: pixel values must be in 0-255, got {low} to {high}")
