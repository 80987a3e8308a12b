"""What a Kueue Workload says of its job: admitted or why not, where, preempted by whom.

Pure readings of a Workload's status, as Kueue v0.19.2 writes it:
- ``QuotaReserved`` carries why a job waits and ``Admitted`` that it may start
  (``pkg/workload/workload.go``);
- a preempted Workload stands ``Evicted=True``, reason ``Preempted``, its message naming
  the preemptor by Workload UID and job UID (``pkg/scheduler/preemption/preemption.go``
  preemptionMessage); re-admission turns the condition False (``SetQuotaReservation``);
- MultiKueue names the worker cluster that admitted it in ``status.clusterName`` and the
  state of each admission check in ``status.admissionChecks``
  (``pkg/controller/admissionchecks/multikueue/workload.go``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # kueue v0.19.2 pkg/controller/constants
PREEMPTED_BY = re.compile(r"Preempted to accommodate a workload \(UID: ([^,]+), JobUID: ([^)]*)\)")


@dataclass(frozen=True)
class Preemption:
    """The preemptor of an evicted Workload, as Kueue names it."""

    workload_uid: str
    job_uid: str


def admission_state(workload: dict) -> tuple[bool, str]:
    """(admitted, why not): the ``QuotaReserved`` condition's message while not admitted."""
    conditions = workload.get("status", {}).get("conditions", [])
    admitted = any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)
    waiting = [c.get("message", "") for c in conditions if c.get("type") == "QuotaReserved"]
    return admitted, "" if admitted else next((m for m in waiting if m), "")


def preemption(workload: dict) -> Preemption | None:
    """The preemptor while ``workload`` stands evicted by preemption; None otherwise."""
    for condition in workload.get("status", {}).get("conditions", []):
        if (condition.get("type"), condition.get("status")) != ("Evicted", "True"):
            continue
        found = PREEMPTED_BY.search(condition.get("message", ""))
        if condition.get("reason") == "Preempted" and found:
            return Preemption(found.group(1), found.group(2))
    return None


def dispatched_to(workload: dict) -> str:
    """The worker cluster that admitted the workload ("" while none has)."""
    return (workload.get("status") or {}).get("clusterName") or ""


def admission_checks(workload: dict) -> str:
    """The Workload's admission checks and their states: ``fmnist-multikueue: Pending (…)``."""
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    return "; ".join(
        f"{check.get('name')}: {check.get('state')}"
        + (f" ({check['message']})" if check.get("message") else "")
        for check in checks
    )
