"""Following a training job to its end: each poll reads it, asks the watchers, copies the log.

What the wait does itself, for both job kinds alike (it knows a kind by its ``JobKind``):
- rank 0's log streams into the step's log (logs.py);
- a succeeded job ends the wait; a failed one fails the step with the trainer's reason in
  one line, its conditions, its pods that never started and the log's tail up to torchrun's
  report (the job stays for inspection); a job that vanished fails the step;
- transient API errors are waited out (waiting.py); the step's timeout, a termination
  (SIGTERM, Ctrl-C) or a watcher giving up deletes the job, freeing its quota and GPUs.

Every fault beyond these is a watcher (components/runtime/watchers/), each in its own
module: at every poll each sees the job as just read (a ``JobPoll``) and may say
something, move the wait to the cluster where the job's pods run, or give up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from components.runtime import pod_status, watchers
from components.runtime.job_poll import GiveUp, Job, JobFailed, JobPoll, Place, Watcher
from components.runtime.kube import KubeClient
from components.runtime.logs import LogFollower
from components.runtime.signals import terminate_on_sigterm
from components.runtime.waiting import condition_summary, follow, true_conditions
from components.specs.kinds import JobKind


class JobWait:
    """Follows one job; ``check`` is one poll (``waiting.follow`` calls it)."""

    def __init__(self, job: Job, watching: Sequence[Watcher], echo: Callable[[str], None]):
        self.job, self.watching, self.echo = job, list(watching), echo
        self.what, self.last = job.what, None
        self.move_to(Place(kube=job.kube))

    def move_to(self, place: Place) -> None:
        """Follow the job's pods and rank 0's log where they run from now on."""
        self.place, kind = place, self.job.kind
        selector = kind.rank0_selector(self.job.name)
        self.logs = (
            LogFollower(place.kube, self.job.namespace, selector, kind.container, self.echo)
            if place.kube
            else None
        )
        self.moved_at = (None, time.monotonic())  # rank 0's log position, and since when

    def check(self) -> dict | None:
        """The job once it succeeded; None while it runs or waits; raises if it failed."""
        job, kind = self.job, self.job.kind
        found = job.kube.get(kind.resource, job.namespace, job.name)
        if found is None:
            raise JobFailed(f"{self.what} disappeared (deleted by someone?)")
        self.last = found
        poll = JobPoll(job, found, self.place, self._quiet_seconds(), self.echo, self.move_to)
        for watcher in self.watching:
            watcher.see(poll)
        if poll.suspended:
            self.moved_at = (self.moved_at[0], time.monotonic())  # waiting is not quiet
            return None
        if self.logs:
            self.logs.poll()
        true = true_conditions(found)
        if kind.succeeded in true:
            return found
        if kind.failed in true:
            where = f" on cluster {self.place.cluster}" if self.place.cluster else ""
            reason = self.logs.reason() if self.logs and not self.place.log_hint else ""
            why = f": {reason}" if reason else "."
            raise JobFailed(f"{self.what} failed{where}{why}\n{self.describe()}")
        return None

    def describe(self) -> str:
        """The job's conditions, its pods that never started, the last lines of rank 0's log."""
        pending = self._pending_pods()
        log = self.place.log_hint or (self.logs.tail_text() if self.logs else "(none)")
        return (
            f"Conditions:\n{condition_summary(self.last)}\n"
            + (f"Pods not started:\n{pending}\n" if pending else "")
            + f"Last lines of rank 0's log:\n{log}"
        )

    def _quiet_seconds(self) -> float | None:
        """Seconds since rank 0's log last moved; None where it is not followed here."""
        if self.logs is None:
            return None
        seen, now = (self.logs.current, self.logs.printed), time.monotonic()
        if seen != self.moved_at[0]:
            self.moved_at = (seen, now)
        return now - self.moved_at[1]

    def _pending_pods(self) -> str:
        """Why each Pending pod of the job waits (unschedulable, an image, a volume)."""
        if self.place.kube is None:
            return ""
        try:
            pods = self.place.kube.list_pods(
                self.job.namespace, self.job.kind.pods_selector(self.job.name)
            )
        except Exception as error:  # the message is for a failure already under way
            return f"(could not list the job's pods: {error})"
        return pod_status.summary(pods)


def follow_job(
    kube: KubeClient,
    kind: JobKind,
    namespace: str,
    name: str,
    timeout_seconds: float,
    watching: Sequence[Watcher] | None = None,
    echo: Callable[[str], None] = print,
) -> dict:
    """Follow the job to its end with ``watching`` (default: every watcher); the job as it ended.

    The step's timeout, a termination or a watcher's ``GiveUp`` deletes the job first.

    Raises:
        JobFailed: the job failed or vanished (``GiveUp``: a watcher gave up on it).
        TimeoutError: it did not end within ``timeout_seconds``.
    """
    job = Job(kube, kind, namespace, name)
    wait = JobWait(job, watchers.every() if watching is None else watching, echo)
    with terminate_on_sigterm():
        try:
            return follow(wait, timeout_seconds, echo=echo)
        except (TimeoutError, KeyboardInterrupt, GiveUp):  # free its quota and GPUs
            echo(f"deleting {wait.what}")
            job.kube.delete(job.kind.resource, job.namespace, job.name)
            raise
