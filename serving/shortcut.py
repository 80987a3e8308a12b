"""The REST shortcut: well-formed JSON predictions answered in front of KServe's app.

KServe 0.21 passes each REST request through FastAPI's routing and dependency solving,
its timing middleware (two log lines, two ``getrusage`` calls), Prometheus timers,
a pydantic validation of v2 bodies and of v2 answers, and its data plane: more CPU than
the network's forward pass (``docs/serving.md``, "Where a request's time goes").
:class:`PredictShortcut` sits in front of that app and answers
``POST /v1/models/<name>:predict`` and ``POST /v2/models/<name>/infer`` itself when the
request is plain JSON for a ready :class:`~serving.predictor.FashionMNISTModel`, with the
same decoding, network and answer as KServe's path, and KServe's metrics; requests it
decodes in the same turn of the event loop share one forward pass (:mod:`serving.batching`).
Everything else (other routes, cloud events, the v2 binary extension, requested outputs,
parameters, and every request it would reject) goes to KServe's app with the body
replayed, so errors, their status codes and log lines stay KServe's own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import orjson
from kserve.errors import InvalidInput
from kserve.logging import trace_logger
from kserve.metrics import POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME
from kserve.model_repository import ModelRepository
from kserve.protocol.infer_type import InferInput, InferRequest
from kserve.utils.utils import is_structured_cloudevent

from serving.codec import encode_v1, encode_v2_rest
from serving.limits import read_body, replay
from serving.predictor import Batch, FashionMNISTModel

InFlight = Callable[[], int] | None
ROUTES = {"v1": ("/v1/models/", ":predict"), "v2": ("/v2/models/", "/infer")}
# Fields that KServe ignores when null or empty, and their empty values.
EMPTY = {"parameters": (None, {}), "outputs": (None, [])}


class PredictShortcut:
    """An ASGI app: answers plain JSON predictions, hands every other request to ``app``."""

    def __init__(self, app, models: ModelRepository, requests_in_flight: InFlight = None):
        self.app = app
        self.models = models
        # How many requests the HTTP server holds, this one included (None: unknown).
        self.requests_in_flight = requests_in_flight

    async def __call__(self, scope, receive, send) -> None:
        """Answer the request if it is a plain JSON prediction, else pass it on unchanged."""
        route = self.route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        body, complete = await read_body(receive)
        if not complete:  # the client went away: nobody to answer
            return
        answer = await self.answer(*route, body)
        if answer is None:
            await self.app(scope, replay(body, receive), send)
            return
        headers = [(b"content-length", b"%d" % len(answer)), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def route(self, scope) -> tuple[str, FashionMNISTModel, dict] | None:
        """The protocol, the model and the headers of a prediction the shortcut may answer."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        target = prediction_target(scope["path"])
        if target is None:
            return None
        protocol, name = target
        model = self.models.get_model(name)
        if not isinstance(model, FashionMNISTModel) or not model.ready:
            return None  # KServe answers: 404, 503, or another kind of model
        headers = dict(scope["headers"])
        return (protocol, model, headers) if plain_json(protocol, headers) else None

    async def answer(self, protocol: str, model: FashionMNISTModel, headers: dict, body: bytes):
        """The answer's JSON, or None when KServe's path must answer (it may reject it).

        The forward pass is shared with the other requests decoded in the same turn of the
        event loop (:mod:`serving.batching`).
        """
        decoded = parse(protocol, model, body)
        if decoded is None:
            return None
        images, request_id, preprocess_s = decoded
        start = time.perf_counter()
        alone = self.requests_in_flight is not None and self.requests_in_flight() <= 1
        probabilities = await model.shared_forward_pass(images, alone)
        if protocol == "v1":
            answer = encode_v1(probabilities, model.class_names)
        else:
            answer = encode_v2_rest(probabilities, request_id, model.name)
        observe(model, headers, preprocess_s, time.perf_counter() - start)
        return orjson.dumps(answer)


def parse(protocol: str, model: FashionMNISTModel, body: bytes):
    """The images, the v2 request id and the decoding time; None if KServe's path must decode.

    The parsed JSON is dropped here, before the request waits for its forward pass: kept
    alive by several waiting requests (a 64-image body is ~1,800 lists), it made Python's
    garbage collector scan it again and again, +50 % CPU for 64-image requests.
    """
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    start = time.perf_counter()
    try:
        batch = decode(protocol, model, request)
    except InvalidInput:
        return None
    if batch is None:
        return None
    request_id = None if batch.request is None else batch.request.id
    return batch.images, request_id, time.perf_counter() - start


def decode(protocol: str, model: FashionMNISTModel, request: object) -> Batch | None:
    """The model's decoded batch, or None for a body that KServe reads another way."""
    if not isinstance(request, dict):
        return None
    if protocol == "v1":
        return None if is_structured_cloudevent(request) else model.preprocess(request)
    infer_request = v2_request(request, model.name)
    return None if infer_request is None else model.preprocess(infer_request)


def prediction_target(path: str) -> tuple[str, str] | None:
    """The protocol and model name of a prediction URL, matched as KServe's routes match it."""
    for protocol, (prefix, suffix) in ROUTES.items():
        name = path[len(prefix) : -len(suffix)]
        if path.startswith(prefix) and path.endswith(suffix) and name and "/" not in name:
            return protocol, name
    return None


def plain_json(protocol: str, headers: dict) -> bool:
    """Whether KServe would read the body as plain JSON, not a cloud event or binary data."""
    if any(name.startswith(b"ce-") for name in headers):
        return False
    content_type = headers.get(b"content-type")
    if protocol == "v1":
        return content_type != b"application/cloudevents+json"
    return content_type == b"application/json" and b"inference-header-content-length" not in headers


def v2_request(body: dict, model_name: str) -> InferRequest | None:
    """The request as KServe builds it from a v2 body with one plain tensor; None otherwise.

    Only fields that pydantic takes as they are: a body with anything it would coerce or
    reject, or that KServe acts on (parameters, requested outputs), goes to KServe's path.
    """
    inputs, request_id = body.get("inputs"), body.get("id")
    if not bare(body, {"id", "inputs"}) or not isinstance(inputs, list) or len(inputs) != 1:
        return None
    tensor = inputs[0]
    if not isinstance(tensor, dict) or not bare(tensor, {"name", "shape", "datatype", "data"}):
        return None
    name, shape, datatype, data = (tensor.get(key) for key in ("name", "shape", "datatype", "data"))
    if not (
        (request_id is None or isinstance(request_id, str))
        and isinstance(name, str)
        and isinstance(datatype, str)
        and isinstance(data, list)
        and isinstance(shape, list)
        and all(type(size) is int for size in shape)
    ):
        return None
    tensor = InferInput(name=name, shape=shape, datatype=datatype, data=data, parameters={})
    return InferRequest(model_name, [tensor], request_id=request_id)


def bare(fields: dict, keys: set[str]) -> bool:
    """Whether ``fields`` has no other keys than ``keys``, but for empty parameters or outputs."""
    others = fields.keys() - keys
    return others <= EMPTY.keys() and all(fields[key] in EMPTY[key] for key in others)


def observe(model: FashionMNISTModel, headers: dict, preprocess_s: float, predict_s: float):
    """KServe's per-request metrics and (with --enable_latency_logging) its latency line."""
    preprocess, predict, postprocess = histograms(model.name)
    preprocess.observe(preprocess_s)
    predict.observe(predict_s)
    postprocess.observe(0.0)  # the identity
    if model.enable_latency_logging is True:
        request_id = headers.get(b"x-request-id", b"N.A.").decode("latin-1")
        trace_logger.info(
            f"requestId: {request_id}, preprocess_ms: {round(preprocess_s * 1e3, 9)}, "
            f"explain_ms: 0, predict_ms: {round(predict_s * 1e3, 9)}, postprocess_ms: 0.0"
        )


@functools.cache
def histograms(model_name: str) -> tuple:
    """KServe's preprocess, predict and postprocess histograms of one model (looked up once)."""
    return tuple(
        histogram.labels(model_name=model_name)
        for histogram in (PRE_HIST_TIME, PREDICT_HIST_TIME, POST_HIST_TIME)
    )
