"""k8s/admission on the tier's real kube-apiserver: the production class only where allowed.

The module applies k8s/admission (a ValidatingAdmissionPolicy and its binding) as an admin,
waits until the API server enforces it, and removes it afterwards, so that the rest of the
tier runs without it. The train step runs as the pipeline's account (as in test_steps.py;
kwok plays the job's pods).

Upstream behaviour relied on:
- k8s.io/apiserver v0.36.3 pkg/admission/plugin/policy/validating/dispatcher.go: a denial is
  ``admission.NewForbidden`` with the validation's ``reason`` (Forbidden: HTTP 403) and the
  message "ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
  <message>"; components/runtime/objects.py turns a 403 into ``Refused``, one line.
- the policy is compiled and enforced a moment after it is created (its informer), so the
  fixture waits for a dry-run create to be refused; dry runs go through admission.
- kueue v0.19.2 pkg/controller/jobframework/reconciler.go ExtractPriority: the Workload takes
  its priority from the job's ``kueue.x-k8s.io/priority-class`` WorkloadPriorityClass, and
  apis/kueue/v1beta2/workload_types.go records it as ``spec.priorityClassRef`` (kind, name)
  and ``spec.priority``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from step_helpers import job_name, pytorchjob, run_train, workload_of

from components.runtime.objects import Refused
from components.specs.pytorchjob import PRIORITY_LABEL

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("quick_polls", "admission_policy")]
REPO = Path(__file__).resolve().parents[2]
ALLOWED = {"fmnist.dev/high-priority": "allowed"}  # k8s/admission: what an admin labels
REFUSAL = (
    "ValidatingAdmissionPolicy 'fmnist-high-priority' with binding 'fmnist-high-priority' denied "
    "request: namespace {namespace} may not use WorkloadPriorityClass fmnist-production: only "
    "namespaces an admin labels fmnist.dev/high-priority=allowed may"
)


def refused(core, namespace: str, labels: dict) -> bool:
    """Whether a dry-run create of a ConfigMap with ``labels`` is refused by the policy."""
    body = {"metadata": {"name": "probe", "labels": labels}}
    try:
        core.create_namespaced_config_map(namespace, body, dry_run="All")
        return False
    except ApiException as error:
        assert error.status == 403, error
        return True


def wait_enforced(core, namespace: str, enforced: bool, timeout: float = 30) -> None:
    """Wait until the API server enforces the policy in ``namespace`` (or no longer does)."""
    deadline = time.monotonic() + timeout
    while refused(core, namespace, {PRIORITY_LABEL: "fmnist-production"}) != enforced:
        assert time.monotonic() < deadline, f"the policy not {'on' if enforced else 'off'}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def admission_policy(kubectl, core, kueue_setup):
    """k8s/admission applied, enforced, then removed with the module (kueue_setup: the classes)."""
    kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "admission"))
    wait_enforced(core, "default", True)
    yield
    kubectl("delete", "-k", str(REPO / "k8s" / "admission"))
    wait_enforced(core, "default", False)


@pytest.fixture(name="namespace", params=[{}], ids=["unlabelled"])
def team_namespace(request, namespace_factory) -> str:
    """The test's namespace, labelled as ``request.param`` (parametrize it indirectly)."""
    return namespace_factory(dict(request.param))


def test_a_run_asking_for_production_is_refused_in_one_line_where_no_admin_allowed_it(
    as_pipeline, namespace, custom, workspace
):
    run_id = f"prio-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Refused) as error:
        run_train(workspace, run_id, priority_class="fmnist-production")
    name = job_name(run_id)
    assert str(error.value) == (
        f"PyTorchJob {namespace}/{name} was refused: pytorchjobs.kubeflow.org "
        f'"{name}" is forbidden: ' + REFUSAL.format(namespace=namespace)
    )
    assert pytorchjob(custom, namespace, name) is None


@pytest.mark.parametrize("namespace", [ALLOWED], ids=["allowed"], indirect=True)
def test_a_namespace_an_admin_labelled_runs_at_production_priority(
    as_pipeline, namespace, custom, workspace
):
    run_id = f"prio-{uuid.uuid4().hex[:8]}"
    run_train(workspace, run_id, priority_class="fmnist-production")
    job = pytorchjob(custom, namespace, job_name(run_id))
    workload = workload_of(custom, namespace, job["metadata"]["uid"])
    ref = workload["spec"]["priorityClassRef"]
    assert (ref["kind"], ref["name"], workload["spec"]["priority"]) == (
        "WorkloadPriorityClass",
        "fmnist-production",
        1000,
    )


def test_the_experiment_class_needs_no_label(as_pipeline, namespace, custom, workspace):
    run_id = f"prio-{uuid.uuid4().hex[:8]}"
    run_train(workspace, run_id, priority_class="fmnist-experiment")
    assert pytorchjob(custom, namespace, job_name(run_id))["metadata"]["labels"][PRIORITY_LABEL]


def test_an_update_may_keep_the_class_but_not_add_it(core, kubectl, namespace):
    """Any kind counts (a ConfigMap here): adding the class later is refused; an object that
    had it when its namespace was allowed may still be updated, or lowered, once the
    namespace's label is gone."""
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "plain"}})
    with pytest.raises(ApiException) as error:
        core.patch_namespaced_config_map(
            "plain", namespace, {"metadata": {"labels": {PRIORITY_LABEL: "fmnist-production"}}}
        )
    assert error.value.status == 403 and REFUSAL.format(namespace=namespace) in error.value.body

    kubectl("label", "namespace", namespace, "fmnist.dev/high-priority=allowed")
    wait_enforced(core, namespace, False)  # the policy's namespace informer saw the label
    labels = {PRIORITY_LABEL: "fmnist-production"}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "kept", "labels": labels}})
    kubectl("label", "namespace", namespace, "fmnist.dev/high-priority-")
    wait_enforced(core, namespace, True)
    core.patch_namespaced_config_map("kept", namespace, {"metadata": {"labels": {"a": "b"}}})
    lower = {PRIORITY_LABEL: "fmnist-experiment"}
    core.patch_namespaced_config_map("kept", namespace, {"metadata": {"labels": lower}})
