"""The train step on a cluster, for both job kinds alike, against a fake Kubernetes API.

Only the ``kubernetes`` client is faked (tests/fake_kube.py): the step's own code runs
unmodified. One table of behaviours runs over PyTorchJob (Training Operator v1.9.4) and
TrainJob (Trainer v2.3.0 and v2.1.0): success, failure with the log tail, timeout and
termination deleting the job, a retried step adopting it, transient API errors waited
out, and Kueue's suspension waited out with its reason. The conditions and labels the
fakes report are the controllers' own: kubeflow/training-operator v1.9.4
``pkg/apis/kubeflow.org/v1/common_types.go``; kubeflow/trainer v2.3.0
``pkg/apis/trainer/v1alpha1/trainjob_types.go``; Kueue's Workload ``QuotaReserved``
condition and ``kueue.x-k8s.io/job-uid`` label (kueue v0.19.2
``pkg/controller/constants/constants.go``).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fake_kube import FakeCluster, rank0_pod
from kfp import dsl
from kubernetes.client import V1Node, V1NodeCondition, V1NodeStatus, V1PodCondition, V1PodSpec
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from components.runtime import waiting
from components.runtime.job_poll import JobFailed
from components.runtime.kube import KubeClient
from components.runtime.local_train import local_flags, torchrun_command
from components.runtime.objects import NotOurs, Refused
from components.runtime.signals import Terminated
from components.runtime.watchers import kueue, lost_nodes
from components.runtime.watchers.kueue import JobStuck
from components.runtime.watchers.lost_nodes import NODE_LOST_SECONDS, NodeLost
from components.runtime.watchers.multikueue import MULTIKUEUE, WORKER_KUBECONFIGS
from components.specs.params import TrainingJob
from components.specs.pods import GPU_TOLERATION, WorkPaths
from components.steps.train import train
from trainer.metrics import format_metric_line

RUN_ID = "8c1e2f3a-aaaa-bbbb-cccc-0123456789ab"
JOB_NAME = "fmnist-8c1e2f3aaaaabbbbcccc"
METRIC_LINE = format_metric_line(0.9012, 0.2756)
# A permission that stays missing: more 403s in a row than the step waits out.
FORBIDDEN = [ApiException(status=403, reason="Forbidden")] * (waiting.AUTH_RETRIES + 1)


def condition(kind, reason="", message=""):
    return {"type": kind, "status": "True", "reason": reason, "message": message}


@dataclass(frozen=True)
class Kind:
    """One job kind as the fake cluster serves and reports it."""

    api: str
    plural: str
    container: str
    succeeded: str
    selector: str

    def status(self, *conditions) -> dict:
        return {"conditions": list(conditions)}


PYTORCHJOB = Kind(
    "pytorchjob",
    "pytorchjobs",
    "pytorch",
    "Succeeded",
    f"training.kubeflow.org/job-name={JOB_NAME},training.kubeflow.org/job-role=master",
)
TRAINJOB = Kind(
    "trainjob",
    "trainjobs",
    "node",
    "Complete",
    f"jobset.sigs.k8s.io/jobset-name={JOB_NAME},jobset.sigs.k8s.io/replicatedjob-name=node,"
    "batch.kubernetes.io/job-completion-index=0",
)
KINDS = [PYTORCHJOB, TRAINJOB]


@pytest.fixture(params=KINDS, ids=lambda kind: kind.api)
def kind(request, fake_k8s, crd_schemas) -> Kind:
    """Serve only this kind's API (TrainJob with Trainer v2.3.0's schema)."""
    if request.param is TRAINJOB:
        fake_k8s.served = {"trainer.kubeflow.org/v1alpha1": ["trainjobs"]}
        schema = crd_schemas[("trainer.kubeflow.org/v1alpha1", "TrainJob")]
        fake_k8s.serve_schema("trainer.kubeflow.org/v1alpha1", "TrainJob", schema)
    return request.param


@pytest.fixture
def workspace(tmp_path):
    """A workspace as KFP mounts it, with the model the job will have written."""
    root = tmp_path / "kfp-workspace"
    model = WorkPaths.under(root).model_dir
    model.mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weights")
    (model / "model.json").write_text("{}")
    return root


@pytest.fixture
def step(tmp_path, workspace, packed_small, monkeypatch, fake_k8s):
    """Call the train step as the KFP launcher would on a cluster; return its model dir."""
    monkeypatch.setattr(waiting, "POLL_SECONDS", 0.01)
    monkeypatch.setattr("components.runtime.launcher.current_namespace", lambda: "team-a")
    model = dsl.Model(uri=str(tmp_path / "outputs" / "model"))
    task_config = dsl.TaskConfig(
        tolerations=[GPU_TOLERATION],
        volumes=[{"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-7-ws"}}],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
        env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    )

    def call(**changes):
        job = TrainingJob(**{"workers": 3, **changes})
        train.python_func(
            dataset=dsl.Dataset(uri=str(packed_small)),
            model=model,
            job=job.to_dict(),
            target="cluster",
            workspace_path=str(workspace),
            run_id=RUN_ID,
            task_config=task_config,
        )
        return Path(model.path)

    return call


def test_success_creates_the_job_streams_rank_0_and_copies_the_model(
    kind, step, fake_k8s, workspace, capsys
):
    running = kind.status(condition("Created"), condition("Running"))
    fake_k8s.custom.statuses[kind.plural] = [running] * 3 + [kind.status(condition(kind.succeeded))]
    fake_k8s.core.pods = [[], [rank0_pod("rank0", kind.container)]]
    fake_k8s.core.logs["rank0"] = ["epoch 1\n", f"epoch 1\n{METRIC_LINE}\n"]
    model_dir = step(gpus_per_worker=1)

    (job,) = fake_k8s.custom.created(kind.plural)
    assert job["metadata"]["name"] == JOB_NAME and job["metadata"]["namespace"] == "team-a"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "fmnist-gpu"
    assert job["metadata"]["annotations"]["fmnist-pipeline/spec-hash"]
    assert fake_k8s.core.selectors[0] == kind.selector
    out = capsys.readouterr().out
    assert out.count(METRIC_LINE) == 1 and out.count("epoch 1") == 1
    assert f"created {job['kind']} team-a/{JOB_NAME} (queue fmnist-gpu" in out
    assert (workspace / "train" / "data" / "manifest.json").is_file()
    assert (model_dir / "model.pt").read_bytes() == b"weights"
    # A PyTorchJob is left to its TTL; a TrainJob has none and is deleted after the copy.
    assert (("delete", kind.plural) in fake_k8s.custom.verbs()) == (kind is TRAINJOB)


def test_a_failed_job_fails_the_step_with_its_conditions_and_log_tail(kind, step, fake_k8s):
    failed = condition("Failed", "JobFailed", "1 replica(s) failed")
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running")), kind.status(failed)]
    fake_k8s.core.pods = [[rank0_pod("rank0", kind.container)]]
    fake_k8s.core.logs["rank0"] = ["training on 3 process(es)\nRuntimeError: NCCL timeout\n"]
    with pytest.raises(JobFailed) as error:
        step()
    message = str(error.value)
    assert f"team-a/{JOB_NAME} failed" in message
    assert "Failed=True (JobFailed: 1 replica(s) failed)" in message
    assert "RuntimeError: NCCL timeout" in message
    assert ("delete", kind.plural) not in fake_k8s.custom.verbs()  # kept for inspection


@pytest.fixture(scope="module")
def torchrun_failure(tmp_path_factory) -> str:
    """The output of a real torchrun whose two workers fail as a job's rank 0 pod logs it:
    the trainer's error line, then torchrun stopping the other worker and its report."""
    root = tmp_path_factory.mktemp("torchrun")
    (root / "empty").mkdir()
    paths = WorkPaths(root / "empty", root / "model", root / "checkpoints")
    job = TrainingJob(workers=1, nproc_per_node=2, epochs=1)
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache"), "TMPDIR": str(root)}
    env.pop("FASHION_MNIST_DIR", None)  # nothing to find: the trainer fails at once
    done = subprocess.run(
        torchrun_command(local_flags(job, paths), job.processes),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0 and "ChildFailedError" in done.stdout, done.stdout
    return done.stdout


def test_a_failed_torchrun_shows_the_trainers_reason_not_torchruns_report(
    kind, step, fake_k8s, torchrun_failure, capsys
):
    failed = condition("Failed", "JobFailed", "1 replica(s) failed")
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running")), kind.status(failed)]
    fake_k8s.core.pods = [[rank0_pod("rank0", kind.container)]]
    fake_k8s.core.logs["rank0"] = [torchrun_failure]
    with pytest.raises(JobFailed) as error:
        step()
    first, *rest = str(error.value).splitlines()
    reason = rest[-1]  # the tail ends with the trainer's line
    assert reason.startswith("trainer: error: ") and "FashionMNIST raw files missing" in reason
    assert first.endswith(f"team-a/{JOB_NAME} failed: {reason}")
    assert "Failed=True (JobFailed: 1 replica(s) failed)" in rest
    report = ("ChildFailedError", "Traceback", "elastic/", "Root Cause", "exitcode")
    assert not [line for line in rest if any(word in line for word in report)]
    assert "ChildFailedError" in capsys.readouterr().out  # the step's log has all of it


def test_a_restarted_trainer_gives_the_reason_of_its_last_run(
    kind, step, fake_k8s, torchrun_failure
):
    """Its first run ended in torchrun's report; the restarted container's lines count again."""
    failed = condition("Failed", "JobFailed", "1 replica(s) failed")
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running")), kind.status(failed)]
    fake_k8s.core.pods = [
        [rank0_pod("rank0", kind.container)],
        [rank0_pod("rank0", kind.container, restarts=1)],
    ]
    fake_k8s.core.logs["rank0"] = [torchrun_failure, "epoch 1\nRuntimeError: NCCL timeout\n"]
    with pytest.raises(JobFailed) as error:
        step()
    first, *rest = str(error.value).splitlines()
    assert first.endswith(" failed: RuntimeError: NCCL timeout")
    assert rest[-2:] == ["epoch 1", "RuntimeError: NCCL timeout"]
    assert rest[-3].startswith("trainer: error: ")  # the first run's, before its report


def test_the_steps_timeout_deletes_the_job(kind, step, fake_k8s):
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running", "Running"))]
    with pytest.raises(TimeoutError, match="did not finish within 1 s") as error:
        step(timeout_seconds=1)
    assert "Running=True (Running)" in str(error.value)
    assert fake_k8s.custom.verbs()[-1] == ("delete", kind.plural)
    assert fake_k8s.custom.objects == {}


def test_a_timeout_names_the_pods_that_never_started(kind, step, fake_k8s):
    """A Worker the scheduler cannot place leaves rank 0 waiting at the rendezvous with an
    empty log: the timeout says which pod never started and the scheduler's words (seen on
    the real node: Master running, Worker Pending on "Insufficient cpu")."""
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running", "Running"))]
    unplaced = rank0_pod("worker-0", kind.container, phase="Pending")
    unplaced.status.container_statuses = None
    unplaced.status.conditions = [
        V1PodCondition(
            type="PodScheduled",
            status="False",
            reason="Unschedulable",
            message="0/5 nodes are available: 1 Insufficient cpu.",
        )
    ]
    fake_k8s.core.pods = [[rank0_pod("rank0", kind.container)], [unplaced]]
    with pytest.raises(TimeoutError) as error:
        step(timeout_seconds=1)
    assert (
        "Pods not started:\nworker-0: not scheduled (Unschedulable): "
        "0/5 nodes are available: 1 Insufficient cpu.\n"
    ) in str(error.value)
    assert fake_k8s.core.selectors[-1] == kind.selector.split(",")[0]  # every pod of the job


def test_sigterm_deletes_the_job(kind, step, fake_k8s):
    """KFP's Terminate, an eviction or a drain send SIGTERM: cleaned up like Ctrl-C."""
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running"))]
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    with pytest.raises(Terminated):
        step()
    timer.join()
    assert fake_k8s.custom.verbs()[-1] == ("delete", kind.plural)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_a_retried_step_adopts_its_job(kind, step, fake_k8s, capsys):
    """The first attempt dies while following its job (403s that last); the retry adopts it."""
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition(kind.succeeded))]
    fake_k8s.fail("get", kind.plural, None, *FORBIDDEN)
    with pytest.raises(ApiException):
        step()
    assert ("delete", kind.plural) not in fake_k8s.custom.verbs()  # not given up on
    step()  # the retry of the same run: same name, same spec
    assert len(fake_k8s.custom.created(kind.plural)) == 1
    assert f"adopted {'PyTorchJob' if kind is PYTORCHJOB else 'TrainJob'} team-a/{JOB_NAME}" in (
        capsys.readouterr().out
    )


def test_a_job_of_that_name_with_another_spec_is_not_adopted(kind, step, fake_k8s):
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition(kind.succeeded))]
    fake_k8s.fail("get", kind.plural, None, *FORBIDDEN)
    with pytest.raises(ApiException):
        step()
    with pytest.raises(NotOurs, match=f"exists with another spec.*kubectl delete {kind.plural}"):
        step(epochs=3)


def test_a_refused_job_is_one_line_with_the_refusal(kind, step, fake_k8s):
    """An admission webhook's denial (seen from Katib's Experiment webhook on a real KFP run:
    "the namespace lacks label ..."): the step's error is the apiserver's message, not the
    client's dump of headers and body."""
    body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "code": 400,
            "message": 'admission webhook "validator.example" denied the request: no queue',
        }
    )
    fake_k8s.fail("create", kind.plural, ApiException(http_resp=_Response(400, body)))
    with pytest.raises(Refused) as error:
        step()
    kind_name = {"pytorchjobs": "PyTorchJob", "trainjobs": "TrainJob"}[kind.plural]
    assert str(error.value) == (
        f"{kind_name} team-a/{JOB_NAME} was refused: "
        'admission webhook "validator.example" denied the request: no queue'
    )


@dataclass
class _Response:
    """What ``ApiException(http_resp=...)`` reads of an HTTP answer."""

    status: int
    data: str
    reason: str = "Bad Request"

    def getheaders(self):
        return {}


@pytest.mark.parametrize(
    "error",
    [
        ApiException(status=503, reason="Service Unavailable"),
        ApiException(status=429, reason="Too Many Requests"),
        ProtocolError("Connection aborted."),
    ],
    ids=["503", "429", "dropped-connection"],
)
def test_transient_api_errors_are_waited_out(kind, step, fake_k8s, capsys, error):
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition(kind.succeeded))]
    fake_k8s.fail("get", kind.plural, None, error, error)  # the get before create goes through
    step()
    assert "transient API error" in capsys.readouterr().out
    deletes = [verb for verb in fake_k8s.custom.verbs() if verb == ("delete", kind.plural)]
    assert len(deletes) == (kind is TRAINJOB)  # only a finished TrainJob's clean-up


def test_a_pod_deleted_between_list_and_log_read_is_skipped(kind, step, fake_k8s, capsys):
    """Kueue preemption deletes pods: a 404 on the log read is no reason to stop."""
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running"))] * 2 + [
        kind.status(condition(kind.succeeded))
    ]
    fake_k8s.core.pods = [
        [rank0_pod("gone", kind.container)],
        [rank0_pod("new", kind.container, uid="u2")],
    ]
    fake_k8s.fail("get", "pods/log", ApiException(status=404, reason="NotFound"))
    fake_k8s.core.logs["new"] = ["resumed from epoch 1 (its checkpoint); epoch 2 is next\n"]
    step()
    assert "resumed from epoch 1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("served", "read_at"),
    [(("v1beta1", "v1beta2"), "v1beta2"), (("v1beta1",), "v1beta1")],
)
def test_a_suspended_job_is_waited_for_with_kueues_reason(
    kind, step, fake_k8s, capsys, served, read_at
):
    """The Workload is read at the newest Kueue version served: v0.19.2 deprecates v1beta1."""
    for version in served:
        fake_k8s.served[f"kueue.x-k8s.io/{version}"] = ["localqueues", "workloads"]
    suspended = kind.status(condition("Suspended", "Suspended", "job suspended"))
    fake_k8s.custom.statuses[kind.plural] = [suspended] * 3 + [
        kind.status(condition(kind.succeeded))
    ]
    reason = "couldn't assign flavors to pod set node: insufficient quota for nvidia.com/gpu"
    workload = {
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "message": reason}]}
    }
    fake_k8s.custom.listings["workloads"] = [[workload]]
    step(gpus_per_worker=1)
    out = capsys.readouterr().out
    assert out.count(f"is suspended by Kueue, waiting for admission: {reason}") == 1
    (listed,) = {call[2:] for call in fake_k8s.custom.calls if call[0] == "list"}
    assert listed[0] == read_at and listed[2] == "workloads"
    assert listed[3].startswith("kueue.x-k8s.io/job-uid=uid-")


def test_a_preempted_job_waits_for_quota_naming_its_preemptor(kind, step, fake_k8s, capsys):
    """Kueue v0.19.2 evicts a preempted Workload with Evicted=True, reason Preempted, naming the
    preemptor by UID and job UID (pkg/scheduler/preemption/preemption.go preemptionMessage);
    on re-admission Evicted turns False (pkg/workload/workload.go SetQuotaReservation)."""
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["localqueues", "workloads"]
    message = (
        "Preempted to accommodate a workload (UID: wl-9, JobUID: job-9) due to prioritization "
        "in the ClusterQueue; preemptor path: /fmnist/fmnist-cpu; preemptee path: /fmnist/x"
    )
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message}
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}
    ours = {"metadata": {"uid": "wl-1"}, "status": {"conditions": [evicted, pending]}}
    preemptor = {"metadata": {"uid": "wl-9", "name": "job-nightly-4f2a1"}}
    fake_k8s.custom.listings["workloads"] = [[ours, preemptor]]
    suspended = kind.status(condition("Suspended", "Suspended", "job suspended"))
    fake_k8s.custom.statuses[kind.plural] = (
        [kind.status(condition("Running"))]
        + [suspended] * 4
        + [kind.status(condition(kind.succeeded))]
    )
    step()
    out = capsys.readouterr().out
    said = "preempted by workload team-a/job-nightly-4f2a1; waiting for quota"
    assert out.count(said) == 1, out
    assert ("delete", kind.plural) not in fake_k8s.custom.verbs()[:-1]  # waited, not given up


def test_a_preemptor_of_another_namespace_is_named_by_its_uid(kind, step, fake_k8s, capsys):
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["localqueues", "workloads"]
    message = "Preempted to accommodate a workload (UID: wl-7, JobUID: job-7) due to x"
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message}
    fake_k8s.custom.listings["workloads"] = [[{"status": {"conditions": [evicted]}}]]
    suspended = kind.status(condition("Suspended", "Suspended", "job suspended"))
    fake_k8s.custom.statuses[kind.plural] = [suspended] * 2 + [
        kind.status(condition(kind.succeeded))
    ]
    step()
    said = "preempted by a workload of another namespace (UID wl-7); waiting for quota"
    assert said in capsys.readouterr().out


def job_pod(name: str, node: str, ready: bool):
    """A pod of the job on ``node``, Ready or not (the node controller marks it not Ready)."""
    pod = rank0_pod(name)
    pod.spec = V1PodSpec(containers=[], node_name=node)
    pod.status.conditions = [V1PodCondition(type="Ready", status=str(ready))]
    return pod


def node_since(status: str, seconds_ago: float) -> V1Node:
    since = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)
    ready = V1NodeCondition(
        type="Ready",
        status=status,
        reason="NodeStatusUnknown",
        message="Kubelet stopped posting node status.",
        last_transition_time=since,
    )
    return V1Node(status=V1NodeStatus(conditions=[ready]))


def test_a_pod_on_a_lost_node_fails_the_step_naming_the_node_and_deletes_the_job(
    kind, step, fake_k8s, monkeypatch
):
    """The node lifecycle controller marks a node whose kubelet stopped Ready=Unknown, with
    "Kubelet stopped posting node status." (k8s.io/kubernetes v1.36.3 pkg/controller/
    nodelifecycle/node_lifecycle_controller.go tryUpdateNodeHealth), and its pods not Ready."""
    monkeypatch.setattr(lost_nodes, "QUIET_SECONDS", 0)
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running"))]
    fake_k8s.core.pods = [[job_pod("rank0", "node-a", True), job_pod("worker", "node-b", False)]]
    fake_k8s.core.nodes = {
        "node-a": node_since("True", 3600),
        "node-b": node_since("Unknown", NODE_LOST_SECONDS + 5),
    }
    with pytest.raises(NodeLost) as lost:
        step()
    assert str(lost.value).count("\n") == 0, "one line"
    assert "pod worker is on node node-b, which has not been Ready for 12" in str(lost.value)
    assert "Ready=Unknown: Kubelet stopped posting node status." in str(lost.value)
    assert "kubectl taint node node-b node.kubernetes.io/out-of-service" in str(lost.value)
    assert ("delete", kind.plural) in fake_k8s.custom.verbs()


def test_a_node_back_within_the_grace_or_unreadable_is_waited_out(
    kind, step, fake_k8s, monkeypatch
):
    """Two minutes out of Ready is no loss yet, and a 403 on nodes leaves the timeout to it."""
    monkeypatch.setattr(lost_nodes, "QUIET_SECONDS", 0)
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running"))] * 4 + [
        kind.status(condition(kind.succeeded))
    ]
    fake_k8s.core.pods = [[job_pod("rank0", "node-a", False), job_pod("worker", "node-c", False)]]
    fake_k8s.core.nodes = {"node-a": node_since("Unknown", NODE_LOST_SECONDS - 30)}
    fake_k8s.fail("get", "nodes", None, ApiException(status=403, reason="Forbidden"))
    step()  # node-a: not yet lost; node-c: 403 once, then 404: nothing to say


def test_a_vanished_job_fails_the_step(kind, step, fake_k8s):
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running"))]
    original = fake_k8s.custom.get_namespaced_custom_object
    gets = []

    def vanish(*args):
        gets.append(args)
        if len(gets) > 2:
            fake_k8s.custom.objects.clear()
        return original(*args)

    fake_k8s.custom.get_namespaced_custom_object = vanish
    with pytest.raises(JobFailed, match="disappeared"):
        step()


def test_a_job_kueue_admitted_but_never_starts_fails_and_is_deleted(
    kind, step, fake_k8s, monkeypatch
):
    """Kueue v0.19.2 writes spec.runtimePatches into a TrainJob to start it
    (pkg/controller/jobs/trainjob/trainjob_controller.go); Trainer v2.1.0's CRD has no such
    field, so an admitted v2.1 TrainJob stays suspended for good."""
    monkeypatch.setattr(kueue, "STUCK_SECONDS", 0.05)
    suspended = kind.status(condition("Suspended", "Suspended", "job suspended"))
    fake_k8s.custom.statuses[kind.plural] = [suspended]
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    fake_k8s.custom.listings["workloads"] = [[admitted]]
    with pytest.raises(JobStuck, match="admitted by Kueue .* but is still suspended"):
        step()
    assert fake_k8s.custom.verbs()[-1] == ("delete", kind.plural)  # it held quota


def test_a_short_burst_of_403s_is_waited_out(kind, step, fake_k8s, capsys):
    """A restarting kube-apiserver answers 403 until its RBAC caches are filled."""
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition(kind.succeeded))]
    burst = [ApiException(status=403, reason="Forbidden")] * waiting.AUTH_RETRIES
    fake_k8s.fail("get", kind.plural, None, *burst)
    step()
    assert capsys.readouterr().out.count("transient API error (403 Forbidden)") == len(burst)


# --- MultiKueue: the job runs on a worker cluster --------------------------------------


@pytest.fixture
def on_a_worker(kind, fake_k8s):
    """The manager of MultiKueue, faked: Kueue's webhook marks each job managedBy MultiKueue
    (kueue v0.19.2 pkg/controller/jobframework/defaults.go ApplyDefaultForManagedBy) and the
    job's Workload names the worker that admitted it (status.clusterName)."""
    create = fake_k8s.custom.create_namespaced_custom_object

    def kueue_webhook(group, version, namespace, plural, body):
        body = copy.deepcopy(body)
        spec = body["spec"].setdefault("runPolicy", {}) if plural == "pytorchjobs" else body["spec"]
        spec["managedBy"] = MULTIKUEUE
        return create(group, version, namespace, plural, body)

    fake_k8s.custom.create_namespaced_custom_object = kueue_webhook
    fake_k8s.served["kueue.x-k8s.io/v1beta2"] = ["localqueues", "workloads"]
    admitted = {"type": "Admitted", "status": "True"}
    fake_k8s.custom.listings["workloads"] = [
        [{"status": {"clusterName": "worker-1", "conditions": [admitted]}}]
    ]


def client_of(cluster: FakeCluster) -> KubeClient:
    """A KubeClient over another fake cluster (KubeClient() itself goes to ``fake_k8s``)."""
    kube = KubeClient.__new__(KubeClient)
    kube.api_client, kube.custom_api = cluster.api_client, cluster.custom
    kube.core_api, kube.apps_api, kube.host = cluster.core, cluster.apps, "https://worker-1"
    return kube


def test_without_a_kubeconfig_for_the_worker_the_step_says_where_the_log_is(
    kind, step, fake_k8s, on_a_worker, monkeypatch, capsys
):
    monkeypatch.delenv(WORKER_KUBECONFIGS, raising=False)
    failed = condition("Failed", "JobFailed", "1 replica(s) failed")
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition("Running")), kind.status(failed)]
    with pytest.raises(JobFailed) as error:
        step()
    message = str(error.value)
    assert f"team-a/{JOB_NAME} failed on cluster worker-1." in message
    assert f"kubectl --context worker-1 -n team-a logs -l {kind.selector}" in message
    out = capsys.readouterr().out
    assert out.count("was admitted on cluster worker-1 by MultiKueue") == 1
    assert fake_k8s.core.selectors == []  # no pod of the job on the manager is looked for


def test_with_a_kubeconfig_for_the_worker_the_step_follows_the_log_there(
    kind, step, fake_k8s, on_a_worker, tmp_path, monkeypatch, capsys
):
    (tmp_path / "kubeconfigs").mkdir()
    (tmp_path / "kubeconfigs" / "worker-1").write_text("a kubeconfig")
    monkeypatch.setenv(WORKER_KUBECONFIGS, str(tmp_path / "kubeconfigs"))
    worker = FakeCluster()
    worker.core.pods = [[rank0_pod("rank0", kind.container)]]
    worker.core.logs["rank0"] = [f"epoch 1\n{METRIC_LINE}\n"]
    opened = []
    monkeypatch.setattr(
        "components.runtime.watchers.multikueue.worker_client",
        lambda path: opened.append(path) or client_of(worker),
    )
    running = kind.status(condition("Running"))
    fake_k8s.custom.statuses[kind.plural] = [running] * 2 + [kind.status(condition(kind.succeeded))]
    step()
    assert opened == [tmp_path / "kubeconfigs" / "worker-1"]
    assert worker.core.selectors[0] == kind.selector
    assert fake_k8s.core.selectors == []
    assert capsys.readouterr().out.count(METRIC_LINE) == 1


def test_an_unusable_worker_kubeconfig_is_said_and_the_job_still_followed(
    kind, step, fake_k8s, on_a_worker, tmp_path, monkeypatch, capsys
):
    (tmp_path / "kubeconfigs").mkdir()
    (tmp_path / "kubeconfigs" / "worker-1").write_text("clusters: [unclosed")
    monkeypatch.setenv(WORKER_KUBECONFIGS, str(tmp_path / "kubeconfigs"))
    fake_k8s.custom.statuses[kind.plural] = [kind.status(condition(kind.succeeded))]
    step()
    out = capsys.readouterr().out
    assert (
        f"cannot use {tmp_path}/kubeconfigs/worker-1 for cluster worker-1: not a valid kubeconfig"
        in out
    )
    assert "kubectl --context worker-1" in out


def test_until_a_worker_admits_the_job_the_step_says_what_multikueue_waits_for(
    kind, step, fake_k8s, on_a_worker, capsys
):
    pending = {
        "status": {
            "admissionChecks": [
                {"name": "fmnist-multikueue", "state": "Pending", "message": "no worker admits"}
            ]
        }
    }
    placed = fake_k8s.custom.listings["workloads"][0]
    fake_k8s.custom.listings["workloads"] = [[pending], [pending], placed]
    fake_k8s.custom.statuses[kind.plural] = [{}] * 3 + [kind.status(condition(kind.succeeded))]
    step()
    out = capsys.readouterr().out
    waits = (
        "waits for a MultiKueue worker to admit it: fmnist-multikueue: Pending (no worker admits)"
    )
    assert out.count(waits) == 1
    assert out.index(waits) < out.index("was admitted on cluster worker-1 by MultiKueue")


def test_a_job_without_quota_on_the_manager_says_so_before_multikueue_places_it(
    kind, step, fake_k8s, on_a_worker, capsys
):
    """Kueue reserves the manager's quota before it asks the workers."""
    reason = "couldn't assign flavors to pod set master: insufficient quota for nvidia.com/gpu"
    no_quota = {
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "message": reason}]}
    }
    placed = fake_k8s.custom.listings["workloads"][0]
    fake_k8s.custom.listings["workloads"] = [[no_quota], placed]
    fake_k8s.custom.statuses[kind.plural] = [{}] * 2 + [kind.status(condition(kind.succeeded))]
    step()
    assert (
        capsys.readouterr().out.count(f"waits for a MultiKueue worker to admit it: {reason}") == 1
    )
