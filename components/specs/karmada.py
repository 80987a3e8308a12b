"""A Karmada PropagationPolicy spreading the pipeline's training jobs over member clusters."""

from __future__ import annotations

from components.specs.kinds import PROPAGATION_POLICY, PYTORCHJOB, TRAINJOB
from components.specs.pytorchjob import QUEUE_LABEL


def propagation_policy(
    *,
    name: str,
    namespace: str,
    queue_name: str,
    cluster_weights: dict[str, int],
    one_cluster_per_job: bool = False,
) -> dict:
    """A PropagationPolicy for the PyTorchJobs and TrainJobs of one Kueue queue in ``namespace``.

    The member clusters get a static weight each, under a Divided/Weighted replica
    division. Karmada's default interpreter counts no replicas in a PyTorchJob or a
    TrainJob, so every selected cluster receives the whole job; ``one_cluster_per_job``
    adds a spread constraint that places each job in exactly one of the clusters instead.
    The ConfigMaps, Secrets and PVCs the job's pods refer to follow it (``propagateDeps``).
    """
    if not cluster_weights:
        raise ValueError("at least one member cluster is required")
    for cluster, weight in cluster_weights.items():
        if weight < 1:
            raise ValueError(f"the weight of cluster {cluster!r} must be >= 1, got {weight}")
    placement = {
        "clusterAffinity": {"clusterNames": list(cluster_weights)},
        "replicaScheduling": {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
            "weightPreference": {
                "staticWeightList": [
                    {"targetCluster": {"clusterNames": [cluster]}, "weight": weight}
                    for cluster, weight in cluster_weights.items()
                ]
            },
        },
    }
    if one_cluster_per_job:
        placement["spreadConstraints"] = [
            {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}
        ]
    selectors = [
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "namespace": namespace,
            "labelSelector": {"matchLabels": {QUEUE_LABEL: queue_name}},
        }
        for resource in (PYTORCHJOB, TRAINJOB)
    ]
    return {
        "apiVersion": PROPAGATION_POLICY.api_version,
        "kind": PROPAGATION_POLICY.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"resourceSelectors": selectors, "propagateDeps": True, "placement": placement},
    }
