"""The manager's side of MultiKueue: a Secret per worker with its kubeconfig, as an admin makes it.

k8s/kueue/multikueue's MultiKueueClusters read key ``kubeconfig`` of the Secret
``<worker>-kubeconfig`` in kueue-system. Kueue v0.19.2 refuses a kubeconfig that points at
certificate files (``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``
``validateKubeconfig``), so kwokctl's admin kubeconfig, which does, goes in with the files'
contents inline. The worker's apiserver serves 127.0.0.1, where Kueue (on this machine) reaches
it.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from harness import workers

NAMESPACE = "kueue-system"  # Kueue's own namespace (k8s/kueue/config), where it reads Secrets
INLINE = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
}


def inline(kubeconfig: dict) -> dict:
    """The kubeconfig with every certificate file replaced by its contents."""
    for entry in kubeconfig.get("clusters", []) + kubeconfig.get("users", []):
        fields = entry.get("cluster") or entry.get("user") or {}
        for file_key, data_key in INLINE.items():
            if file_key in fields:
                data = Path(fields.pop(file_key)).read_bytes()
                fields[data_key] = base64.b64encode(data).decode()
    return kubeconfig


def kubeconfig_secret(worker: str) -> dict:
    """The Secret the worker's MultiKueueCluster reads."""
    kubeconfig = inline(yaml.safe_load(workers.kubeconfig(worker).read_text()))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{worker}-kubeconfig", "namespace": NAMESPACE},
        "stringData": {"kubeconfig": yaml.safe_dump(kubeconfig)},
    }
