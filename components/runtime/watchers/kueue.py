"""Kueue holds the job suspended: say why, and give up on a job it admitted but cannot start.

Kueue suspends a job until its Workload is admitted; the Workload's ``QuotaReserved``
condition says why it waits (components/specs/workload.py). A job Kueue admitted yet keeps
suspended for STUCK_SECONDS will not start: Kueue v0.19.2 writes ``spec.runtimePatches``
into a TrainJob to start it (``pkg/controller/jobs/trainjob/trainjob_controller.go``), a
field Trainer v2.1.0's CRD does not have.
"""

from __future__ import annotations

import time

from components.runtime.job_poll import GiveUp, JobPoll
from components.runtime.waiting import true_conditions
from components.specs.workload import admission_state

STUCK_SECONDS = 180  # admitted by Kueue yet suspended this long: Kueue cannot start it


class JobStuck(GiveUp):
    """Kueue admitted the job, but it never started."""


class KueueAdmission:
    """While the job is suspended, says why once per reason; gives up on a stuck one."""

    def __init__(self):
        self.said, self.admitted_at = None, None

    def see(self, poll: JobPoll) -> None:
        """Say why a suspended job waits; raise JobStuck for one admitted that never starts."""
        if not poll.suspended:
            return
        admitted, message = admission_state(poll.workload())
        if not admitted:
            self.admitted_at = None
        elif self.admitted_at is None:
            self.admitted_at = time.monotonic()
        elif time.monotonic() - self.admitted_at > STUCK_SECONDS:
            raise JobStuck(
                f"{poll.what} was admitted by Kueue {STUCK_SECONDS} s ago but is still "
                "suspended: Kueue cannot start it. Kueue >= 0.19 cannot start a Kubeflow "
                "Trainer v2.1 TrainJob (it writes spec.runtimePatches, a v2.2 field; see "
                "docs/operations.md#compatibility); otherwise see the Workload's events."
            )
        suspended = true_conditions(poll.found)[poll.job.kind.suspended]
        reason = message or suspended.get("message", "")
        if reason != self.said:
            self.said = reason
            poll.say(f"{poll.what} is suspended by Kueue, waiting for admission: {reason}")
