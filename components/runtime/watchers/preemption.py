"""Who took a job's quota: Kueue's preemption of its Workload, in words.

Kueue names the preemptor only by its Workload's UID and its job's UID
(components/specs/workload.py). The job's UID is the preemptor Workload's
``kueue.x-k8s.io/job-uid`` label, so a preemptor in the step's own namespace is found by
it; one in another namespace stays a UID (listing Workloads across namespaces would need
more than the step's Role).
"""

from __future__ import annotations

from components.runtime.discovery import kueue_resource
from components.runtime.job_poll import JobPoll
from components.runtime.kube import KubeClient
from components.specs.kinds import WORKLOAD
from components.specs.workload import JOB_UID_LABEL, Preemption, preemption


class Preemptions:
    """Each time the job stands preempted, says once who took its quota."""

    def __init__(self):
        self.names: dict[Preemption, str] = {}  # each preemptor's name, looked up once
        self.said: Preemption | None = None

    def see(self, poll: JobPoll) -> None:
        """Name the preemptor of a suspended job whose Workload was evicted by preemption."""
        if not poll.suspended:
            self.said = None
            return
        preempted = preemption(poll.workload())
        if preempted is None or preempted == self.said:
            return
        if preempted not in self.names:
            kube, namespace = poll.job.kube, poll.job.namespace
            self.names[preempted] = preemptor_name(kube, namespace, preempted)
        poll.say(f"{poll.what} was preempted by {self.names[preempted]}; waiting for quota")
        self.said = preempted


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
