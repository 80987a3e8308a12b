"""The real nodes' storage: local PersistentVolumes, each a fresh folder of this machine.

Both real nodes are this machine, so each volume's folder is there for both, the way a
shared filesystem (NFS, CephFS) is for every node it is exported to: a volume's node
affinity names both, and a job's ranks on two nodes mount one workspace.
"""

from __future__ import annotations

from harness.node import NAMES, NODES

VOLUMES = NODES[0].state_dir / "volumes"

STORAGE_CLASS = "fmnist-local"


def local_volumes(count: int, size: str = "50Gi") -> list[dict]:
    """A StorageClass of local volumes on the real nodes and ``count`` fresh volumes in it.

    Each volume is a folder owned by root, mode 0755, like the root of a fresh block volume:
    a pod writes it as a non-root user only if the kubelet applies its fsGroup (the local
    volume plugin does: k8s.io/kubernetes v1.36.3 pkg/volume/local/local.go SetUpAt).
    """
    objects = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            # Bound at once (every node has it): a test sees the folder before any pod runs.
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        }
    ]
    for index in range(count):
        path = VOLUMES / f"pv-{index:02d}"
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"real-pv-{index:02d}"},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORAGE_CLASS,
                    "local": {"path": str(path)},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": list(NAMES),
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
    return objects
