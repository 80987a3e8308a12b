"""Per-epoch progress lines of the training loop, printed without stalling the GPU."""

from __future__ import annotations

import time
from collections import deque

import torch


class Progress:
    """Progress lines that never stall the GPU.

    Each mark starts copying the running loss to the host; a line is printed once its
    copy is done (checked without waiting), and ``flush`` prints the rest.
    """

    def __init__(self, log, epoch: int, total: int):
        self.log, self.epoch, self.total = log, epoch, total
        self.started, self.pending = time.perf_counter(), deque()

    def mark(self, seen: int, steps: int, loss_sum: torch.Tensor) -> None:
        """Note the state after ``steps`` steps; print the lines whose loss has arrived."""
        rate = seen / (time.perf_counter() - self.started)
        self.pending.append((min(seen, self.total), steps, rate, *_copy_to_host(loss_sum)))
        self._print(wait=False)

    def flush(self) -> None:
        """Print every pending line, waiting for their copies."""
        self._print(wait=True)

    def _print(self, wait: bool) -> None:
        while self.pending:
            seen, steps, rate, loss, copied = self.pending[0]
            if copied is not None and not (wait or copied.query()):
                return
            if copied is not None:
                copied.synchronize()
            self.pending.popleft()
            self.log(
                f"epoch {self.epoch} [{seen}/{self.total}] "
                f"loss={loss.item() / steps:.4f} samples/s={rate:.0f}"
            )


def _copy_to_host(value: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """Start copying ``value`` to the host; the event (CUDA only) marks the copy done."""
    if value.device.type != "cuda":
        return value.clone(), None
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return host, copied
