"""The Kueue admission watcher: why a suspended job waits, and a job Kueue cannot start.

Kueue v0.19.2 writes why a Workload waits in its ``QuotaReserved`` condition and
``Admitted=True`` once it may start (``pkg/workload/workload.go``).
"""

from __future__ import annotations

import pytest
from job_polls import Polls, running, suspended

from components.runtime.job_poll import GiveUp
from components.runtime.watchers import kueue
from components.runtime.watchers.kueue import JobStuck, KueueAdmission

NO_QUOTA = "couldn't assign flavors to pod set master: insufficient quota for cpu"


def workload(*conditions: dict) -> dict:
    return {"status": {"conditions": list(conditions)}}


@pytest.fixture
def polls(fake_k8s) -> Polls:
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["workloads"]
    return Polls()


def test_a_suspended_job_says_kueues_reason_once_per_reason(polls, fake_k8s):
    waiting = {"type": "QuotaReserved", "status": "False", "message": NO_QUOTA}
    fake_k8s.custom.listings["workloads"] = [[workload(waiting)]] * 2 + [[]]
    watcher = KueueAdmission()
    for _ in range(3):
        watcher.see(polls.poll(suspended()))
    assert polls.said == [
        f"PyTorchJob team-a/fmnist-run-1 is suspended by Kueue, waiting for admission: {NO_QUOTA}",
        "PyTorchJob team-a/fmnist-run-1 is suspended by Kueue, waiting for admission: "
        "job suspended",  # no Workload to read: the job's own condition
    ]


def test_a_running_job_is_not_looked_at(polls, fake_k8s):
    KueueAdmission().see(polls.poll(running()))
    assert polls.said == [] and fake_k8s.custom.calls == []


def test_a_job_admitted_but_suspended_too_long_is_given_up(polls, fake_k8s, monkeypatch):
    monkeypatch.setattr(kueue, "STUCK_SECONDS", 0)
    admitted = {"type": "Admitted", "status": "True"}
    fake_k8s.custom.listings["workloads"] = [[workload(admitted)]]
    watcher = KueueAdmission()
    watcher.see(polls.poll(suspended()))  # admitted: the clock starts
    with pytest.raises(JobStuck, match="admitted by Kueue 0 s ago but is still suspended"):
        watcher.see(polls.poll(suspended()))
    assert issubclass(JobStuck, GiveUp)  # the wait deletes it, freeing the quota
