"""What the steps find out from the cluster: the job API, the Trainer and KServe generation,
the Kueue API version.

The fake API server publishes discovery documents and, like a real kube-apiserver, each
CRD's openAPIV3Schema under /openapi/v3 (the schemas are the pinned upstream CRDs).
The generation markers are read in upstream source: kubeflow/trainer v2.1.0 and v2.3.0
``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (podTemplateOverrides vs runtimePatches);
kserve v0.15.2 and v0.16.0 ``config/crd/full/serving.kserve.io_inferenceservices.yaml``
(``spec.predictor.storageUris`` arrives with the Standard/Knative names in 0.16.0); kueue
v0.19.2 ``config/components/crd/bases/kueue.x-k8s.io_workloads.yaml`` (v1beta2 served,
v1beta1 served but deprecated).
"""

import re

import pytest

from components.runtime.discovery import (
    ClusterMismatch,
    choose_job_api,
    kserve_uses_legacy_names,
    kueue_resource,
    trainjob_generation,
)
from components.runtime.kube import KubeClient
from components.specs.kinds import LOCALQUEUE, WORKLOAD

TRAINER = "trainer.kubeflow.org/v1alpha1"
KSERVE = "serving.kserve.io/v1beta1"


@pytest.mark.parametrize(
    ("served", "job_api", "chosen"),
    [
        ({"kubeflow.org/v1": ["pytorchjobs"]}, "auto", "pytorchjob"),
        ({TRAINER: ["trainjobs", "trainingruntimes"]}, "auto", "trainjob"),
        ({"kubeflow.org/v1": ["pytorchjobs"], TRAINER: ["trainjobs"]}, "auto", "pytorchjob"),
        ({"kubeflow.org/v1": ["pytorchjobs"], TRAINER: ["trainjobs"]}, "trainjob", "trainjob"),
        ({"kubeflow.org/v1": ["tfjobs", "pytorchjobs"]}, "pytorchjob", "pytorchjob"),
    ],
)
def test_the_job_api_is_the_one_served(fake_k8s, served, job_api, chosen):
    fake_k8s.served = served
    assert choose_job_api(KubeClient.connect(), job_api) == chosen


@pytest.mark.parametrize(
    ("served", "job_api", "message"),
    [
        ({}, "auto", "serves neither pytorchjobs.kubeflow.org (kubeflow.org/v1) nor trainjobs"),
        # Katib alone serves kubeflow.org/v1beta1 experiments, not v1 pytorchjobs
        ({"kubeflow.org/v1beta1": ["experiments"]}, "auto", "serves neither"),
        ({TRAINER: ["trainjobs"]}, "pytorchjob", "serves no pytorchjobs.kubeflow.org"),
        ({"kubeflow.org/v1": ["pytorchjobs"]}, "trainjob", "serves no trainjobs.trainer"),
    ],
)
def test_no_served_job_api_is_an_error_with_the_install_step(fake_k8s, served, job_api, message):
    fake_k8s.served = served
    with pytest.raises(ClusterMismatch, match=re.escape(message)) as error:
        choose_job_api(KubeClient.connect(), job_api)
    assert "docs/install.md, step 2" in str(error.value)


@pytest.mark.parametrize(("release", "generation"), [("v2.1.0", "v2.1"), ("v2.3.0", "v2.2")])
def test_the_trainer_generation_comes_from_the_served_schema(
    fake_k8s, crd_schemas_at, release, generation
):
    schema = crd_schemas_at("trainer", release)[(TRAINER, "TrainJob")]
    fake_k8s.serve_schema(TRAINER, "TrainJob", schema)
    assert trainjob_generation(KubeClient.connect()) == generation


@pytest.mark.parametrize(("release", "legacy"), [("v0.15.2", True), ("v0.20.0", False)])
def test_the_kserve_naming_comes_from_the_served_schema(fake_k8s, crd_schemas_at, release, legacy):
    schema = crd_schemas_at("kserve", release)[(KSERVE, "InferenceService")]
    fake_k8s.serve_schema(KSERVE, "InferenceService", schema)
    assert kserve_uses_legacy_names(KubeClient.connect()) is legacy


def test_a_missing_schema_is_a_clear_error(fake_k8s):
    # Trainer's group is served, but its OpenAPI document has no TrainJob in it.
    fake_k8s.serve_schema(TRAINER, "ClusterTrainingRuntime", {"type": "object"})
    with pytest.raises(ClusterMismatch) as error:
        trainjob_generation(KubeClient.connect())
    assert str(error.value) == "the API server publishes no schema for TrainJob"
    spec = {"type": "object", "properties": {"runtimeRef": {"type": "object"}}}
    fake_k8s.serve_schema(TRAINER, "TrainJob", {"type": "object", "properties": {"spec": spec}})
    with pytest.raises(ClusterMismatch) as error:
        trainjob_generation(KubeClient.connect())
    assert str(error.value) == (
        "the served TrainJob schema has neither runtimePatches nor podTemplateOverrides"
    )


@pytest.mark.parametrize(
    ("served", "version"),
    [
        (["v1beta1", "v1beta2"], "v1beta2"),  # Kueue v0.19.2: v1beta1 served but deprecated
        (["v1beta1"], "v1beta1"),  # Kueue before v1beta2
        ([], "v1beta2"),  # no Kueue: the newest, whose 404 the caller reports
    ],
)
def test_kueue_kinds_are_read_at_the_newest_version_served(fake_k8s, served, version):
    fake_k8s.served = {f"kueue.x-k8s.io/{v}": ["localqueues", "workloads"] for v in served}
    kube = KubeClient.connect()
    assert kueue_resource(kube, WORKLOAD).api_version == f"kueue.x-k8s.io/{version}"
    assert kueue_resource(kube, LOCALQUEUE).plural == "localqueues"
    fake_k8s.served = {}  # asked once per client: a waiting launcher polls without discovery
    assert kueue_resource(kube, WORKLOAD).api_version == f"kueue.x-k8s.io/{version}"
