"""A job Kueue's MultiKueue runs on a worker cluster: which one, and its pods' log from there.

On the cluster where the step runs (MultiKueue's manager) such a job only mirrors the
worker's: Kueue copies the worker job's whole status back, and the job's pods, rank 0's log
with them, exist only on the worker that admitted it, which the job's Workload names in
``status.clusterName`` (kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/
workload.go``; the adapters' ``SyncJob``). Kueue marks the job ``managedBy:
kueue.x-k8s.io/multikueue`` when its queue's ClusterQueue has the MultiKueue admission check
(``pkg/controller/jobframework/defaults.go`` ``ApplyDefaultForManagedBy``).

The step follows the log on the worker when ``$FMNIST_WORKER_KUBECONFIGS`` is a folder with
a kubeconfig for it, in a file named after its MultiKueueCluster (a Secret mounted there);
otherwise it says where the log is.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import config

from components.runtime.kube import KubeClient

# kueue v0.19.2 apis/kueue/v1beta2/multikueue_types.go MultiKueueControllerName
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
WORKER_KUBECONFIGS = "FMNIST_WORKER_KUBECONFIGS"


def dispatched_to(workload: dict) -> str:
    """The worker cluster that admitted the workload ("" while none has)."""
    return (workload.get("status") or {}).get("clusterName") or ""


def admission_checks(workload: dict) -> str:
    """The Workload's admission checks and their states: ``fmnist-multikueue: Pending (…)``."""
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    return "; ".join(
        f"{check.get('name')}: {check.get('state')}"
        + (f" ({check['message']})" if check.get("message") else "")
        for check in checks
    )


def worker_kubeconfig(cluster: str) -> Path | None:
    """The kubeconfig for ``cluster`` in $FMNIST_WORKER_KUBECONFIGS, if there is one."""
    folder = os.environ.get(WORKER_KUBECONFIGS)
    path = Path(folder) / cluster if folder else None
    return path if path and path.is_file() else None


def worker_client(path: Path) -> KubeClient:
    """A client for the worker cluster whose kubeconfig is ``path``.

    Raises:
        config.ConfigException: the file is no usable kubeconfig (the message says why).
    """
    try:
        return KubeClient(config.new_client_from_config(config_file=str(path)))
    except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise config.ConfigException(f"not a valid kubeconfig: {reason}") from None


def where_the_log_is(cluster: str, namespace: str, selector: str) -> str:
    """How to read rank 0's log on ``cluster`` without a kubeconfig for it here."""
    return (
        f"rank 0's log is on cluster {cluster} (no kubeconfig for it in "
        f"${WORKER_KUBECONFIGS}): kubectl --context {cluster} -n {namespace} logs -l {selector}"
    )
