"""The model server: KServe's ``ModelServer`` with request-decoding errors answered as 400s.

A rejected request (4xx) is logged as one line; KServe logs each with its traceback. The
server runs on uvloop, plain JSON predictions take :mod:`serving.shortcut` past KServe's
REST stack, and a replica going away drains first (:mod:`serving.drain`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from http import HTTPStatus

import uvloop
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kserve import ModelServer, model_server
from kserve.errors import InvalidInput, ModelNotFound
from kserve.logging import logger as kserve_logger
from kserve.protocol.dataplane import DataPlane

from serving.defaults import DRAIN_SECONDS, MAX_BATCH_SIZE
from serving.drain import Drain
from serving.limits import BodyLimit, body_limit
from serving.shortcut import PredictShortcut

CLIENT_ERRORS = (InvalidInput, ModelNotFound)  # KServe answers these with a 400 and a 404

# KServe's own server flags (see ``kserve.model_server.parser``) that ModelServer takes.
SERVER_FLAGS = (
    "http_port",
    "grpc_port",
    "workers",
    "max_threads",
    "max_asyncio_workers",
    "enable_grpc",
    "enable_docs_url",
    "enable_latency_logging",
    "access_log_format",
    "event_loop",
    "timeout_keep_alive",
    "ssl_certfile",
    "ssl_keyfile",
)


class OneLineClientErrors(logging.Filter):
    """Turns KServe's log record of a client error (a ~33-line traceback) into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite a record that carries a client error; keep every record."""
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, CLIENT_ERRORS):
            record.msg, record.args = "rejected request: %s", (error,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class ClientErrorDataPlane(DataPlane):
    """KServe's data plane, answering a request it cannot parse with a 400 rather than a 500.

    KServe's decoders index into the parsed body (``body["inputs"]``,
    ``int(header)``, ...), so some malformed requests (the v2 binary tensor extension,
    cloud events) surface as ``KeyError``/``TypeError``/``ValueError``, which its
    server maps to 500. Decoding reads only the request, so any such error is the client's.
    """

    def decode(self, body, headers, *args, **kwargs):
        """``DataPlane.decode``, re-raising parse errors as ``InvalidInput``."""
        try:
            return super().decode(body, headers, *args, **kwargs)
        except InvalidInput:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput(f"malformed request: {type(exc).__name__}: {exc}") from exc


async def request_validation_handler(_: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a v2 body that fails validation, without echoing the body back.

    FastAPI's own handler returns each invalid input, and a body with NaN or Infinity
    (which Python's JSON parser accepts) then fails to serialise: a 500.
    """
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
    )
    kserve_logger.warning("rejected request: invalid inference request: %s", problems)
    return JSONResponse(
        status_code=HTTPStatus.UNPROCESSABLE_ENTITY,
        content={"error": f"invalid inference request: {problems}"},
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer every malformed request with a 4xx and a JSON-safe message, logged as one line."""
    app.add_exception_handler(RequestValidationError, request_validation_handler)
    if not any(isinstance(each, OneLineClientErrors) for each in kserve_logger.filters):
        kserve_logger.addFilter(OneLineClientErrors())


# At import, not in build_server(): with --workers > 1 KServe spawns processes that
# import the app afresh, and they import this module when they unpickle the data plane.
install_error_handlers(model_server.app)


class ShortcutModelServer(ModelServer):
    """KServe's ``ModelServer`` on uvloop, its REST app behind a drain and the shortcut."""

    drain_seconds: float = DRAIN_SECONDS  # how long GET /drain keeps answering
    http_host: str = "0.0.0.0"  # the REST server's address (KServe's is always 0.0.0.0)
    max_body_bytes: int = body_limit()  # larger request bodies get a 413

    def setup_event_loop(self):
        """The event loop, the drain and the shortcut; start() calls it once its servers exist.

        KServe runs one process in ``asyncio.run()``, which ignores ``--event-loop``; the
        policy makes its documented default (``auto``: uvloop) true. With --workers > 1,
        KServe's processes import its app by name and uvicorn picks their loop: no shortcut,
        no drain.
        """
        super().setup_event_loop()
        loop = "asyncio" if self.event_loop == "asyncio" else "uvloop"
        if loop == "uvloop":
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        if self._rest_server is not None:
            # uvicorn's set of request tasks: a request alone in it runs its pass at once.
            tasks = self._rest_server._server.server_state.tasks
            predictions = PredictShortcut(
                model_server.app, self.registered_models, lambda: len(tasks)
            )
            limited = BodyLimit(predictions, self.max_body_bytes)
            self._rest_server.config.app = Drain(limited, self.drain_seconds)
        rest = self._rest_server or self._rest_multiprocess_server._rest_server
        rest.config.host = self.http_host  # read when the servers bind, after this
        front = "on" if self._rest_server is not None else "off (--workers > 1)"
        kserve_logger.info("event loop: %s; REST prediction shortcut and drain: %s", loop, front)


def build_server(args: argparse.Namespace) -> ModelServer:
    """A ``ModelServer`` configured from KServe's parsed server flags (and ``--drain_seconds``)."""
    server = ShortcutModelServer(**{name: getattr(args, name) for name in SERVER_FLAGS})
    server.drain_seconds = getattr(args, "drain_seconds", DRAIN_SECONDS)
    server.http_host = getattr(args, "http_host", ShortcutModelServer.http_host)
    server.max_body_bytes = body_limit(getattr(args, "max_batch_size", MAX_BATCH_SIZE))
    # ModelServer builds its REST and gRPC servers from this attribute in start().
    server.dataplane = ClientErrorDataPlane(model_registry=server.registered_models)
    return server
