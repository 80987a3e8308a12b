"""The tenant next door: what a pod of another namespace can reach of a run, on real pods.

A run's namespace (``namespace``, pinned to the real nodes) gets k8s/network-policies the way
an admin applies it in a profile namespace; a second namespace, the neighbour's, gets
nothing. kube-router enforces the policies on both real nodes (harness/enforcer.py). From
probe pods (probes.py) on each node the neighbour tries a TCP connection to a running job's
rendezvous port and to the predictor's HTTP port: it connects while the policies are absent
and is refused once they are applied, while the peers the policies name connect at the same
moment, so that a refusal is the policy's and not a dead port's.

Upstream behaviour relied on:
- kube-router v2.10.0 pkg/controllers/netpol/pod.go: a chain per local pod a policy selects,
  jumped to from FORWARD for routed packets and, with ``-m physdev --physdev-is-bridged``,
  for packets bridged between pods of one node, which ends in a REJECT of what no policy
  marked allowed; established connections pass (network_policy_controller.go
  ensureCommonPolicyChain: RELATED,ESTABLISHED), so a running job keeps its own.
- training-operator v1.9.4 pkg/controller.v1/pytorch/envvar.go: MASTER_PORT is the master's
  container port named ``pytorchjob-port`` (components/specs/pytorchjob.py: 23456), where
  torchrun's rendezvous store listens on the master pod for the whole run.
- kserve v0.15.2 pkg/controller/v1beta1/inferenceservice/components/predictor.go
  buildObjectMeta: ``spec.predictor.labels`` label the predictor's pods.
- NetworkPolicy (networking.k8s.io/v1): a pod selected by a policy of a type accepts only what
  some policy of that type allows; ``namespaceSelector`` on ``kubernetes.io/metadata.name``
  names one namespace (the API server sets that label on every namespace).
"""

from __future__ import annotations

import uuid

import pytest
from fault_helpers import Training, fault_job, metric_lines, wait_for_log
from probes import from_both_nodes, network_policies, remove_network_policies, results, wait_until
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    bind_workspace,
    harness_node,
    real_namespace,
    running_predictor,
)
from test_real_serving import STORE, deploy_for_real

from components.runtime import volumes
from components.specs.pods import PREDICTOR_ROLE, ROLE_LABEL, TRAINING_ROLE
from components.specs.pytorchjob import MASTER_PORT
from serving.defaults import HTTP_PORT, MODEL_NAME

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.usefixtures("quick_polls")]
STEP_POD = {"pipelines.kubeflow.org/v2_component": "true"}  # what KFP labels a run's pods
EPOCHS = 5  # the job still runs while the probes' rounds are done


@pytest.fixture
def other_namespace(namespace_factory):
    """``other_namespace()``: one more namespace whose pods run on the real nodes."""
    annotations = dict(harness_node().REAL_NAMESPACE_ANNOTATIONS)
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    return lambda: namespace_factory(labels, annotations)


def test_a_neighbour_cannot_reach_a_running_jobs_rendezvous_port(
    as_pipeline, namespace, other_namespace, core, kubectl, packed, tmp_path, record_property
):
    """Before the policies the neighbour reaches the master's 23456 from both nodes; after,
    from neither, while a training pod of the run's namespace still does; the job, whose
    ranks keep talking across the two nodes, ends as it would have."""
    neighbour = other_namespace()
    run = Training(core, namespace, packed, tmp_path / "model", fault_job(epochs=EPOCHS)).start()
    master = wait_for_log(core, namespace, "master", r"epoch 1 \[")
    target = (master.status.pod_ip, MASTER_PORT)
    from_neighbour = from_both_nodes(neighbour, *target)
    assert all(results(core, from_neighbour).values()), "the port must answer without policies"

    network_policies(kubectl, namespace)
    own = from_both_nodes(namespace, *target, {ROLE_LABEL: TRAINING_ROLE})
    expected = {**dict.fromkeys(own, True), **dict.fromkeys(from_neighbour, False)}
    record_property("seconds_until_enforced", round(wait_until(core, expected), 1))
    run.wait()
    assert len(metric_lines(run.output)) == EPOCHS, run.output


def test_a_neighbour_cannot_reach_the_predictor_but_the_gateway_and_the_steps_can(
    as_pipeline, namespace, other_namespace, core, kubectl, monkeypatch, trained_model_dir
):
    """With the policies applied first, the deploy step serves the model (its check is the
    kubelet's readiness probe, from the node); then only the named gateway namespace and the
    run's step pods reach port 8080: not the neighbour, nor another pod of the namespace.
    Without the policies the neighbour reaches it again."""
    neighbour, gateway = other_namespace(), other_namespace()
    network_policies(kubectl, namespace, gateway=gateway)
    store = bind_workspace(core, namespace, STORE)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(store.path))  # the step's PVC mount
    out = deploy_for_real(namespace, core, trained_model_dir, f"run-{uuid.uuid4().hex[:6]}")
    assert out
    pod = running_predictor(core, namespace, MODEL_NAME)
    assert pod.metadata.labels[ROLE_LABEL] == PREDICTOR_ROLE
    target = (pod.status.pod_ip, HTTP_PORT)

    allowed = from_both_nodes(gateway, *target) + from_both_nodes(namespace, *target, STEP_POD)
    refused = from_both_nodes(neighbour, *target) + from_both_nodes(namespace, *target)
    wait_until(core, {**dict.fromkeys(allowed, True), **dict.fromkeys(refused, False)})

    remove_network_policies(kubectl, namespace)
    wait_until(core, dict.fromkeys(refused, True))
