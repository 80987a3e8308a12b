"""What a real node's programs read: their configurations and client certificates.

containerd's, the CNI's, the kubelet's and kube-proxy's configuration, and the client
certificates of the kubelet and kube-proxy.

Pure functions of a node (harness/node.py ``RealNode``) but for the certificates, which
openssl writes into the node's run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.processes import run

CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
RUNC = Path("/usr/sbin/runc")  # Debian's runc (crun fails on this kernel's hybrid cgroups)
CLUSTER_CIDR = "10.88.0.0/15"  # every real node's pod subnet lies in it
# Each node keeps half a core for itself, as a node reserves for its system daemons: 1.5 CPU
# allocatable, so two 1-CPU ranks of a job land on two nodes.
SYSTEM_RESERVED = {"cpu": "500m", "memory": "1Gi"}


def cni_config(node) -> dict:
    """A bridge network with host-local addresses; the node is every pod's gateway."""
    return {
        "cniVersion": "1.0.0",
        "name": "fmnist-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": True,  # to the world; not between pods (node_network.py)
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.run_dir / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(node, sandbox_image: str) -> str:
    """The config of containerd v2 (version 3): runc by path, the CNI, registry mirrors.

    ``restrict_oom_score_adj``: runc cannot lower its own oom_score_adj here ("failed to
    update /proc/self/oom_score_adj: Permission denied"), so containerd must not ask it to
    (internal/cri/config/config.go, v2.4.2). runc keeps each node's container state apart
    (``Root``); images come through the tier's registry (``config_path``, harness/registry.py).
    """
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = "{node.containerd_root}"
state = "{node.run_dir / "containerd"}"

[grpc]
  address = "{node.socket}"

[{runtime}]
  restrict_oom_score_adj = true
  enable_selinux = false
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        Root = "{node.run_dir / "runc"}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{node.run_dir / "net.d"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{node.hosts_dir}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
"""


def kubelet_config(node, dns_ip: str, ca: Path, taint: dict) -> dict:
    """The kubelet's configuration: cgroupfs on cgroup v1, webhook auth, cluster DNS, taint.

    Two kubelets share this machine, so each keeps its own cgroup root and pod log folder: a
    kubelet removes the pod cgroups and log folders of pods it does not know
    (k8s.io/kubernetes v1.36.3 pkg/kubelet/kubelet_pods.go cleanupOrphanedPodCgroups,
    pkg/kubelet/kuberuntime/kuberuntime_gc.go evictPodLogsDirectories).
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this kernel mounts cgroup v1 hierarchies
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "podLogsDir": str(node.pod_logs),
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [dns_ip],
        "clusterDomain": "cluster.local",
        "registerWithTaints": [taint],
        "systemReserved": SYSTEM_RESERVED,
        "failSwapOn": False,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "serializeImagePulls": False,
        # A shared CI machine: never evict or garbage-collect images because the disk fills.
        "evictionHard": {"nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 40,
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
    }


def kube_proxy_config(node, kubeconfig: Path) -> dict:
    """kube-proxy in iptables mode for this node's network; it leaves sysctls alone.

    Conntrack settings of 0 keep the kernel's (k8s.io/kube-proxy v0.36.3 config/v1alpha1):
    this container may not write them.
    """
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "bindAddress": node.address,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def client_certificate(ca_dir: Path, folder: Path, name: str, subject: str) -> tuple[Path, Path]:
    """A client certificate for ``subject``, signed by the tier's CA.

    The kubelet's is ``/O=system:nodes/CN=system:node:NAME`` (the Node authorizer and
    NodeRestriction then treat it as on a cluster), kube-proxy's ``/CN=system:kube-proxy``
    (bound to ClusterRole system:node-proxier by the apiserver's bootstrap policy).
    """
    folder.mkdir(parents=True, exist_ok=True)
    key, csr, crt = (folder / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    run(["openssl", "genrsa", "-out", str(key), "2048"])
    run(["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)])
    run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt")]
        + ["-CAkey", str(ca_dir / "ca.key"), "-CAcreateserial", "-days", "30", "-out", str(crt)]
    )
    return crt, key


def kubeconfig(path: Path, user: str, cert: tuple[Path, Path], ca: Path, server: str) -> Path:
    """A kubeconfig for ``user`` with its client certificate."""
    crt, key = cert
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tier", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "node", "context": {"cluster": "tier", "user": user}}],
        "current-context": "node",
    }
    path.write_text(json.dumps(config))
    return path
