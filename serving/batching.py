"""Requests that are waiting at the same moment share one forward pass.

Under concurrent load several decoded requests are often ready in the same turn of the
event loop. A forward pass costs much the same for one image as for a few (most of it is
reading the weights and calling a dozen operators), so :class:`SharedForwardPass` queues
each request's images and runs all that are queued in one pass as soon as the requests
ready in this turn have been decoded. There is no timer, and a request that the server
holds alone (the HTTP server knows) runs its pass at once: waiting for the next turn of
the loop would cost it ~25 us for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
from prometheus_client import Histogram

# Next to KServe's request_*_seconds on /metrics: how well requests share their passes.
REQUESTS_PER_PASS = Histogram(
    "request_forward_pass_shared_by",
    "Requests answered by one forward pass of the REST shortcut",
    ["model_name"],
    buckets=(1, 2, 4, 8, 16, 32, 64),
)


class SharedForwardPass:
    """Runs ``forward`` once for the images of every request queued in one loop turn."""

    def __init__(self, forward: Callable[[np.ndarray], np.ndarray], max_images: int, name: str):
        self.forward = forward  # images [N, 28, 28] -> probabilities [N, classes]
        self.max_images = max_images  # the most images one pass takes
        self.queued: list[tuple[np.ndarray, asyncio.Future]] = []
        self.shared_by = REQUESTS_PER_PASS.labels(model_name=name)

    async def __call__(self, images: np.ndarray, alone: bool = False) -> np.ndarray:
        """The probabilities for ``images``, in a pass shared with the other requests queued.

        ``alone``: no other request is in the server, so none can join; the pass runs now.
        """
        if alone and not self.queued:
            probabilities = self.forward(images)
            self.shared_by.observe(1)
            return probabilities
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.queued:
            # After the callbacks already ready: the other requests read in this turn.
            loop.call_soon(self.run_queued)
        self.queued.append((images, future))
        return await future

    def run_queued(self) -> None:
        """One pass for each run of queued requests that together fit in ``max_images``."""
        queued, self.queued = self.queued, []
        while queued:
            count, taken = 0, 0
            while count < len(queued) and (
                count == 0 or taken + len(queued[count][0]) <= self.max_images
            ):
                taken += len(queued[count][0])
                count += 1
            self.run(queued[:count])
            queued = queued[count:]

    def run(self, group: list[tuple[np.ndarray, asyncio.Future]]) -> None:
        """Forward the group's images together and hand each request its rows."""
        waiting = [(images, future) for images, future in group if not future.done()]
        if not waiting:
            return  # every client went away
        try:
            parts = [images for images, _ in waiting]
            probabilities = self.forward(parts[0] if len(parts) == 1 else np.concatenate(parts))
        except Exception as error:  # every request of the pass gets the error
            for _, future in waiting:
                future.set_exception(error)
            return
        self.shared_by.observe(len(waiting))
        start = 0
        for images, future in waiting:
            future.set_result(probabilities[start : start + len(images)])
            start += len(images)
