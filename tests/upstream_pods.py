"""What upstream controllers add to our pods, and the kubelet's runAsNonRoot check, in Python.

Each function transcribes the upstream code it names, so that a default-tier test can build
the pod a real node receives from a pod template of ours and check it as the kubelet would:

- the Training Operator's ``init-pytorch`` init container on every Worker
  (kubeflow/training-operator v1.9.4 ``pkg/controller.v1/pytorch/initcontainer.go``);
- Katib's StdOut metrics collector on a trial's primary pod (kubeflow/katib v0.19.0
  ``pkg/webhook/v1beta1/pod/inject_webhook.go`` and ``utils.go``);
- the kubelet's refusal of a container that must not run as root but would
  (k8s.io/kubernetes v1.36.3 ``pkg/kubelet/kuberuntime/security_context_others.go``,
  ``verifyRunAsNonRoot``, on ``pkg/securitycontext/util.go``,
  ``DetermineEffectiveSecurityContext``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# training-operator v1.9.4 pkg/config/config.go: PyTorchInitContainerImageDefault and
# PyTorchInitContainerMaxTriesDefault.
INIT_PYTORCH_IMAGE = "alpine:3.10"
INIT_PYTORCH_MAX_TRIES = 100
# The built-in template of initcontainer.go (its `initContainerTemplate`), as the Go template
# it is (the command's one line folded here): no securityContext, so the container runs as
# the image's user.
DEFAULT_INIT_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits: {cpu: 100m, memory: 20Mi}
    requests: {cpu: 50m, memory: 10Mi}
  command:
    - sh
    - -c
    - >-
      err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break;
      fi;echo waiting for master; sleep 2; done; exit $err
"""
# katib v0.19.0 manifests/v1beta1/installs/katib-standalone/katib-config.yaml (also Kubeflow
# 1.10/1.11's): the StdOut collector's image, built FROM alpine:3.15 with no USER
# (cmd/metricscollector/v1beta1/file-metricscollector/Dockerfile).
KATIB_COLLECTOR_IMAGE = "ghcr.io/kubeflow/katib/file-metrics-collector:v0.19.0"
KATIB_COLLECTOR = "metrics-logger-and-collector"  # pkg/metricscollector/v1beta1/common/const.go
KATIB_METRICS_DIR = "/var/log/katib"  # common_types.go DefaultFilePath's directory


def image_user(dockerfile: Path) -> int:
    """The numeric user a Dockerfile's final stage runs as (0 when it sets no USER)."""
    stages = re.split(r"(?m)^FROM\s", dockerfile.read_text())
    users = re.findall(r"(?m)^USER\s+(\d+)", stages[-1])
    return int(users[-1]) if users else 0


def image_users(trainer_image: str, serving_image: str | None = None) -> dict[str, int]:
    """Each image a pod of ours may run, by name, with the user it runs as."""
    users = {
        trainer_image: image_user(REPO / "images" / "trainer.Dockerfile"),
        INIT_PYTORCH_IMAGE: 0,  # alpine's default user
        KATIB_COLLECTOR_IMAGE: 0,
    }
    if serving_image:
        users[serving_image] = image_user(REPO / "images" / "serving.Dockerfile")
    return users


def init_containers(template: str, master_addr: str, image: str = INIT_PYTORCH_IMAGE) -> list:
    """``GetInitContainer``: the template with its three fields filled in, read as YAML."""
    values = {
        "MasterAddr": master_addr,
        "InitContainerImage": image,
        "MaxTries": str(INIT_PYTORCH_MAX_TRIES),
    }
    filled = re.sub(r"{{\s*\.(\w+)\s*}}", lambda found: values[found[1]], template)
    return yaml.safe_load(filled)


def worker_pod(template_spec: dict, job_name: str, template: str = DEFAULT_INIT_TEMPLATE) -> dict:
    """``setInitContainer``: a Worker's pod spec, the init containers appended."""
    pod = copy.deepcopy(template_spec)
    master = f"{job_name}-master-0"  # replicaName(job, Master, 0)
    pod["initContainers"] = [*pod.get("initContainers", []), *init_containers(template, master)]
    return pod


def katib_primary_pod(
    template_spec: dict, primary: str, inject_security_context: bool = False
) -> dict:
    """``Mutate`` for the StdOut collector: a trial's primary pod spec as the webhook leaves it.

    The sidecar gets a copy of the first container's securityContext only when katib-config
    sets ``init.controller.injectSecurityContext`` (default false); the pod shares one
    process namespace; the collector and the primary container share an emptyDir at
    /var/log/katib, and the primary container's command is wrapped in ``sh -c``.
    """
    pod = copy.deepcopy(template_spec)
    mount = {"name": "metrics-volume", "mountPath": KATIB_METRICS_DIR}
    sidecar = {"name": KATIB_COLLECTOR, "image": KATIB_COLLECTOR_IMAGE, "volumeMounts": [mount]}
    first = pod["containers"][0]
    if inject_security_context and "securityContext" in first:
        sidecar["securityContext"] = copy.deepcopy(first["securityContext"])
    for container in pod["containers"]:
        if container["name"] == primary:
            command = [*container.get("command", []), *container.get("args", [])]
            container["command"] = ["sh", "-c"]
            container["args"] = [" ".join([*command, f"1>{KATIB_METRICS_DIR}/metrics.log 2>&1"])]
            container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    pod["containers"].append(sidecar)
    pod["volumes"] = [*pod.get("volumes", []), {"name": "metrics-volume", "emptyDir": {}}]
    pod["shareProcessNamespace"] = True
    return pod


def effective_context(pod: dict, container: dict) -> dict:
    """``DetermineEffectiveSecurityContext``: the pod's user settings, the container's on top."""
    pod_context = pod.get("securityContext", {})
    shared = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "seLinuxOptions")
    effective = {key: pod_context[key] for key in shared if key in pod_context}
    effective.update(container.get("securityContext", {}))
    return effective


def kubelet_refusals(pod: dict, users: dict[str, int]) -> list[str]:
    """``verifyRunAsNonRoot`` for every container: the kubelet's errors, one per refused one.

    ``users`` maps each image to the numeric user it runs as.
    """
    refused = []
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        context = effective_context(pod, container)
        if not context.get("runAsNonRoot"):
            continue
        name = container["name"]
        if context.get("runAsUser") == 0:
            refused.append(f"container's runAsUser breaks non-root policy: {name}")
        elif "runAsUser" not in context and users[container["image"]] == 0:
            refused.append(f"container has runAsNonRoot and image will run as root: {name}")
    return refused
