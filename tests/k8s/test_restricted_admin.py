"""What a cluster admin applies so that trials and Workers run in a "restricted" namespace:
k8s/training-operator (a restricted init-pytorch) and k8s/katib (a restricted collector).

Both are checked on the pods they produce: a Worker of the train step's PyTorchJob with the
init container the Training Operator v1.9.4 builds from the shipped template, and a Katib
trial's primary pod as Katib v0.19.0's webhook mutates it with the shipped katib-config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from pss import violations
from upstream_pods import (
    DEFAULT_INIT_TEMPLATE,
    KATIB_COLLECTOR_IMAGE,
    image_users,
    init_containers,
    katib_primary_pod,
    kubelet_refusals,
    worker_pod,
)

from components.specs import katib_experiment
from components.specs.kinds import PYTORCHJOB_KIND
from components.specs.params import TrainingJob
from components.specs.pods import TrainerFlags, WorkPaths, workspace_placement
from components.specs.sweep import Sweep
from components.specs.training_job import training_job

K8S = Path(__file__).resolve().parents[2] / "k8s"
JOB = TrainingJob(trainer_cpu_image="trainer:1")
# The parts of training-operator v1.9.4 manifests/base/deployment.yaml the patch meets (as
# Kubeflow 1.10.2's apps/training-operator/upstream/base/deployment.yaml has them).
OPERATOR = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "training-operator"},
    "spec": {
        "selector": {"matchLabels": {"control-plane": "kubeflow-training-operator"}},
        "template": {
            "metadata": {"labels": {"control-plane": "kubeflow-training-operator"}},
            "spec": {
                "containers": [
                    {
                        "name": "training-operator",
                        "image": "ghcr.io/kubeflow/training-v1/training-operator",
                        "command": ["/manager"],
                        "volumeMounts": [
                            {
                                "name": "cert",
                                "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                                "readOnly": True,
                            }
                        ],
                    }
                ],
                "volumes": [
                    {"name": "cert", "secret": {"secretName": "training-operator-webhook-cert"}}
                ],
            },
        },
    },
}


def pytorchjob() -> dict:
    return training_job(
        "pytorchjob",
        name="fmnist-abc",
        namespace="team-a",
        job=JOB,
        flags=TrainerFlags.for_job(JOB, WorkPaths.under("/kfp-workspace")),
        placement=workspace_placement("run-1-kfp-workspace"),
    )


def worker_spec(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


@pytest.fixture(scope="module")
def operator_with_component(tmp_path_factory) -> list[dict]:
    """The operator's Deployment built with k8s/training-operator as a component."""
    root = tmp_path_factory.mktemp("training-operator")
    (root / "deployment.yaml").write_text(yaml.safe_dump(OPERATOR))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "kubeflow",
        "resources": ["deployment.yaml"],
        "components": [os.path.relpath(K8S / "training-operator", root)],  # kustomize: relative
    }
    (root / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl renders k8s/: install it (Debian: apt-get install kubernetes-client)"
    result = subprocess.run([kubectl, "kustomize", str(root)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_operator_reads_the_template_where_its_flag_looks_by_default(
    operator_with_component, validate_object
):
    """--pytorch-init-container-template-file defaults to /etc/config/initContainer.yaml
    (training-operator v1.9.4 pkg/config/config.go, cmd/training-operator.v1/main.go);
    a file it cannot read means the built-in template (initcontainer.go,
    getInitContainerTemplateOrDefault), so the mount must be exactly there."""
    (config_map,) = [obj for obj in operator_with_component if obj["kind"] == "ConfigMap"]
    (deployment,) = [obj for obj in operator_with_component if obj["kind"] == "Deployment"]
    for obj in operator_with_component:
        validate_object(obj)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["/manager"] and "args" not in container  # args untouched
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/config")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # the hashed name
    assert config_map["metadata"]["namespace"] == "kubeflow"
    assert list(config_map["data"]) == ["initContainer.yaml"]
    assert {v["name"] for v in pod["volumes"]} >= {"cert"}  # upstream's volumes kept


def test_with_the_shipped_template_a_worker_is_restricted(operator_with_component, validate_object):
    """The Worker pod with the init container built from the shipped template passes every
    "restricted" control and the kubelet's non-root check; with the built-in one it cannot."""
    (config_map,) = [obj for obj in operator_with_component if obj["kind"] == "ConfigMap"]
    template = config_map["data"]["initContainer.yaml"]
    (container,) = init_containers(template, "fmnist-abc-master-0")
    assert container["name"] == "init-pytorch" and container["image"] == "alpine:3.10"
    assert "nslookup fmnist-abc-master-0;" in container["command"][2]
    pod_object = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}}
    worker = worker_pod(worker_spec(pytorchjob()), "fmnist-abc", template)
    validate_object({**pod_object, "spec": worker})
    assert violations(worker) == []
    assert kubelet_refusals(worker, image_users("trainer:1")) == []
    upstream = worker_pod(worker_spec(pytorchjob()), "fmnist-abc", DEFAULT_INIT_TEMPLATE)
    assert any(line.endswith("init-pytorch must drop ALL") for line in violations(upstream))


def test_the_shipped_katib_config_makes_the_collector_restricted(render_kustomization):
    """k8s/katib: Katib v0.19.0's katib-config (its installs/katib-cert-manager, Kubeflow
    1.11.0's) with init.controller.injectSecurityContext, the StdOut collector's image as
    upstream's, and the job kinds the pipeline's trials use."""
    (config_map,) = render_kustomization(K8S / "katib")
    assert (config_map["metadata"]["name"], config_map["metadata"]["namespace"]) == (
        "katib-config",
        "kubeflow",
    )
    config = yaml.safe_load(config_map["data"]["katib-config.yaml"])
    assert config["kind"] == "KatibConfig"
    controller = config["init"]["controller"]
    assert controller["injectSecurityContext"] is True
    assert {"PyTorchJob.v1.kubeflow.org", "TrainJob.v1alpha1.trainer.kubeflow.org"} <= set(
        controller["trialResources"]
    )
    collectors = {item["kind"]: item["image"] for item in config["runtime"]["metricsCollectors"]}
    assert collectors["StdOut"] == KATIB_COLLECTOR_IMAGE
    template = katib_experiment.trial_template(Sweep(), PYTORCHJOB_KIND, trial_job())
    master = template["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    primary = katib_primary_pod(master, "pytorch", controller["injectSecurityContext"])
    assert violations(primary) == []


def trial_job() -> dict:
    job = pytorchjob()
    job["metadata"] = {"labels": job["metadata"]["labels"]}
    return job
