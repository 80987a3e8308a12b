"""The trainer's output through torchrun: where torchrun's report begins; the one-line reason.

When a worker fails, torchrun stops the others and reports: a ``failed (exitcode ...)``
line, a ``ChildFailedError`` traceback of its own and a summary, none of which says why.
The step's log keeps all of it; the tail in the step's error stops where it begins (here,
``torchrun --standalone``; on a cluster, rank 0's log), so it ends with the trainer's line.
"""

from __future__ import annotations

import re
from collections import deque

# The trainer's one-line errors ("trainer: error: ...", argparse's "python -m trainer: error:").
_TRAINER_ERROR = re.compile(r"trainer: error: .*")
# The last line of a Python traceback: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:\w+\.)*\w+(?:Error|Exception)\b.*)")
# torchrun's first lines once a worker failed: it stops the other workers, then reports.
_TORCHRUN_FAILED = re.compile(
    r"elastic/multiprocessing/api\.py:\d+\] (?:failed \(exitcode|Sending process \d+ closing)"
)
# Lines of torchrun's report on a failed worker that say nothing about this failure.
_TORCHRUN_REPORT = re.compile(
    r"ChildFailedError|^\s*error_file\s*:|^\s*traceback\s*: To enable traceback"
)


class TrainerTail:
    """The last lines of the trainer's output, up to where torchrun's report begins."""

    def __init__(self, size: int):
        self.lines: deque[str] = deque(maxlen=size)
        self.latest: deque[str] = deque(maxlen=size)  # those of the latest run
        self.reported = False  # torchrun's report began: what follows stays out

    def add(self, line: str) -> None:
        """Keep ``line`` unless it is part of torchrun's report."""
        self.reported = self.reported or bool(_TORCHRUN_FAILED.search(line))
        if not self.reported:
            self.lines.append(line)
            self.latest.append(line)

    def restart(self) -> None:
        """Another run of the trainer begins (a restarted container): keep its lines too."""
        self.reported = False
        self.latest.clear()

    def reason(self) -> str:
        """Why the latest run failed (else an earlier one), in one line: ``failure_reason``."""
        return failure_reason(self._text())

    def error(self) -> str:
        """The latest run's error line (else an earlier one's): ``error_line``."""
        return error_line(self._text())

    def _text(self) -> str:
        return "\n".join(self.latest or self.lines)


def failure_reason(output: str) -> str:
    """Why a trainer run failed, in one line of its output.

    Its ``error_line``, else the last line that says anything (not torchrun's ``====`` rules).
    """
    lines = [line.strip() for line in output.splitlines()]
    said = [line for line in lines if re.search(r"\w", line) and not _TORCHRUN_REPORT.search(line)]
    return error_line(output) or (said[-1] if said else "")


def error_line(output: str) -> str:
    """The trainer's own last error line, else the last exception a traceback ended with."""
    lines = [line.strip() for line in output.splitlines()]
    errors = [found.group(0) for line in lines if (found := _TRAINER_ERROR.search(line))]
    if errors:
        return errors[-1]
    exceptions = [
        found.group(1)
        for line in lines
        if (found := _EXCEPTION.match(line)) and not _TORCHRUN_REPORT.search(line)
    ]
    return exceptions[-1] if exceptions else ""
