"""Draining: a replica that is going away sends its clients elsewhere before it stops.

The InferenceService's preStop hook (components/specs/inferenceservice.py) calls
``GET DRAIN_PATH`` when Kubernetes deletes the pod. By then the pod has left its Service's
endpoints, so new connections go to other replicas, but clients that keep a connection
open go on sending over it. From that call on, every answer says ``Connection: close``, so
each such client opens its next connection to a ready replica; the call returns after
DRAIN_SECONDS, and only then does the kubelet send SIGTERM. Without it, uvicorn's stop
closes those connections under requests already on their way: the clients see resets.

Only the pod itself may drain it: the call is taken from a loopback peer only (the hook
is an ``exec`` in the container, not the kubelet's ``httpGet`` from the node), and any
other caller gets a 403, so no client of the Service can leave a replica draining for good.
"""

from __future__ import annotations

import asyncio
import ipaddress

from serving.defaults import DRAIN_PATH, DRAIN_SECONDS
from serving.limits import send_error

CLOSE = (b"connection", b"close")


class Drain:
    """An ASGI app: ``GET DRAIN_PATH`` starts the drain; ``app`` answers everything else."""

    def __init__(self, app, seconds: float = DRAIN_SECONDS):
        self.app, self.seconds, self.draining = app, seconds, False

    async def __call__(self, scope, receive, send):
        """Answer the drain call, or pass the request on, closing its connection if draining."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope["path"] == DRAIN_PATH and scope["method"] == "GET":
            if from_inside(scope):
                await self._drain(send)
            else:
                await send_error(send, 403, f"{DRAIN_PATH} is taken from inside the pod only")
        elif self.draining:
            await self.app(scope, receive, _closing(send))
        else:
            await self.app(scope, receive, send)

    async def _drain(self, send) -> None:
        self.draining = True
        await asyncio.sleep(self.seconds)
        body = b"drained\n"
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": [*headers, CLOSE]})
        await send({"type": "http.response.body", "body": body})


def from_inside(scope) -> bool:
    """Whether the request's peer is a loopback address (the pod's own network namespace)."""
    client = scope.get("client")
    try:
        return client is not None and ipaddress.ip_address(client[0]).is_loopback
    except ValueError:  # a unix socket's peer, or no address
        return False


def _closing(send):
    """``send`` that adds ``Connection: close`` to the response's headers."""

    async def closing_send(message):
        if message["type"] == "http.response.start":
            kept = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
            message = {**message, "headers": [*kept, CLOSE]}
        await send(message)

    return closing_send
