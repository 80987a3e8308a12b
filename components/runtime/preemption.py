"""Who took a job's quota: Kueue's preemption of its Workload, in words.

Kueue v0.19.2 evicts a preempted Workload with ``Evicted=True``, reason ``Preempted``, and a
message that names the preemptor only by its Workload's UID and its job's UID
(``pkg/scheduler/preemption/preemption.go`` preemptionMessage). The job's UID is the
preemptor Workload's ``kueue.x-k8s.io/job-uid`` label, so a preemptor in the step's own
namespace is found by it; one in another namespace stays a UID (listing Workloads across
namespaces would need more than the step's Role). On re-admission the condition turns
False (``pkg/workload/workload.go`` SetQuotaReservation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.runtime.discovery import kueue_resource
from components.runtime.kube import KubeClient
from components.specs.kinds import WORKLOAD

PREEMPTED_BY = re.compile(r"Preempted to accommodate a workload \(UID: ([^,]+), JobUID: ([^)]*)\)")
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # kueue v0.19.2 pkg/controller/constants


@dataclass(frozen=True)
class Preemption:
    """The preemptor of an evicted Workload, as Kueue names it."""

    workload_uid: str
    job_uid: str


def preemption(workload: dict) -> Preemption | None:
    """The preemptor while ``workload`` stands evicted by preemption; None otherwise."""
    for condition in workload.get("status", {}).get("conditions", []):
        if (condition.get("type"), condition.get("status")) != ("Evicted", "True"):
            continue
        found = PREEMPTED_BY.search(condition.get("message", ""))
        if condition.get("reason") == "Preempted" and found:
            return Preemption(found.group(1), found.group(2))
    return None


def preemptor_name(kube: KubeClient, namespace: str, preempted: Preemption) -> str:
    """``workload ns/name`` for a preemptor in ``namespace``; else its UID, said as such."""
    if preempted.job_uid:
        try:
            found = kube.list(
                kueue_resource(kube, WORKLOAD), namespace, f"{JOB_UID_LABEL}={preempted.job_uid}"
            )
        except Exception:  # noqa: BLE001 - a name is a courtesy; the UID still says who
            found = []
        for workload in found:
            metadata = workload.get("metadata", {})
            if metadata.get("uid") == preempted.workload_uid:
                return f"workload {namespace}/{metadata['name']}"
    return f"a workload of another namespace (UID {preempted.workload_uid})"
