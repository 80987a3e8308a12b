"""k8s/trainer: the ClusterTrainingRuntime that gives Trainer v2.1 TrainJobs restricted pods.

A v2.1 TrainJob cannot carry a securityContext (kubeflow/trainer v2.1.0
``pkg/apis/trainer/v1alpha1/trainjob_types.go``: ``PodTemplateOverride`` has no such
field), so the runtime sets it. The runtime is upstream's ``torch-distributed`` (v2.1.0
``manifests/base/runtimes/torch_distributed.yaml``) plus the pods' securityContext from
the same functions the project's own pod builders call, and one object serves both the
v2.1.0 and the v2.3.0 CRD.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from pss import violations

from cli.manifests import training_job_object
from components.specs.kinds import TRAINJOB_KIND
from components.specs.params import TrainingJob
from components.specs.pods import (
    ISTIO_INJECT_LABEL,
    container_security_context,
    pod_security_context,
)
from components.specs.trainjob import NODE_JOB

REPO = Path(__file__).resolve().parents[2]
RUNTIME = "fmnist-torch-distributed"


@pytest.fixture(scope="module")
def runtime(render_kustomization) -> dict:
    (obj,) = render_kustomization(REPO / "k8s" / "trainer")
    assert (obj["kind"], obj["metadata"]["name"]) == ("ClusterTrainingRuntime", RUNTIME)
    return obj


def node_pod_template(runtime: dict) -> dict:
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == NODE_JOB  # where the launcher and Katib look for rank 0
    return job["template"]["spec"]["template"]


@pytest.mark.parametrize("version", ["v2.1.0", "v2.3.0"])
def test_the_runtime_is_valid_for_both_trainer_releases(runtime, validate_crd_at, version):
    validate_crd_at("trainer", version)(runtime)


def test_numprocpernode_is_left_to_v21s_default_because_v23_has_no_such_field(
    runtime, crd_schemas_at, validate_crd_at
):
    """Upstream v2.1.0 writes ``torch: {numProcPerNode: auto}``; v2.3.0 rejects that field."""
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
    schema = crd_schemas_at("trainer", "v2.1.0")[
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
    ]
    torch = schema["properties"]["spec"]["properties"]["mlPolicy"]["properties"]["torch"]
    assert torch["properties"]["numProcPerNode"]["default"] == "auto"  # what v2.1 stores
    upstream_v21 = yaml.safe_load(yaml.safe_dump(runtime))
    upstream_v21["spec"]["mlPolicy"]["torch"] = {"numProcPerNode": "auto"}
    validate_crd_at("trainer", "v2.1.0")(upstream_v21)
    with pytest.raises(jsonschema.ValidationError, match="numProcPerNode"):
        validate_crd_at("trainer", "v2.3.0")(upstream_v21)


def test_its_pods_are_restricted_exactly_as_the_builders_make_them(runtime):
    pod = node_pod_template(runtime)["spec"]
    assert pod["securityContext"] == pod_security_context()
    (container,) = pod["containers"]
    assert container["name"] == TRAINJOB_KIND.container
    assert container["securityContext"] == container_security_context()


def test_its_pods_pass_the_restricted_pod_security_standard(runtime):
    assert violations(node_pod_template(runtime)["spec"]) == []


def test_its_pods_get_no_istio_sidecar(runtime):
    """v2.1.0 puts a TrainJob's spec.labels on the JobSet only (pkg/runtime/core/
    trainingruntime.go, newRuntimeInfo); JobSet v0.10.1 does not copy its own labels to pods."""
    assert node_pod_template(runtime)["metadata"]["labels"] == {ISTIO_INJECT_LABEL: "false"}


def test_a_v21_trainjob_can_name_it(runtime, validate_crd_at):
    job = TrainingJob(trainjob_runtime=RUNTIME)
    trainjob = training_job_object(job, "trainjob", "fmnist-train", "kubeflow", "v2.1")
    validate_crd_at("trainer", "v2.1.0")(trainjob)
    assert trainjob["spec"]["runtimeRef"] == {
        "name": runtime["metadata"]["name"],
        "apiGroup": "trainer.kubeflow.org",
        "kind": runtime["kind"],
    }
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": NODE_JOB}]
    assert "securityContext" not in override["spec"]  # only the runtime can set it in v2.1
