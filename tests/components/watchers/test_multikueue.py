"""The MultiKueue watcher: where a job MultiKueue dispatched runs, and its log there.

Kueue v0.19.2 marks such a job ``managedBy: kueue.x-k8s.io/multikueue``
(``pkg/controller/jobframework/defaults.go``) and names the worker that admitted it in the
Workload's ``status.clusterName`` (``pkg/controller/admissionchecks/multikueue/workload.go``).
"""

from __future__ import annotations

import pytest
from job_polls import Polls, running

from components.runtime.watchers import multikueue
from components.runtime.watchers.multikueue import MULTIKUEUE, WORKER_KUBECONFIGS, MultiKueue

MANAGED = {"runPolicy": {"managedBy": MULTIKUEUE}}
PENDING = {"admissionChecks": [{"name": "fmnist-mk", "state": "Pending", "message": "no room"}]}


@pytest.fixture
def polls(fake_k8s, monkeypatch) -> Polls:
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["workloads"]
    monkeypatch.delenv(WORKER_KUBECONFIGS, raising=False)
    return Polls()


def test_a_job_of_this_cluster_is_not_looked_at(polls, fake_k8s):
    MultiKueue().see(polls.poll(running()))
    assert polls.said == [] and fake_k8s.custom.calls == []


def test_it_says_what_multikueue_waits_for_then_where_the_log_is(polls, fake_k8s):
    placed = {"status": {"clusterName": "worker-1"}}
    fake_k8s.custom.listings["workloads"] = [[{"status": PENDING}], [{"status": PENDING}], [placed]]
    watcher = MultiKueue()
    for _ in range(4):
        watcher.see(polls.poll(running(), spec=MANAGED))
    waits, admitted, hint = polls.said
    assert waits.endswith("waits for a MultiKueue worker to admit it: fmnist-mk: Pending (no room)")
    assert admitted.endswith("was admitted on cluster worker-1 by MultiKueue")
    assert hint.startswith("rank 0's log is on cluster worker-1")
    assert (polls.place.cluster, polls.place.kube, polls.place.log_hint) == ("worker-1", None, hint)
    assert len(fake_k8s.custom.calls) == 3  # placed once: not asked again


def test_with_a_kubeconfig_it_moves_to_a_client_there(polls, fake_k8s, tmp_path, monkeypatch):
    (tmp_path / "worker-1").write_text("a kubeconfig")
    monkeypatch.setenv(WORKER_KUBECONFIGS, str(tmp_path))
    worker = object()
    monkeypatch.setattr(multikueue, "worker_client", lambda path: worker)
    fake_k8s.custom.listings["workloads"] = [[{"status": {"clusterName": "worker-1"}}]]
    MultiKueue().see(polls.poll(running(), spec=MANAGED))
    assert polls.place.kube is worker and polls.place.log_hint == ""
