"""What the fault tests share: the train step in a thread, rank 0's log, and the faults.

The step runs here as the pipeline's account (as in test_real_pods.py) with the train step's
own code and defaults but the size of a slice of the data; its PyTorchJob's two pods run on
the two real nodes. A fault is done the way it happens on a cluster: a container killed by
its node's containerd (an OOM kill, a crashing library), a pod deleted, a node drained with
kubectl, a node's kubelet and containers killed at once (harness/node_faults.py).
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
import pytest
from real_pods import bind_workspace, describe_pods, harness_module

from components.runtime.launcher import run_training_job
from components.specs.params import TrainingJob
from components.specs.pods import workspace_placement

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/replica-type"
METRIC = re.compile(r"\{metricName: accuracy, metricValue: [0-9.]+\};\{metricName: loss.*\}")


def fault_job(**changes) -> TrainingJob:
    """The default job (Master + Worker), 3 epochs, one CPU a rank."""
    settings = {"epochs": 3, "cpu": "1", "memory": "3Gi", "timeout_seconds": 1200}
    return TrainingJob(**{**settings, **changes})


@dataclass
class Training:
    """The train step running in a thread; ``wait`` returns its seconds or raises its error.

    What the step prints (its own lines and rank 0's log) collects in ``out``.
    """

    core: object
    namespace: str
    packed: Path
    model_dir: Path
    job: TrainingJob
    workspace_name: str = "workspace"  # the PVC the test binds for the run
    out: io.StringIO = field(default_factory=io.StringIO)
    error: BaseException | None = None
    started: float = 0.0

    def start(self) -> Training:
        workspace = bind_workspace(self.core, self.namespace, self.workspace_name)
        args = (self.job, str(self.packed), str(self.model_dir), str(workspace.path))
        args += (uuid.uuid4().hex[:8], workspace_placement(workspace.pvc, str(workspace.path)))
        self.workspace = workspace

        def step():
            try:
                with contextlib.redirect_stdout(self.out):
                    run_training_job(*args)
            except BaseException as error:  # noqa: BLE001 - handed to the test by wait()
                self.error = error

        self.started = time.monotonic()
        self.thread = threading.Thread(target=step, daemon=True)
        self.thread.start()
        return self

    def wait(self, timeout: float = 1500) -> float:
        """Seconds the step took; raises what it raised."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the step still runs after {timeout} s"
        if self.error is not None:
            raise self.error
        return time.monotonic() - self.started

    @property
    def output(self) -> str:
        """Everything the step printed so far."""
        return self.out.getvalue()


@contextlib.contextmanager
def acting_as(kubeconfig: Path):
    """Project code's in-cluster or kubeconfig credentials are ``kubeconfig``'s while inside.

    The ``as_pipeline`` fixture's patch, for fixtures that outlive one test.
    """
    real = kubernetes.config.load_kube_config
    with pytest.MonkeyPatch.context() as patch:
        load = lambda *args, **kwargs: real(config_file=str(kubeconfig))  # noqa: E731
        patch.setattr(kubernetes.config, "load_incluster_config", load)
        patch.setattr(kubernetes.config, "load_kube_config", load)
        patch.setenv("KUBECONFIG", str(kubeconfig))
        yield


def job_pods(core, namespace: str, role: str = "") -> list:
    """The training job's pods (of one replica type: master, worker), not being deleted."""
    selector = JOB_NAME_LABEL + (f",{ROLE_LABEL}={role}" if role else "")
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [pod for pod in pods if pod.metadata.deletion_timestamp is None]


def wait_for_log(core, namespace: str, role: str, pattern: str, timeout: float = 600):
    """The ``role`` pod once its log matches ``pattern``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in job_pods(core, namespace, role):
            try:
                log = core.read_namespaced_pod_log(
                    pod.metadata.name, namespace, container="pytorch"
                )
            except kubernetes.client.exceptions.ApiException:
                continue  # not started yet
            if re.search(pattern, log):
                return pod
        time.sleep(0.5)
    raise AssertionError(
        f"no {role} log matched {pattern!r} in {timeout} s\n" + describe_pods(core, namespace)
    )


def replacement(core, namespace: str, role: str, old, timeout: float = 300):
    """The ``role`` pod that replaced ``old`` (another uid), once it is scheduled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pod in job_pods(core, namespace, role):
            if pod.metadata.uid != old.metadata.uid and pod.spec.node_name:
                return pod
        time.sleep(0.5)
    raise AssertionError(f"no new {role} pod in {timeout} s\n" + describe_pods(core, namespace))


def real_node(name: str):
    """The harness's RealNode of that name."""
    (found,) = [n for n in harness_module("node").NODES if n.name == name]
    return found


def kill_container(pod, container: str = "pytorch") -> None:
    """SIGKILL one container of a pod through its node's containerd, as an OOM kill does."""
    (status,) = [s for s in pod.status.container_statuses if s.name == container]
    container_id = status.container_id.removeprefix("containerd://")
    ctr = [*real_node(pod.spec.node_name).ctr(), "-n", "k8s.io", "tasks", "kill"]
    subprocess.run([*ctr, "-s", "SIGKILL", container_id], check=True, capture_output=True)


def metric_lines(text: str) -> list[str]:
    """The Katib metric lines of a log, without their timestamps."""
    return METRIC.findall(text)


def log_segments(text: str) -> list[str]:
    """The step's output cut at each header of a new rank-0 container's log (logs.py)."""
    return re.split(r"--- log of \S+ \(restart \d+\) ---", text)
