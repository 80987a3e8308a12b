"""The request body limit: refused with a 413 before the body is held whole.

The largest request the predictor answers is ``--max_batch_size`` images; the limit is
that many images written the longest way the decoders accept (784 pixel values of up to
24 JSON characters each, which also covers a 28x28 PNG or JPEG in base64), plus room for
the envelope. A declared ``Content-Length`` beyond it is refused before any of the body is
read; a body without one (chunked) is read up to the limit and refused as soon as it
passes it. Without this a single large POST takes a replica past its memory limit.
"""

from __future__ import annotations

import orjson

from serving.defaults import MAX_BATCH_SIZE

PIXELS = 28 * 28
BYTES_PER_IMAGE = PIXELS * 24  # "254.99999999999997, " and the like
ENVELOPE_BYTES = 64 * 1024  # {"instances": ...}, v2's tensor fields, an id


def body_limit(max_batch_size: int = MAX_BATCH_SIZE) -> int:
    """The most bytes a request body may have, for batches of up to ``max_batch_size``."""
    return max_batch_size * BYTES_PER_IMAGE + ENVELOPE_BYTES


class BodyTooLarge(Exception):
    """A request body passed the limit while it was read."""


async def read_body(receive, limit: int | None = None) -> tuple[bytes, bool]:
    """The request body, and False if the client disconnected before it was complete.

    Raises:
        BodyTooLarge: the body passed ``limit`` bytes (None: no limit); the rest is unread.
    """
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def replay(body: bytes, receive):
    """A ``receive`` that yields the body already read, then waits on the connection."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again():
        return pending.pop() if pending else await receive()

    return receive_again


async def send_error(send, status: int, message: str) -> None:
    """Answer ``{"error": message}`` (KServe's error body) with ``status``; close the connection."""
    body = orjson.dumps({"error": message}) + b"\n"
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """An ASGI app: a request whose body passes ``limit`` gets a 413; ``app`` answers the rest."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        """Refuse from Content-Length, or bound a chunked body while reading it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None:  # uvicorn has checked that it is a number
            if int(declared) > self.limit:
                await self._refuse(send, f"{int(declared)} bytes")
                return
            await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b"").lower():
            await self.app(scope, receive, send)  # no body
            return
        try:
            body, complete = await read_body(receive, self.limit)
        except BodyTooLarge:
            await self._refuse(send, "a chunked body")
            return
        if complete:
            await self.app(scope, replay(body, receive), send)

    async def _refuse(self, send, what: str) -> None:
        message = f"request body too large: {what}, over the limit of {self.limit} bytes"
        await send_error(send, 413, message)
