"""One waiting loop for every object a step follows: training jobs, Experiments, services.

``wait_until(check, ...)`` calls ``check()`` every ``poll_seconds`` until it returns a
value. ``check`` raises to fail (a Failed job, a crash-looping predictor). A transient API
error (``kube.is_transient``: a 5xx, a 429, a dropped connection, a pod deleted between
list and log read; a few 401/403 in a row, as from a restarting apiserver) is logged and
waited out; only the deadline ends the wait otherwise,
with a ``TimeoutError`` that carries ``describe()``: what the object looked like last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from kubernetes.client.exceptions import ApiException

from components.runtime.kube import is_transient

T = TypeVar("T")
POLL_SECONDS = 10.0
AUTH_RETRIES = 4  # consecutive 401/403 answers waited out (an apiserver starting up)


def wait_until(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout_seconds: float,
    describe: Callable[[], str] = lambda: "",
    poll_seconds: float | None = None,
    echo: Callable[[str], None] = print,
) -> T:
    """Poll ``check`` every ``poll_seconds`` (default POLL_SECONDS) until it returns a value.

    Raises:
        TimeoutError: at the deadline, with ``describe()``.
    """
    poll_seconds = poll_seconds or POLL_SECONDS
    deadline = time.monotonic() + timeout_seconds
    failures = 0
    while True:
        try:
            result = check()
            failures = 0
        except Exception as error:
            if not _worth_waiting_out(error, failures):
                raise
            failures += 1
            echo(f"{what}: transient API error ({short_reason(error)}); retry {failures}")
            result = None
        if result is not None:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            detail = describe()
            raise TimeoutError(
                f"{what} did not finish within {timeout_seconds:g} s"
                + (f".\n{detail}" if detail else "")
            )
        pause = poll_seconds * min(2**failures, 6) if failures else poll_seconds
        time.sleep(max(0.0, min(pause, left)))


class Watch(Protocol[T]):
    """An object a step follows: one ``check`` a poll, its name, what it looked like last."""

    @property
    def what(self) -> str:
        """The object's kind and name, such as ``PyTorchJob team/fmnist-train-1``."""

    def check(self) -> T | None:
        """The object once it is done; None meanwhile; raises if it can never get there."""

    def describe(self) -> str:
        """What the object looked like at the last check, for the timeout's message."""


def follow(watch: Watch[T], timeout_seconds: float, **options) -> T:
    """``wait_until(watch.check)`` named by ``watch.what`` and described by ``watch.describe``.

    ``options`` are ``wait_until``'s ``poll_seconds`` and ``echo``.
    """
    return wait_until(
        watch.check,
        what=watch.what,
        timeout_seconds=timeout_seconds,
        describe=watch.describe,
        **options,
    )


def _worth_waiting_out(error: BaseException, failures: int) -> bool:
    """A transient error always; a 401 or 403 only a few times in a row.

    A restarting kube-apiserver answers 403 until its RBAC caches are filled, and 401 until
    its token authenticator is; a permission that is really missing keeps failing.
    """
    if is_transient(error):
        return True
    refused = isinstance(error, ApiException) and error.status in (401, 403)
    return refused and failures < AUTH_RETRIES


def short_reason(error: BaseException) -> str:
    """An error in a few words: an API error's status and reason, else its type and text."""
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"


def true_conditions(obj: dict) -> dict[str, dict]:
    """The object's conditions whose status is True, by type."""
    conditions = (obj or {}).get("status", {}).get("conditions", [])
    return {item.get("type"): item for item in conditions if item.get("status") == "True"}


def condition_summary(obj: dict | None) -> str:
    """The object's conditions, one ``Type=Status (Reason: message)`` per line."""
    lines = []
    for item in (obj or {}).get("status", {}).get("conditions", []):
        detail = ": ".join(part for part in (item.get("reason"), item.get("message")) if part)
        lines.append(
            f"{item.get('type')}={item.get('status')}" + (f" ({detail})" if detail else "")
        )
    return "\n".join(lines) or "(no conditions yet)"
