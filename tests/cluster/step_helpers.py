"""The train step as the tests of the cluster tier call it, and what they read back.

from step_helpers import job_name, pytorchjob, run_train, workload_of
"""

from __future__ import annotations

from pathlib import Path

from kfp import dsl
from kubernetes.client.exceptions import ApiException

from components.runtime import launcher
from components.specs.params import TrainingJob
from components.specs.pods import GPU_TOLERATION
from components.steps.train import train


def run_train(workspace: Path, run_id: str, env: dict | None = None, **job) -> Path:
    """The train step on the cluster; returns the model directory it filled."""
    model = dsl.Model(uri=str(workspace.parent / f"model-{run_id}"))
    config = dsl.TaskConfig(
        volumes=[{"name": "kfp-workspace", "emptyDir": {}}],
        volume_mounts=[{"name": "kfp-workspace", "mountPath": str(workspace)}],
        tolerations=[GPU_TOLERATION],
        env=[{"name": name, "value": value} for name, value in (env or {}).items()],
    )
    train.python_func(
        dataset=dsl.Dataset(uri=str(workspace.parent / "dataset")),
        model=model,
        job=TrainingJob(**{"timeout_seconds": 300, **job}).to_dict(),
        target="cluster",
        workspace_path=str(workspace),
        run_id=run_id,
        task_config=config,
    )
    return Path(model.path)


def job_name(run_id: str) -> str:
    """The name the train step gives the job of ``run_id``."""
    return launcher.run_object_name(launcher.JOB_PREFIX, run_id)


def workload_of(custom, namespace: str, uid: str) -> dict | None:
    """The Kueue Workload of the job with that uid."""
    items = custom.list_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        namespace,
        "workloads",
        label_selector=f"kueue.x-k8s.io/job-uid={uid}",
    )["items"]
    return items[0] if items else None


def pytorchjob(custom, namespace: str, name: str) -> dict | None:
    """The PyTorchJob, or None once it is gone."""
    try:
        return custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", name
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise
