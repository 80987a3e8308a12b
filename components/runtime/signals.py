"""SIGTERM as an exception, so a terminated step cleans up like an interrupted one.

KFP's "Terminate", a pod eviction and a node drain all send SIGTERM to the step's
process; Python's default is to die without running ``except``/``finally`` blocks, which
would leave a training job holding its GPUs and Kueue quota until its deadline.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """The step was asked to stop (SIGTERM)."""


def _raise_terminated(signum, frame):
    raise Terminated(f"received signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def terminate_on_sigterm():
    """Within the block, SIGTERM raises ``Terminated`` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; KFP runs steps there
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
