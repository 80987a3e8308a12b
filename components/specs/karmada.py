"""A Karmada PropagationPolicy placing each of the pipeline's training jobs in one cluster."""

from __future__ import annotations

from components.specs.kinds import PROPAGATION_POLICY, PYTORCHJOB, TRAINJOB
from components.specs.pytorchjob import QUEUE_LABEL


def propagation_policy(*, name: str, namespace: str, queue_name: str, clusters: list[str]) -> dict:
    """A PropagationPolicy for the PyTorchJobs and TrainJobs of one Kueue queue in ``namespace``.

    Each job goes whole to exactly one of ``clusters``: one that has the GPUs, CPUs and
    memory of all its replicas free (a spread constraint of one cluster, with which
    Karmada's scheduler sizes a job by its pod templates: feature gate
    MultiplePodTemplatesScheduling; and a Divided/Aggregated replica scheduling, without
    which it does not look at free capacity). Without the constraint every listed cluster
    would receive, and run, the whole job. A job on a cluster that gets a NoExecute taint is
    deleted there before it is created elsewhere (purge mode Directly), so that two copies
    never train at once. The ConfigMaps, Secrets and PVCs its pods use follow it
    (``propagateDeps``).
    """
    if not clusters:
        raise ValueError("at least one member cluster is required")
    selectors = [
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "namespace": namespace,
            "labelSelector": {"matchLabels": {QUEUE_LABEL: queue_name}},
        }
        for resource in (PYTORCHJOB, TRAINJOB)
    ]
    placement = {
        "clusterAffinity": {"clusterNames": list(clusters)},
        "spreadConstraints": [{"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}],
        # Divided: without it the scheduler ignores free capacity; Aggregated: with static
        # weights, or none, it ignores the spread constraint instead (Karmada v1.18.1
        # pkg/scheduler/core/spreadconstraint/select_clusters.go). A job of several pod
        # templates is not divided anyway (pkg/scheduler/core/common.go AssignReplicas).
        "replicaScheduling": {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Aggregated",
        },
    }
    return {
        "apiVersion": PROPAGATION_POLICY.api_version,
        "kind": PROPAGATION_POLICY.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceSelectors": selectors,
            "propagateDeps": True,
            "placement": placement,
            "failover": {"cluster": {"purgeMode": "Directly"}},
        },
    }
