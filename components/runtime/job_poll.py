"""What a watcher sees of a training job at each poll, and how it gives up on one.

The wait (job_wait.py) reads the job once a poll and hands every watcher a ``JobPoll``: the
job as just read, whether Kueue holds it suspended, how long rank 0's log has been quiet,
and, read at most once a poll whoever asks, the job's Kueue Workload and its pods. A
watcher says what the user should know (``say``), may move the wait to the cluster where
the job's pods run (``move_to``), and gives up on a job that can never finish by raising
``GiveUp``; the wait then deletes the job, freeing its quota and GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from components.runtime.discovery import kueue_resource
from components.runtime.kube import KubeClient
from components.runtime.waiting import true_conditions
from components.specs.kinds import WORKLOAD, JobKind
from components.specs.workload import JOB_UID_LABEL


class JobFailed(RuntimeError):
    """The training job failed, or vanished."""


class GiveUp(JobFailed):
    """A watcher's verdict: the job can never finish. The wait deletes it."""


@dataclass(frozen=True)
class Place:
    """Where the job's pods run, as seen from the step."""

    cluster: str = ""  # "": this cluster; else the worker cluster MultiKueue chose
    kube: KubeClient | None = None  # a client there; None: out of reach from here
    log_hint: str = ""  # how to read rank 0's log where it is out of reach


@dataclass(frozen=True)
class Job:
    """Which job is followed: its kind, namespace and name, on the step's cluster."""

    kube: KubeClient
    kind: JobKind
    namespace: str
    name: str

    @property
    def what(self) -> str:
        """``PyTorchJob ns/name``."""
        return f"{self.kind.resource.kind} {self.namespace}/{self.name}"


class JobPoll:
    """One poll of the job, as every watcher sees it."""

    def __init__(
        self,
        job: Job,
        found: dict,
        place: Place,
        quiet_seconds: float | None,
        say: Callable[[str], None],
        move_to: Callable[[Place], None],
    ):
        self.job, self.found, self.place = job, found, place
        self.what = job.what
        self.suspended = job.kind.suspended in true_conditions(found)
        self.quiet_seconds = quiet_seconds  # since rank 0's log moved; None: not followed here
        self.say, self.move_to = say, move_to
        self._workload: dict | None = None
        self._pods: list | None = None

    def workload(self) -> dict:
        """The job's Kueue Workload, read once a poll; {} when there is none or no answer."""
        if self._workload is None:
            self._workload = _workload(self.job, self.found)
        return self._workload

    def pods(self) -> list:
        """The job's pods where they run, read once a poll; none when out of reach."""
        if self._pods is None:
            kube = self.place.kube
            selector = self.job.kind.pods_selector(self.job.name)
            self._pods = kube.list_pods(self.job.namespace, selector) if kube else []
        return self._pods


class Watcher(Protocol):
    """One fault the wait looks for at every poll."""

    def see(self, poll: JobPoll) -> None:
        """Look at one poll: say what the user should know; raise ``GiveUp`` to give up."""


def _workload(job: Job, found: dict) -> dict:
    uid = found["metadata"].get("uid")
    try:
        workloads = job.kube.list(
            kueue_resource(job.kube, WORKLOAD), job.namespace, f"{JOB_UID_LABEL}={uid}"
        )
    except Exception:  # noqa: BLE001 - a hint only; the job's own conditions suffice
        return {}
    return workloads[0] if workloads else {}
