"""Train on the cluster: stage the data, create (or adopt) the job, follow it to its end.

The step's pod and the job's pods see the same storage: KFP mounts the run's workspace
PVC into the step and hands the step that volume through ``task_config_passthroughs``;
the job gets exactly those volumes and mounts, so ``--data-dir``, ``--model-dir`` and
``--checkpoint-dir`` point at the same files in both.

What the step guarantees, for both job kinds alike:
- the job is named after the run; a retried step adopts it instead of failing on 409;
- the rank-0 pod's log streams into the step's log;
- a Failed job fails the step with its conditions and the log's tail (the job stays for
  inspection; a PyTorchJob until its TTL); while Kueue keeps the job suspended the step
  waits, and says why (``preempted by <workload>; waiting for quota`` when a job of higher
  priority took its quota: preemption.py); a job Kueue admitted but never starts fails the
  step;
- a pod of the job on a node that stopped answering fails the step, naming the node, two
  minutes after the node left Ready (lost_nodes.py), and deletes the job;
- a succeeded PyTorchJob is left to its TTL; a succeeded TrainJob, which has none, is
  deleted once the model is copied;
- a job Kueue's MultiKueue sends to a worker cluster is followed by the status Kueue copies
  back; the step says which cluster runs it, and follows the log there when it has a
  kubeconfig for it (``components/runtime/multicluster.py``);
- transient API errors are waited out; only the step's own timeout or a termination
  (SIGTERM, Ctrl-C) deletes the job.

The Training Operator SDK's ``TrainingClient`` is not used for the calls: it turns every
``ApiException`` into a ``RuntimeError`` (kubeflow-training 1.9.4
``kubeflow/training/api/training_client.py``), losing the status that tells a 409 to
adopt, a 404 and a transient 5xx apart, and it knows no TrainJob. The SDK's typed models
build the PyTorchJob (``components/specs/pytorchjob.py``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.config import ConfigException

from components.runtime import lost_nodes, pod_status
from components.runtime.discovery import choose_job_api, kueue_resource, trainjob_generation
from components.runtime.kube import KubeClient, current_namespace
from components.runtime.logs import LogFollower
from components.runtime.lost_nodes import NodeLost
from components.runtime.multicluster import (
    MULTIKUEUE,
    admission_checks,
    dispatched_to,
    where_the_log_is,
    worker_client,
    worker_kubeconfig,
)
from components.runtime.objects import create_or_adopt, run_object_name
from components.runtime.preemption import preemption, preemptor_name
from components.runtime.signals import terminate_on_sigterm
from components.runtime.volumes import stage_dataset
from components.runtime.waiting import condition_summary, follow, true_conditions
from components.specs.compat import DEFAULT_TRAINER_GENERATION
from components.specs.kinds import JOB_KINDS, WORKLOAD, JobKind
from components.specs.params import TrainingJob
from components.specs.pods import Placement, TrainerFlags, WorkPaths
from components.specs.training_job import training_job

JOB_PREFIX = "fmnist"
STUCK_SECONDS = 180  # admitted by Kueue yet suspended this long: Kueue cannot start it
STALL_SECONDS = 30  # rank 0's log this long without a new line: look at the pods' nodes
WORKLOAD_JOB_LABEL = "kueue.x-k8s.io/job-uid"  # kueue v0.19.2 pkg/controller/constants


class JobFailed(RuntimeError):
    """The training job failed, or vanished."""


class JobStuck(JobFailed):
    """Kueue admitted the job, but it never started."""


@dataclass(frozen=True)
class Target:
    """Which API the job goes to and in what generation."""

    api: str  # pytorchjob or trainjob
    generation: str = DEFAULT_TRAINER_GENERATION  # the Trainer generation, for a TrainJob

    @property
    def kind(self) -> JobKind:
        """What the launcher knows of this kind."""
        return JOB_KINDS[self.api]


def find_target(kube: KubeClient, job_api: str) -> Target:
    """The job API to use (``auto`` asks the cluster) and, for TrainJob, its generation."""
    api = choose_job_api(kube, job_api)
    generation = trainjob_generation(kube) if api == "trainjob" else DEFAULT_TRAINER_GENERATION
    return Target(api, generation)


class JobWatch:
    """One poll of a training job: its state, its suspension, its rank-0 log."""

    def __init__(self, kube: KubeClient, kind: JobKind, namespace: str, name: str, echo=print):
        self.kube, self.kind, self.echo = kube, kind, echo
        self.namespace, self.name = namespace, name
        self.logs = LogFollower(kube, namespace, kind.rank0_selector(name), kind.container, echo)
        self.last: dict | None = None
        self.waiting_said, self.admitted_at = None, None
        self.preemptors: dict = {}  # Preemption -> the preemptor's name, looked up once
        self.progress = (None, time.monotonic())  # rank 0's log position, and since when
        self._last_workload: dict | None = None
        self.worker, self.log_elsewhere = "", ""  # the MultiKueue worker running the job

    @property
    def what(self) -> str:
        """``PyTorchJob ns/name``."""
        return f"{self.kind.resource.kind} {self.namespace}/{self.name}"

    def check(self) -> dict | None:
        """The job once it succeeded; None while it runs or waits; raises if it failed."""
        job = self.kube.get(self.kind.resource, self.namespace, self.name)
        if job is None:
            raise JobFailed(f"{self.what} disappeared (deleted by someone?)")
        self.last = job
        if not self.worker and self.kind.manager(job) == MULTIKUEUE:
            self._find_worker(job)
        true = true_conditions(job)
        if self.kind.suspended in true:
            self._wait_for_kueue(job)
            return None
        if not self.worker and self._log_stalled():
            self._check_nodes()  # first: a lost node's kubelet serves no log
        if not self.log_elsewhere:
            self.logs.poll()
        if self.kind.succeeded in true:
            return job
        if self.kind.failed in true:
            where = f" on cluster {self.worker}" if self.worker else ""
            raise JobFailed(f"{self.what} failed{where}.\n{self.describe()}")
        return None

    def _log_stalled(self) -> bool:
        """Whether rank 0's log has had no new line for STALL_SECONDS."""
        seen, now = (self.logs.current, self.logs.printed), time.monotonic()
        if seen != self.progress[0]:
            self.progress = (seen, now)
        return now - self.progress[1] > STALL_SECONDS

    def _check_nodes(self) -> None:
        """Give up on a job with a pod on a lost node (lost_nodes.py)."""
        pods = self.kube.list_pods(self.namespace, self.kind.pods_selector(self.name))
        try:
            lost_nodes.check(self.kube, pods)
        except NodeLost as lost:
            raise NodeLost(f"{self.what} cannot go on: {lost}") from None

    def describe(self) -> str:
        """The job's conditions, its pods that never started, the last lines of rank 0's log."""
        pending = "" if self.worker else self._pending_pods()
        return (
            f"Conditions:\n{condition_summary(self.last)}\n"
            + (f"Pods not started:\n{pending}\n" if pending else "")
            + f"Last lines of rank 0's log:\n{self.log_elsewhere or self.logs.tail_text()}"
        )

    def _pending_pods(self) -> str:
        """Why each Pending pod of the job waits (unschedulable, an image, a volume)."""
        try:
            pods = self.kube.list_pods(self.namespace, self.kind.pods_selector(self.name))
        except Exception as error:  # the message is for a failure already under way
            return f"(could not list the job's pods: {error})"
        return pod_status.summary(pods)

    def _find_worker(self, job: dict) -> None:
        """Once MultiKueue has placed the job: say where, and follow the log there."""
        workload = self._workload(job) or {}
        self.worker = dispatched_to(workload)
        if not self.worker:
            _, no_quota = admission_state(workload)
            waiting = no_quota or admission_checks(workload) or "no Workload yet"
            if waiting != self.waiting_said:
                self.waiting_said = waiting
                self.echo(f"{self.what} waits for a MultiKueue worker to admit it: {waiting}")
            return
        self.echo(f"{self.what} was admitted on cluster {self.worker} by MultiKueue")
        selector = self.kind.rank0_selector(self.name)
        kubeconfig = worker_kubeconfig(self.worker)
        try:
            worker = worker_client(kubeconfig) if kubeconfig else None
        except ConfigException as error:  # the job goes on; only its log is out of reach
            self.echo(f"cannot use {kubeconfig} for cluster {self.worker}: {error}")
            worker = None
        if worker is None:
            self.log_elsewhere = where_the_log_is(self.worker, self.namespace, selector)
            self.echo(self.log_elsewhere)
            return
        self.logs = LogFollower(worker, self.namespace, selector, self.kind.container, self.echo)

    def _wait_for_kueue(self, job: dict) -> None:
        """Say why the job waits; give up on one Kueue admitted but cannot start."""
        admitted, message = self._workload_state(job)
        if not admitted:
            self.admitted_at = None
        elif self.admitted_at is None:
            self.admitted_at = time.monotonic()
        elif time.monotonic() - self.admitted_at > STUCK_SECONDS:
            raise JobStuck(
                f"{self.what} was admitted by Kueue {STUCK_SECONDS} s ago but is still "
                "suspended: Kueue cannot start it. Kueue >= 0.19 cannot start a Kubeflow "
                "Trainer v2.1 TrainJob (it writes spec.runtimePatches, a v2.2 field; see "
                "docs/operations.md#compatibility); otherwise see the Workload's events."
            )
        reason = message or true_conditions(job)[self.kind.suspended].get("message", "")
        preempted = preemption(self._last_workload or {})
        if preempted:
            who = self.preemptors.get(preempted) or preemptor_name(
                self.kube, self.namespace, preempted
            )
            self.preemptors[preempted] = who
            reason = f"preempted by {who}; waiting for quota"
        if reason != self.waiting_said:
            self.waiting_said = reason
            self.echo(f"{self.what} is suspended by Kueue, waiting for admission: {reason}")

    def _workload(self, job: dict) -> dict | None:
        """The job's Kueue Workload; None when there is none, or it cannot be read."""
        uid = job["metadata"].get("uid")
        try:
            workloads = self.kube.list(
                kueue_resource(self.kube, WORKLOAD),
                self.namespace,
                f"{WORKLOAD_JOB_LABEL}={uid}",
            )
        except Exception:  # noqa: BLE001 - a hint only; the job's own condition suffices
            return None
        return workloads[0] if workloads else None

    def _workload_state(self, job: dict) -> tuple[bool, str]:
        """(admitted, why not) from the job's Kueue Workload; best effort."""
        self._last_workload = self._workload(job)
        return admission_state(self._last_workload or {})


def admission_state(workload: dict) -> tuple[bool, str]:
    """(admitted, why not) from a Kueue Workload: the QuotaReserved condition's message."""
    conditions = workload.get("status", {}).get("conditions", [])
    admitted = any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)
    waiting = [c.get("message", "") for c in conditions if c.get("type") == "QuotaReserved"]
    return admitted, "" if admitted else next((m for m in waiting if m), "")


def run_training_job(
    job: TrainingJob,
    dataset_dir: str,
    model_dir: str,
    workspace_path: str,
    run_id: str,
    placement: Placement,
    kube: KubeClient | None = None,
    echo: Callable[[str], None] = print,
) -> dict:
    """Stage, create or adopt the job, follow it to the end, copy the model to ``model_dir``."""
    kube = kube or KubeClient.connect()
    target = find_target(kube, job.job_api)
    namespace, name = current_namespace(), run_object_name(JOB_PREFIX, run_id)
    paths = WorkPaths.under(workspace_path)
    body = training_job(
        target.api,
        name=name,
        namespace=namespace,
        job=job,
        flags=TrainerFlags.for_job(job, paths),
        placement=placement,
        generation=target.generation,
    )
    watch = JobWatch(kube, target.kind, namespace, name, echo)
    with terminate_on_sigterm():
        _, adopted = create_or_adopt(
            kube, target.kind.resource, body, lambda: stage_dataset(dataset_dir, paths)
        )
        verb = "adopted" if adopted else "created"
        echo(
            f"{verb} {watch.what} (queue {job.queue}, "
            f"{job.workers} x {job.nproc_per_node} processes)"
        )
        try:
            final = follow(watch, job.timeout_seconds, echo=echo)
        except (TimeoutError, KeyboardInterrupt, JobStuck, NodeLost):  # free quota and GPUs
            echo(f"deleting {watch.what}")
            kube.delete(target.kind.resource, namespace, name)
            raise
    shutil.copytree(paths.model, model_dir, dirs_exist_ok=True)
    if target.api == "trainjob":  # a TrainJob has no TTL; its log is in this step's
        echo(f"deleting the finished {watch.what}")
        kube.delete(target.kind.resource, namespace, name)
    return final
