"""The post-deploy check: the model as served answers test images about as well as evaluated.

Once a rollout is done, the deploy step sends the first ``images`` test images of the packed
dataset to the InferenceService, BATCH_IMAGES a request, through the v1 client of the local
check (``local_predictor.predict_v1``: a timeout on each request, a limit on each answer).
It passes when every request is answered and the served accuracy is at least the accuracy
the evaluate step measured less ``tolerance``.

The tolerance is a binomial bound. The slice is part of the test set the evaluate step
measured, so the accuracy of the same model on it is a mean of ``n`` right-or-wrong answers
around the evaluated accuracy ``p``, with a standard error of at most ``sqrt(p(1-p)/n)``.
A served model that is the evaluated one falls more than Z_SCORE = 4 standard errors below
``p`` about 3 times in 100,000 deploys; with n = 1000 and p = 0.9 that is 0.038, while a
model that answers wrongly (an untrained one: about 0.1) is far below. MIN_TOLERANCE keeps
room for the serving network's float rounding when ``p`` is near 0 or 1.
"""

from __future__ import annotations

import http.client
import math
from collections.abc import Callable

from components.runtime.local_predictor import predict_v1
from components.runtime.waiting import short_reason

CHECK_IMAGES = 1000  # test images sent after a rollout: 10 requests, a tolerance of ~0.04
BATCH_IMAGES = 100  # images a request, under the predictor's --max_batch_size (256)
REQUEST_TIMEOUT_SECONDS = 30.0  # connect and read, per request
Z_SCORE = 4.0
MIN_TOLERANCE = 0.005


class CheckFailed(RuntimeError):
    """The served model failed a request, or answered worse than evaluated."""


def tolerance(accuracy: float, images: int) -> float:
    """How far below ``accuracy`` the same model may score on ``images`` of its test set."""
    return max(MIN_TOLERANCE, Z_SCORE * math.sqrt(accuracy * (1 - accuracy) / images))


def check_served(
    url: str, model_name: str, dataset_dir: str, accuracy: float, images: int = CHECK_IMAGES
) -> float:
    """Send the first ``images`` test images to ``url``; the served accuracy.

    Raises:
        CheckFailed: a request failed, or the accuracy is below ``accuracy - tolerance``.
    """
    from trainer.data import load_packed

    test = load_packed(dataset_dir).test.head(images)
    starts = range(0, len(test), BATCH_IMAGES)
    right, failures = 0, []
    for start in starts:
        batch = slice(start, start + BATCH_IMAGES)
        try:
            labels = predict_v1(url, model_name, test.images[batch], REQUEST_TIMEOUT_SECONDS)
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as error:
            failures.append(short_reason(error))
            continue
        right += sum(a == b for a, b in zip(labels, test.labels[batch].tolist(), strict=True))
    if failures:
        raise CheckFailed(
            f"{len(failures)} of {len(starts)} requests to {url} failed (first: {failures[0]})"
        )
    served, floor = right / len(test), accuracy - tolerance(accuracy, len(test))
    if served < floor:
        raise CheckFailed(
            f"it answered {served:.4f} of {len(test)} test images right, below {floor:.4f} "
            f"(the evaluated accuracy {accuracy:.4f} less the tolerance "
            f"{accuracy - floor:.4f})"
        )
    print(
        f"post-deploy check: {url} answered {served:.4f} of {len(test)} test images right "
        f"(evaluated: {accuracy:.4f}, at least {floor:.4f} needed)",
        flush=True,
    )
    return served


def post_deploy_check(
    model_name: str, dataset_dir: str, accuracy: float, images: int = CHECK_IMAGES
) -> Callable[[str], float]:
    """``check_served`` of a service URL, the rest given; the deploy step hands it to serve."""
    if not 0 <= accuracy <= 1:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
    if images < 1:
        raise ValueError(f"check images must be at least 1, got {images}")
    return lambda url: check_served(url, model_name, dataset_dir, accuracy, images)
