"""Shared forward passes: requests waiting in the same loop turn run as one batch."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from prometheus_client import REGISTRY

from serving.batching import SharedForwardPass

METRIC = "request_forward_pass_shared_by"


def shared_by(name: str) -> tuple[float, float]:
    """The passes counted for model ``name`` on /metrics, and the requests they answered."""
    labels = {"model_name": name}
    return tuple(
        REGISTRY.get_sample_value(f"{METRIC}_{part}", labels) or 0.0 for part in ("count", "sum")
    )


class RecordingForward:
    """A stand-in network: each image's 'probabilities' are its first pixel, repeated."""

    def __init__(self, error: Exception | None = None):
        self.batches: list[int] = []
        self.error = error

    def __call__(self, images: np.ndarray) -> np.ndarray:
        self.batches.append(len(images))
        if self.error is not None:
            raise self.error
        return np.repeat(images[:, :1, 0], 10, axis=1)


def images(first_pixel: int, count: int) -> np.ndarray:
    """``count`` images whose first pixel is ``first_pixel``, ``first_pixel + 1``, ..."""
    batch = np.zeros((count, 28, 28), dtype=np.float32)
    batch[:, 0, 0] = np.arange(first_pixel, first_pixel + count)
    return batch


def gather(shared: SharedForwardPass, *requests: np.ndarray) -> list:
    """Every request awaited at once, as concurrent handlers would; results or errors."""

    async def all_at_once():
        return await asyncio.gather(*(shared(r) for r in requests), return_exceptions=True)

    return asyncio.run(all_at_once())


def test_requests_waiting_together_share_one_pass_and_each_gets_its_rows():
    forward = RecordingForward()
    shared = SharedForwardPass(forward, max_images=256, name="three")
    got = gather(shared, images(0, 1), images(10, 3), images(20, 2))
    assert forward.batches == [6]
    assert [answer[:, 0].tolist() for answer in got] == [[0], [10, 11, 12], [20, 21]]
    assert shared_by("three") == (1, 3)


def test_a_pass_takes_at_most_max_images_but_never_splits_a_request():
    forward = RecordingForward()
    shared = SharedForwardPass(forward, max_images=4, name="test")
    got = gather(shared, images(0, 2), images(10, 2), images(20, 3), images(30, 4))
    assert forward.batches == [4, 3, 4]
    assert [answer[:, 0].tolist() for answer in got][2:] == [[20, 21, 22], [30, 31, 32, 33]]


def test_a_request_after_the_pass_gets_a_pass_of_its_own():
    forward = RecordingForward()
    shared = SharedForwardPass(forward, max_images=256, name="test")

    async def one_then_another():
        first = await shared(images(0, 1))
        return first, await shared(images(5, 1))

    first, second = asyncio.run(one_then_another())
    assert forward.batches == [1, 1]
    assert (first[0, 0], second[0, 0]) == (0, 5)


def test_a_failing_pass_fails_every_request_in_it():
    forward = RecordingForward(error=RuntimeError("CUDA out of memory"))
    shared = SharedForwardPass(forward, max_images=256, name="failing")
    got = gather(shared, images(0, 1), images(1, 1))
    assert [str(answer) for answer in got] == ["CUDA out of memory"] * 2
    assert shared_by("failing") == (0, 0)


def test_a_request_whose_client_went_away_is_left_out_of_the_pass():
    forward = RecordingForward()
    shared = SharedForwardPass(forward, max_images=256, name="test")

    async def one_cancelled():
        gone = asyncio.ensure_future(shared(images(0, 1)))
        kept = asyncio.ensure_future(shared(images(7, 2)))
        await asyncio.sleep(0)  # both queued
        gone.cancel()
        return await kept

    kept = asyncio.run(one_cancelled())
    assert forward.batches == [2]
    assert kept[:, 0].tolist() == [7, 8]


@pytest.mark.parametrize("count", [1, 8])
def test_the_predictor_answers_the_same_shared_or_alone(model, test_images, count):
    """The real network: rows of a shared pass equal each image's own pass (float rounding)."""
    singles = [test_images[i : i + 1].astype(np.float32) for i in range(count)]
    alone = [model.probabilities(single) for single in singles]
    passes, _ = shared_by(model.name)
    shared = gather(model.shared_forward_pass, *singles)
    assert shared_by(model.name)[0] == passes + 1
    np.testing.assert_allclose(np.concatenate(shared), np.concatenate(alone), rtol=1e-5, atol=1e-7)


def test_a_request_alone_in_the_server_runs_at_once():
    """No turn of the event loop: the coroutine ends on its first step."""
    shared = SharedForwardPass(RecordingForward(), max_images=256, name="alone")
    step = shared(images(3, 1), alone=True)
    with pytest.raises(StopIteration) as ended:
        step.send(None)
    assert ended.value.value[0, 0] == 3
    assert shared_by("alone") == (1, 1)
