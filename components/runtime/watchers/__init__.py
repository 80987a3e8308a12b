"""The faults the wait for a training job looks for: one watcher a module, none knowing another.

Each watcher sees every poll of the job (``components.runtime.job_poll.JobPoll``), may say
something, move the wait to where the job's pods run, or give up on the job. A new fault is
a new module here and a line in ``every``.
"""

from __future__ import annotations

from components.runtime.job_poll import Watcher
from components.runtime.watchers.kueue import KueueAdmission
from components.runtime.watchers.lost_nodes import LostNodes
from components.runtime.watchers.multikueue import MultiKueue
from components.runtime.watchers.preemption import Preemptions
from components.runtime.watchers.stall import Stall


def every() -> list[Watcher]:
    """A fresh watcher of each kind, in the order they look at a poll.

    MultiKueue comes first: it moves the wait to the worker cluster that runs the pods,
    where the later ones then look.
    """
    return [MultiKueue(), KueueAdmission(), Preemptions(), LostNodes(), Stall()]
