"""MultiKueue worker clusters: more control planes, each with the job controllers and Kueue.

Kueue on the main cluster (the manager) dispatches a job whose ClusterQueue carries the
MultiKueue admission check to a worker cluster, creates it there and copies its status back
(harness/multikueue.py). Each worker here is a kwokctl cluster like the main one: kwok's fake
nodes, and JobSet, the Training Operator, Trainer and Kueue with the main cluster's
configuration, each a process of its own named ``<worker>-<controller>``.
"""

from __future__ import annotations

from pathlib import Path

from harness import control_plane, manifests
from harness.api import Api
from harness.components import Component
from harness.controllers import configure, jobset, kueue, trainer, training_operator
from harness.controllers.setup import Cluster, Setup
from harness.paths import BUILD, CLUSTER
from harness.processes import Process

WORKERS = ("worker-1", "worker-2")
CONTROLLERS = (jobset, training_operator, trainer, kueue)  # what runs a job where it lands


def kubeconfig(worker: str) -> Path:
    """The admin kubeconfig kwokctl writes for a worker."""
    return BUILD / f"kubeconfig-{worker}"


def kwok_name(worker: str) -> str:
    """The name kwokctl knows a worker cluster by."""
    return f"{CLUSTER}-{worker}"


def start_control_plane(worker: str, stages: list[Path]) -> Api:
    """The worker's etcd, kube-apiserver, controller-manager, scheduler and kwok."""
    control_plane.start_control_plane(stages, kwok_name(worker), kubeconfig(worker))
    return Api(kubeconfig(worker))


def controllers(
    worker: str, wanted: dict[str, Component], pki: dict[str, Path], trainer_version: str
) -> tuple[list[Process], list[dict]]:
    """The worker's controller processes and the objects to create before they start."""
    setup = Setup(
        manifests.load({name: wanted[name] for name in _components(trainer_version)}),
        pki,
        trainer_version,
        "",
        Cluster(worker, kubeconfig(worker)),
    )
    return configure(CONTROLLERS, setup)


def _components(trainer_version: str) -> tuple[str, ...]:
    """The components whose manifests the worker's controllers need."""
    return ("jobset", "training-operator", f"trainer-{trainer_version}", "kueue")


def stop_all() -> None:
    """Stop every worker's control plane (its controllers go with the main cluster's pids)."""
    for worker in WORKERS:
        control_plane.stop_control_plane(kwok_name(worker))
        kubeconfig(worker).unlink(missing_ok=True)
