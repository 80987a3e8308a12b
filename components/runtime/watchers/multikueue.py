"""A job Kueue's MultiKueue runs on a worker cluster: which one, and its pods and log there.

On the cluster where the step runs (MultiKueue's manager) such a job only mirrors the
worker's: Kueue copies the worker job's whole status back, and the job's pods, rank 0's log
with them, exist only on the worker that admitted it, which the job's Workload names in
``status.clusterName`` (kueue v0.19.2 ``pkg/controller/admissionchecks/multikueue/
workload.go``; the adapters' ``SyncJob``). Kueue marks the job ``managedBy:
kueue.x-k8s.io/multikueue`` when its queue's ClusterQueue has the MultiKueue admission check
(``pkg/controller/jobframework/defaults.go`` ``ApplyDefaultForManagedBy``).

The wait follows the pods and the log on the worker when ``$FMNIST_WORKER_KUBECONFIGS`` is
a folder with a kubeconfig for it, in a file named after its MultiKueueCluster (a Secret
mounted there); otherwise it says where the log is.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import client, config

from components.runtime.job_poll import JobPoll, Place
from components.runtime.kube import BoundedApiClient, KubeClient
from components.specs.workload import admission_checks, admission_state, dispatched_to

# kueue v0.19.2 apis/kueue/v1beta2/multikueue_types.go MultiKueueControllerName
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
WORKER_KUBECONFIGS = "FMNIST_WORKER_KUBECONFIGS"


class MultiKueue:
    """Until a worker admits the job, says what MultiKueue waits for; then moves the wait there."""

    def __init__(self):
        self.placed, self.said = False, None

    def see(self, poll: JobPoll) -> None:
        """Look for the worker cluster, once the job is MultiKueue's."""
        if self.placed or poll.job.kind.manager(poll.found) != MULTIKUEUE:
            return
        workload = poll.workload()
        cluster = dispatched_to(workload)
        if not cluster:
            _, no_quota = admission_state(workload)
            waiting = no_quota or admission_checks(workload) or "no Workload yet"
            if waiting != self.said:
                self.said = waiting
                poll.say(f"{poll.what} waits for a MultiKueue worker to admit it: {waiting}")
            return
        self.placed = True
        poll.say(f"{poll.what} was admitted on cluster {cluster} by MultiKueue")
        poll.move_to(worker_place(cluster, poll))


def worker_place(cluster: str, poll: JobPoll) -> Place:
    """The worker ``cluster`` as a place: a client there, or how to read the log without one."""
    kubeconfig = worker_kubeconfig(cluster)
    try:
        kube = worker_client(kubeconfig) if kubeconfig else None
    except config.ConfigException as error:  # the job goes on; only its log is out of reach
        poll.say(f"cannot use {kubeconfig} for cluster {cluster}: {error}")
        kube = None
    if kube:
        return Place(cluster, kube)
    selector = poll.job.kind.rank0_selector(poll.job.name)
    hint = where_the_log_is(cluster, poll.job.namespace, selector)
    poll.say(hint)
    return Place(cluster, None, hint)


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
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
        return KubeClient(BoundedApiClient(configuration))
    except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise config.ConfigException(f"not a valid kubeconfig: {reason}") from None


def where_the_log_is(cluster: str, namespace: str, selector: str) -> str:
    """How to read rank 0's log on ``cluster`` without a kubeconfig for it here."""
    return (
        f"rank 0's log is on cluster {cluster} (no kubeconfig for it in "
        f"${WORKER_KUBECONFIGS}): kubectl --context {cluster} -n {namespace} logs -l {selector}"
    )
