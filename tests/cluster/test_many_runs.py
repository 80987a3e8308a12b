"""Five train steps in a row on the real nodes leave only what the docs say they keep.

A finished PyTorchJob stays for its TTL (an hour: ``TTL_SECONDS``, docs/pipeline.md) with
its Completed pods, for inspection; nothing of it may still run. Each node's containerd
may hold no running container of the namespace's pods and the machine no process of
theirs; the workspace PVCs the test made are the only claims.

training-operator v1.9.4 pkg/controller.v1/common/job.go: ``cleanPodPolicy: Running``
deletes the pods still running when the job ends (a Worker still exiting when its Master is
done); a Succeeded pod stays until the TTL.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from fault_helpers import Training, fault_job, job_pods
from real_pods import harness_node, real_namespace  # noqa: F401  (this module's ``namespace``)

from trainer.data import pack

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.usefixtures("quick_polls")]
RUNS = 5


def running_containers(namespace: str) -> list[str]:
    """The containers of the namespace's pods that run on any real node."""
    found = []
    for node in harness_node().NODES:
        ctr = [*node.ctr(), "-n", "k8s.io"]
        listed = subprocess.run([*ctr, "containers", "list", "-q"], capture_output=True, text=True)
        for container in listed.stdout.split():
            info = subprocess.run(
                [*ctr, "containers", "info", container], capture_output=True, text=True
            )
            labels = json.loads(info.stdout or "{}").get("Labels", {})
            if labels.get("io.kubernetes.pod.namespace") != namespace:
                continue
            task = subprocess.run([*ctr, "tasks", "ls"], capture_output=True, text=True).stdout
            if any(line.startswith(container) and "RUNNING" in line for line in task.splitlines()):
                found.append(f"{node.name}: {labels.get('io.kubernetes.pod.name')}")
    return found


def test_five_train_steps_in_a_row_leave_only_their_finished_jobs(
    as_pipeline, namespace, core, custom, tmp_path, record_property
):
    packed = tmp_path / "packed"
    pack(str(packed), train_limit=2000, test_limit=500)
    seconds = []
    job = fault_job(epochs=1)
    for index in range(RUNS):
        run = Training(core, namespace, packed, tmp_path / f"model-{index}", job, f"ws-{index}")
        seconds.append(round(run.start().wait(), 1))
    jobs = custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")[
        "items"
    ]
    assert len(jobs) == RUNS
    assert all(j["status"]["conditions"][-1]["type"] == "Succeeded" for j in jobs)
    pods = job_pods(core, namespace)
    assert {p.status.phase for p in pods} == {"Succeeded"}, [p.status.phase for p in pods]
    assert len(job_pods(core, namespace, "master")) == RUNS  # a Worker still exiting when
    # its Master ends is deleted (cleanPodPolicy Running); every Master stays
    assert running_containers(namespace) == []
    claims = core.list_namespaced_persistent_volume_claim(namespace).items
    assert len(claims) == RUNS  # one workspace a run, made by the test
    record_property("step_seconds", seconds)
