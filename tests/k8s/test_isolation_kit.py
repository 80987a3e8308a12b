"""k8s/network-policies and k8s/admission select what the pipeline really makes.

The NetworkPolicies select pods by the labels our builders put on the training pods of both
job kinds and on the predictor, and open the predictor's real port; the admission policy
restricts the high WorkloadPriorityClasses k8s/kueue ships, and only those. Whether they are
enforced is the cluster tier's business (tests/cluster/test_isolation.py,
tests/cluster/test_admission.py); here, that they are about our objects at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.specs.inferenceservice import inference_service
from components.specs.params import Serving, TrainingJob
from components.specs.pods import Placement
from components.specs.pytorchjob import PRIORITY_LABEL, pytorchjob
from components.specs.trainjob import trainjob
from serving.defaults import HTTP_PORT

K8S = Path(__file__).resolve().parents[2] / "k8s"
JOB = TrainingJob(workers=2)


@pytest.fixture(scope="module")
def policies(render_kustomization) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in render_kustomization(K8S / "network-policies")}


@pytest.fixture(scope="module")
def admission(render_kustomization) -> dict[str, dict]:
    return {o["kind"]: o for o in render_kustomization(K8S / "admission")}


def selects(selector: dict, labels: dict) -> bool:
    """Whether a label selector of matchLabels only selects pods with ``labels``."""
    assert set(selector) <= {"matchLabels"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items()


def training_pod_labels() -> list[dict]:
    """The pod labels of a PyTorchJob's replicas and of a TrainJob of either generation."""
    common = {"name": "j", "namespace": "n", "job": JOB, "args": [], "placement": Placement()}
    job = pytorchjob(**common)
    found = [
        r["template"]["metadata"]["labels"] for r in job["spec"]["pytorchReplicaSpecs"].values()
    ]
    (override,) = trainjob(**common, generation="v2.1")["spec"]["podTemplateOverrides"]
    (patch,) = trainjob(**common, generation="v2.2")["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return [
        *found,
        override["metadata"]["labels"],
        node["template"]["spec"]["template"]["metadata"]["labels"],
    ]


def predictor_labels() -> dict:
    isvc = inference_service(
        serving=Serving(), namespace="n", storage_uri="pvc://m/x", mode_annotation="Standard"
    )
    return isvc["spec"]["predictor"]["labels"]


def test_the_kit_is_two_policies_that_isolate_both_ways(policies):
    assert set(policies) == {"fmnist-training", "fmnist-predictor"}
    for policy in policies.values():
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert "namespace" not in policy["metadata"]  # applied per namespace, with -n


def test_the_training_policy_selects_every_training_pod_and_no_predictor(policies):
    spec = policies["fmnist-training"]["spec"]
    labels = training_pod_labels()
    assert len(labels) == 4
    assert all(selects(spec["podSelector"], pod) for pod in labels)
    assert not selects(spec["podSelector"], predictor_labels())


def test_training_pods_hear_only_training_pods_of_their_namespace(policies):
    spec = policies["fmnist-training"]["spec"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # no namespaceSelector: this namespace only
    assert all(selects(peer["podSelector"], pod) for pod in training_pod_labels())
    assert "ports" not in rule  # gloo's pairs use ports the kernel picks


def test_training_pods_reach_each_other_dns_and_katibs_db_manager_only(policies):
    egress = policies["fmnist-training"]["spec"]["egress"]
    to_pods, dns, katib = egress
    assert set(to_pods) == {"to"} and to_pods["to"][0]["podSelector"] == {
        "matchLabels": {"fmnist.dev/role": "training"}
    }
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    (peer,) = katib["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kubeflow"}
    assert katib["ports"] == [{"protocol": "TCP", "port": 6789}]


def test_the_predictor_hears_the_gateway_and_the_steps_and_reaches_dns_and_istiod(policies):
    spec = policies["fmnist-predictor"]["spec"]
    assert selects(spec["podSelector"], predictor_labels())
    assert not any(selects(spec["podSelector"], pod) for pod in training_pod_labels())
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": HTTP_PORT}]
    gateway, steps = rule["from"]
    assert gateway == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}}
    }
    assert steps == {
        "podSelector": {"matchLabels": {"pipelines.kubeflow.org/v2_component": "true"}}
    }
    dns, istiod = spec["egress"]
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    (peer,) = istiod["to"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}},
        "podSelector": {"matchLabels": {"app": "istiod"}},
    }
    assert istiod["ports"] == [{"protocol": "TCP", "port": 15012}]  # a sidecar's xDS


def test_admission_restricts_the_high_priority_classes_kueue_ships(admission, render_kustomization):
    """Every shipped class above the lowest is restricted; the lowest stays free for all."""
    classes = {
        o["metadata"]["name"]: o["value"]
        for o in render_kustomization(K8S / "kueue")
        if o["kind"] == "WorkloadPriorityClass"
    }
    spec = admission["ValidatingAdmissionPolicy"]["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    lowest = min(classes.values())
    high = sorted(name for name, value in classes.items() if value > lowest)
    assert high == ["fmnist-production"]
    assert variables["restricted"] == repr(high).replace('"', "'")
    assert PRIORITY_LABEL in variables["asked"] and PRIORITY_LABEL in variables["had"]
    (selector,) = spec["matchConstraints"]["objectSelector"]["matchExpressions"]
    assert selector == {"key": PRIORITY_LABEL, "operator": "Exists"}


def test_admission_lets_only_labelled_namespaces_through_and_denies(admission):
    spec = admission["ValidatingAdmissionPolicy"]["spec"]
    (selector,) = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert selector == {
        "key": "fmnist.dev/high-priority",
        "operator": "NotIn",
        "values": ["allowed"],
    }
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["resources"] == ["*"]
    binding = admission["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding == {"policyName": "fmnist-high-priority", "validationActions": ["Deny"]}
