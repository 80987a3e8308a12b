"""The preemption watcher: who took a suspended job's quota, said once each time.

Kueue v0.19.2 evicts a preempted Workload with ``Evicted=True``, reason ``Preempted``, naming
the preemptor by UID and job UID (``pkg/scheduler/preemption/preemption.go``
preemptionMessage); re-admission turns it False (``pkg/workload/workload.go``).
"""

from __future__ import annotations

import pytest
from job_polls import Polls, running, suspended

from components.runtime.watchers.preemption import Preemptions

MESSAGE = "Preempted to accommodate a workload (UID: wl-9, JobUID: job-9) due to prioritization"
EVICTED = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": MESSAGE}
OURS = {"metadata": {"uid": "wl-1"}, "status": {"conditions": [EVICTED]}}
PREEMPTOR = {"metadata": {"uid": "wl-9", "name": "nightly-4f2a1"}}


@pytest.fixture
def polls(fake_k8s) -> Polls:
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["workloads"]
    return Polls()


def test_the_preemptor_in_the_namespace_is_named_once(polls, fake_k8s):
    fake_k8s.custom.listings["workloads"] = [[OURS, PREEMPTOR]]
    watcher = Preemptions()
    for _ in range(3):
        watcher.see(polls.poll(suspended()))
    said = "PyTorchJob team-a/fmnist-run-1 was preempted by workload team-a/nightly-4f2a1"
    assert polls.said == [f"{said}; waiting for quota"]


def test_a_preemptor_elsewhere_is_named_by_its_uid(polls, fake_k8s):
    fake_k8s.custom.listings["workloads"] = [[OURS]]
    Preemptions().see(polls.poll(suspended()))
    assert "preempted by a workload of another namespace (UID wl-9)" in polls.said[0]


def test_a_second_preemption_after_running_again_is_said_again(polls, fake_k8s):
    fake_k8s.custom.listings["workloads"] = [[OURS, PREEMPTOR]]
    watcher = Preemptions()
    watcher.see(polls.poll(suspended()))
    watcher.see(polls.poll(running()))
    watcher.see(polls.poll(suspended()))
    assert len(polls.said) == 2
    lookups = [call for call in fake_k8s.custom.calls if "job-uid=job-9" in str(call)]
    assert len(lookups) == 1  # the preemptor's name is looked up once
