"""One real node: containerd v2 with runc, the bridge CNI and a kubelet, beside kwok's nodes.

Pods bound here run in real containers of images built on this machine (harness/images.py):
the kubelet (k8s.io/kubernetes cmd/kubelet, the tier's own release) talks CRI to containerd
(github.com/containerd/containerd/v2 cmd/containerd), which starts each container with
Debian's runc, in its own network namespace on a bridge (Debian's containernetworking-plugins).

The node carries the taint ``fmnist.dev/real-node=true:NoSchedule`` and the label
``fmnist.dev/node=real``, so that no kwok-played test lands on it by chance. A namespace whose
pods must run for real says so the way a cluster admin pins a namespace to a node pool: the
PodNodeSelector and PodTolerationRestriction admission plugins' annotations
(``REAL_NAMESPACE_ANNOTATIONS``), which the apiserver applies to every pod created there,
whoever creates it (a controller, a webhook-mutated pod, a test).

Where things live: sockets and runtime state under ``/run/fmnist-node`` (short unix socket
paths), the kubelet's root and the local volumes under ``/var/lib/fmnist-node``, containerd's
image store in the machine cache (``CACHE/containerd``) so that images survive a fresh clone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from harness.image_transfer import import_images as transfer
from harness.images import ImageSet
from harness.paths import BIN, CACHE, LOGS, PIDS, RUN
from harness.processes import Process, run, terminate, wait_for

NAME = "real-node-1"
LABEL = ("fmnist.dev/node", "real")
TAINT = {"key": "fmnist.dev/real-node", "value": "true", "effect": "NoSchedule"}
REAL_NAMESPACE_ANNOTATIONS = {
    # k8s.io/kubernetes v1.36.3 plugin/pkg/admission/podnodeselector/admission.go
    "scheduler.alpha.kubernetes.io/node-selector": f"{LABEL[0]}={LABEL[1]}",
    # plugin/pkg/admission/podtolerationrestriction/admission.go
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    ),
}
RUN_DIR = Path("/run/fmnist-node")
STATE_DIR = Path("/var/lib/fmnist-node")
KUBELET_ROOT = STATE_DIR / "kubelet"
VOLUMES = STATE_DIR / "volumes"
CONTAINERD_ROOT = CACHE / "containerd"
SOCKET = RUN_DIR / "containerd.sock"
POD_SUBNET, POD_GATEWAY, BRIDGE = "10.88.0.0/16", "10.88.0.1", "fmnist0"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
RUNC = Path("/usr/sbin/runc")  # Debian's runc (crun fails on this kernel's hybrid cgroups)


def ctr(*args: str) -> str:
    """Run ctr against the node's containerd, in the CRI's namespace; return its output."""
    return run([str(BIN / "ctr"), "--address", str(SOCKET), "-n", "k8s.io", *args], capture=True)


def node_ip() -> str:
    """The address of the interface the default route leaves by (what a node reports)."""
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "default"], capture=True))
    device = routes[0]["dev"]
    (info,) = json.loads(run(["ip", "-j", "-4", "addr", "show", "dev", device], capture=True))
    return info["addr_info"][0]["local"]


def _cni_config() -> dict:
    """A bridge network with host-local addresses; the host is every pod's gateway."""
    return {
        "cniVersion": "1.0.0",
        "name": "fmnist-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(RUN_DIR / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _containerd_config(sandbox_image: str) -> str:
    """The config of containerd v2 (version 3): runc by path, our CNI, the sandbox image built here.

    ``restrict_oom_score_adj``: runc cannot lower its own oom_score_adj here ("failed to
    update /proc/self/oom_score_adj: Permission denied"), so containerd must not ask it to
    (internal/cri/config/config.go, v2.4.2).
    """
    return f"""version = 3
root = "{CONTAINERD_ROOT}"
state = "{RUN_DIR / "containerd"}"

[grpc]
  address = "{SOCKET}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{RUN_DIR / "net.d"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
"""


def _kubelet_config(dns_ip: str, ca: Path) -> dict:
    """The kubelet's configuration: cgroupfs on cgroup v1, webhook auth, cluster DNS, taint."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this kernel mounts cgroup v1 hierarchies
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [dns_ip],
        "clusterDomain": "cluster.local",
        "registerWithTaints": [TAINT],
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


def _client_certificate(ca_dir: Path) -> tuple[Path, Path]:
    """A client certificate for system:node:NAME (group system:nodes), signed by the tier's CA.

    The Node authorizer and NodeRestriction admission then treat the kubelet as on a cluster.
    """
    folder = RUN_DIR / "pki"
    folder.mkdir(parents=True, exist_ok=True)
    key, csr, crt = folder / "kubelet.key", folder / "kubelet.csr", folder / "kubelet.crt"
    run(["openssl", "genrsa", "-out", str(key), "2048"])
    subject = f"/O=system:nodes/CN=system:node:{NAME}"
    run(["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)])
    run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt")]
        + ["-CAkey", str(ca_dir / "ca.key"), "-CAcreateserial", "-days", "30", "-out", str(crt)]
    )
    return crt, key


def _kubeconfig(crt: Path, key: Path, ca: Path, server: str) -> Path:
    """The kubelet's kubeconfig: its own client certificate."""
    path = RUN_DIR / "kubelet.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tier", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": NAME, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "node", "context": {"cluster": "tier", "user": NAME}}],
        "current-context": "node",
    }
    path.write_text(json.dumps(config))
    return path


def start_containerd(sandbox: str, bin_dir: Path = BIN) -> int:
    """Start the node's containerd (its binaries in ``bin_dir``); its pid once it serves."""
    for folder in (RUN_DIR / "net.d", RUN_DIR / "ipam", CONTAINERD_ROOT):
        folder.mkdir(parents=True, exist_ok=True)
    (RUN_DIR / "net.d" / "10-fmnist.conflist").write_text(json.dumps(_cni_config(), indent=1))
    config = RUN_DIR / "containerd.toml"
    config.write_text(_containerd_config(sandbox))
    containerd = Process("containerd", [str(bin_dir / "containerd"), "--config", str(config)])
    containerd.env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}  # finds its shim
    pid = containerd.start()
    wait_for("containerd to serve", lambda: _containerd_up(bin_dir), 60, "containerd")
    return pid


def preload(images: ImageSet, sandbox: str, bin_dir: Path) -> None:
    """Import ``images`` into the node's image store now, with no node running.

    ``cluster.py build`` does this beside the Go builds, so that cluster-up finds the 7 GB
    of our images already unpacked. A containerd already serving (a cluster is up) is used.
    """
    if _containerd_up(bin_dir):
        import_images(images, bin_dir)
        return
    for folder in (LOGS, PIDS, RUN):
        folder.mkdir(parents=True, exist_ok=True)
    pid = start_containerd(sandbox, bin_dir)
    try:
        import_images(images, bin_dir)
    finally:
        terminate([pid], 15)
        (PIDS / "containerd.pid").unlink(missing_ok=True)
        shutil.rmtree(RUN_DIR, ignore_errors=True)


def start(
    ca_dir: Path, server: str, dns_ip: str, images: tuple[ImageSet, ...], sandbox: str
) -> dict:
    """Start containerd (importing ``images``) and the kubelet; return their pids by name."""
    for folder in (KUBELET_ROOT, VOLUMES):
        folder.mkdir(parents=True, exist_ok=True)
    pids = {"containerd": start_containerd(sandbox)}
    for image_set in images:
        import_images(image_set)
    crt, key = _client_certificate(ca_dir)
    kubelet_config = RUN_DIR / "kubelet.yaml"
    kubelet_config.write_text(json.dumps(_kubelet_config(dns_ip, ca_dir / "ca.crt")))
    kubelet = Process(
        "kubelet",
        [
            str(BIN / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={_kubeconfig(crt, key, ca_dir / 'ca.crt', server)}",
            f"--root-dir={KUBELET_ROOT}",
            f"--cert-dir={RUN_DIR / 'pki'}",
            f"--hostname-override={NAME}",
            f"--node-ip={node_ip()}",
            f"--node-labels={LABEL[0]}={LABEL[1]}",
            "--v=1",
        ],
    )
    pids["kubelet"] = kubelet.start()
    return pids


def _containerd_up(bin_dir: Path = BIN) -> bool:
    """Whether containerd answers on its socket."""
    if not SOCKET.exists():
        return False
    result = subprocess.run(
        [str(bin_dir / "ctr"), "--address", str(SOCKET), "version"],
        capture_output=True,
        timeout=10,
    )
    return result.returncode == 0


def import_images(images: ImageSet, bin_dir: Path = BIN) -> None:
    """Bring a set of images into the node's containerd (harness/image_transfer.py)."""
    transfer(images, [str(bin_dir / "ctr"), "--address", str(SOCKET)], CONTAINERD_ROOT)


def stop() -> None:
    """Stop the kubelet, every pod's containers and sandboxes, containerd; undo mounts, links."""
    pid_file = PIDS / "kubelet.pid"
    if pid_file.exists():
        terminate([int(pid_file.read_text())], 15)
        pid_file.unlink()
    if (PIDS / "containerd.pid").exists() and _containerd_up():
        _remove_containers()
    shims = subprocess.run(
        ["pgrep", "-f", f"containerd-shim-runc-v2 .*{SOCKET}"], capture_output=True, text=True
    ).stdout.split()
    terminate([int(pid) for pid in shims], 10)
    if (PIDS / "containerd.pid").exists():
        terminate([int((PIDS / "containerd.pid").read_text())], 15)
        (PIDS / "containerd.pid").unlink()
    _unmount_under(KUBELET_ROOT)
    _unmount_under(RUN_DIR)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)


def _remove_containers() -> None:
    """Kill every task in the CRI namespace and remove its container (sandboxes included)."""
    tasks = ctr("tasks", "list", "-q").split()
    for task in tasks:
        _ctr_quietly("tasks", "kill", "-s", "SIGKILL", task)
    deadline = time.monotonic() + 15
    while ctr("tasks", "list", "-q").split() and time.monotonic() < deadline:
        for task in tasks:
            _ctr_quietly("tasks", "delete", task)
        time.sleep(0.5)
    for container in ctr("containers", "list", "-q").split():
        _ctr_quietly("containers", "delete", container)


def _ctr_quietly(*args: str) -> None:
    """Run ctr in the CRI namespace; a task or container already gone is fine."""
    command = [str(BIN / "ctr"), "--address", str(SOCKET), "-n", "k8s.io", *args]
    subprocess.run(command, capture_output=True)


def _unmount_under(folder: Path) -> None:
    """Unmount whatever is mounted under ``folder``, deepest first (volumes, netns, shm)."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = [m for m in mounts if m == str(folder) or m.startswith(str(folder) + "/")]
    for mount in sorted(inside, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def ready_check(api) -> bool:
    """Whether the real node reports Ready."""
    status, node = api.call("GET", f"/api/v1/nodes/{NAME}")
    if status != 200:
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_ready(api) -> None:
    """Wait until the node is Ready (the kubelet registered and its runtime and network are)."""
    wait_for(f"node {NAME} to be Ready", lambda: ready_check(api), 120, "kubelet")
