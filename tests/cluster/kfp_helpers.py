"""What the ``kfp`` tests share: the `fmnist` command in-process, runs and their Workflows."""

from __future__ import annotations

import contextlib
import io
import re
import uuid

from cluster_helpers import wait_for

from cli import main as cli

KFP_NAMESPACE = "kubeflow"  # single-user KFP runs everything in its own namespace
LEGACY_NAMESPACE = "kubeflow-legacy"  # the older API server's (build/cluster/kfp-legacy-host)
KFP_NAMESPACES = (KFP_NAMESPACE, LEGACY_NAMESPACE)
STORAGE_CLASS = "fmnist-local"  # the real nodes' local volumes (RWX: both nodes mount them)
RUN_ID_LABEL = "pipeline/runid"  # backend/src/common/util/consts.go LabelKeyWorkflowRunId
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"  # argo-workflows v3.7.3 pkg/apis/workflow
MODEL_NAME = "fashion-mnist"  # the pipeline's model_name default: the InferenceService
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # on the predictor's pods
# Runs of a slice of the data for one epoch, sized for the real nodes' CPUs: a training
# process asks for 900m, so that Master and Worker fit beside the train step's own pod (its
# KFP launcher init container asks for 100m).
SLICE = {  # a slice of the data, one epoch, sizes that fit the 2-CPU node
    "train_limit": "2000",
    "test_limit": "500",
    "epochs": "1",
    "cpu": "900m",
    "memory": "3Gi",
    "min_accuracy": "0.5",
    "timeout_seconds": "600",
    "serving_timeout_seconds": "420",
}

RUN_TIMEOUT = 1200  # seconds: a run of the slice takes about three minutes here


def fmnist(*argv: str) -> tuple[int, str, str]:
    """Run ``fmnist ARGV`` in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def submitted(out: str) -> tuple[str, str]:
    """(version id, run id) from what `fmnist submit` printed."""
    version = re.search(r"^pipeline \S+: version (\S+)$", out, re.M)
    run = re.search(r"^run (\S+): ", out, re.M)
    assert version and run, out
    return version[1], run[1]


def submit_argv(host: str, pipeline: str, name: str) -> list[str]:
    """`fmnist submit` of ``pipeline`` as KFP pipeline ``name``, on the real nodes' storage."""
    return [
        "submit",
        "--host",
        host,
        "--pipeline",
        pipeline,
        "--pipeline-name",
        name,
        "--workspace-storage-class",
        STORAGE_CLASS,
    ]


def submit(host: str, pipeline: str, name: str, *extra: str) -> tuple[str, str]:
    """`fmnist submit` of ``pipeline`` as KFP pipeline ``name``; returns (version id, run id)."""
    code, out, err = fmnist(*submit_argv(host, pipeline, name), *extra)
    assert code == 0, err
    assert not err, err
    return submitted(out)


def param_args(params: dict) -> list[str]:
    """``--param KEY=VALUE`` for each of ``params``, as `fmnist submit` and `schedule` take them."""
    return [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]


def run_pipeline(
    host: str, pipeline: str, params: dict, timeout: int = RUN_TIMEOUT
) -> tuple[int, str, str]:
    """`fmnist submit --wait` of ``pipeline`` with ``params``; returns (exit code, out, run id)."""
    code, out, err = fmnist(
        *submit_argv(host, pipeline, unique(pipeline)),
        "--wait",
        "--timeout",
        str(timeout),
        *param_args(params),
    )
    assert "Traceback" not in err, err
    _, run_id = submitted(out)
    return code, out, run_id


def workflows(custom, selector: str, namespace: str = KFP_NAMESPACE) -> list[dict]:
    """The Argo Workflows in ``namespace`` matching the label ``selector``."""
    found = custom.list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", namespace, "workflows", label_selector=selector
    )
    return found["items"]


def workflow_of_run(custom, run_id: str, namespace: str = KFP_NAMESPACE) -> dict:
    """The Workflow the API server created for run ``run_id`` (created with the run)."""
    (workflow,) = wait_for(
        lambda: workflows(custom, f"{RUN_ID_LABEL}={run_id}", namespace),
        30,
        f"the Workflow of run {run_id}",
    )
    return workflow


def stop_run(kfp_client, custom, run_id: str, namespace: str = KFP_NAMESPACE) -> None:
    """Terminate run ``run_id`` and wait until its Workflow has no pod running.

    The tests that only look at what the API server made of a pipeline stop its run: on the
    real node it would go on and train on the whole dataset.
    """
    with contextlib.redirect_stdout(io.StringIO()):
        kfp_client.terminate_run(run_id)
    wait_for(
        lambda: all(
            w.get("status", {}).get("phase") not in (None, "", "Pending", "Running")
            for w in workflows(custom, f"{RUN_ID_LABEL}={run_id}", namespace)
        ),
        120,
        f"run {run_id} stopped",
    )
