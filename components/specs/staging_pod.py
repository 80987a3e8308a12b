"""The pod that packs FashionMNIST onto a workspace PVC before ``fmnist sweep --apply``.

A sweep started from the shell has no pipeline step to stage its data, so this short pod
from the trainer image packs the data slice at ``train/data`` on the PVC, where every
trial reads it, unless a complete packed slice of the same size is there already. It
passes Pod Security Standards "restricted" like every pod we create.
"""

from __future__ import annotations

from components.specs.params import DataSlice
from components.specs.pods import (
    ISTIO_INJECT_LABEL,
    WORKSPACE_MOUNT_PATH,
    WORKSPACE_VOLUME,
    WorkPaths,
    container_security_context,
    pod_security_context,
    pvc_volume,
    resources,
    volume_mount,
)

# Packs into argv[1] unless a complete packed slice of the same size is there already.
STAGE_SCRIPT = """
import sys
from trainer.data import is_packed, load_packed, pack
out, train, test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if is_packed(out):
    data = load_packed(out)
    if (len(data.train), len(data.test)) == (train, test):
        print(f"{out} already holds {train} training and {test} test images"); sys.exit(0)
manifest = pack(out, train_limit=train, test_limit=test)
print(f"packed {manifest['counts']} into {out} from {manifest['source']}")
"""


def staging_pod(name: str, namespace: str, pvc: str, image: str, data: DataSlice) -> dict:
    """A pod that packs the data slice onto ``pvc`` at ``train/data``, restricted."""
    target = str(WorkPaths.under(WORKSPACE_MOUNT_PATH).data_dir)
    container = {
        "name": "stage",
        "image": image,
        "command": [
            "python",
            "-c",
            STAGE_SCRIPT,
            target,
            str(data.train_limit),
            str(data.test_limit),
        ],
        "resources": resources("1", "2Gi"),
        "securityContext": container_security_context(),
        "volumeMounts": [volume_mount(WORKSPACE_VOLUME, WORKSPACE_MOUNT_PATH)],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {ISTIO_INJECT_LABEL: "false"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": pod_security_context(),
            "automountServiceAccountToken": False,  # it copies files, it calls no API
            "containers": [container],
            "volumes": [pvc_volume(WORKSPACE_VOLUME, pvc)],
        },
    }
