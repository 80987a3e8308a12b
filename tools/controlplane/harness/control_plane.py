"""etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, run by kwokctl.

kwokctl's "binary" runtime (sigs.k8s.io/kwok pkg/kwokctl/runtime/binary) starts our own
binaries as local processes and writes the certificates and the admin kubeconfig.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import yaml

from harness import api_service
from harness.dns import SERVICE_RANGE
from harness.paths import BIN, CLUSTER, CONFIG, KUBECONFIG, KWOK_WORKDIR, LOGS, RUN
from harness.processes import alive, log_tail, wait_for, wait_gone


def kubectl(*args: str, stdin: str | None = None) -> str:
    """Run kubectl with the admin kubeconfig; return stdout, exit with its output on failure."""
    command = ["kubectl", f"--kubeconfig={KUBECONFIG}", *args]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(
            f"kubectl {' '.join(args)} failed:\n{(result.stdout + result.stderr)[-4000:]}"
        )
    return result.stdout


def kwok_env() -> dict[str, str]:
    """The environment of kwokctl: its work folder is build/cluster/kwok."""
    return {**os.environ, "KWOK_WORKDIR": str(KWOK_WORKDIR)}


def fake_nodes() -> list[dict]:
    """The nodes kwok plays in every cluster of the tier (tools/controlplane/config/nodes.yaml)."""
    return list(yaml.safe_load_all((CONFIG / "nodes.yaml").read_text()))


def kwok_cluster_dir(name: str = CLUSTER) -> Path:
    """The folder kwokctl keeps a cluster in: kwokctl.yaml, pki/, pids/, logs/, etcd data."""
    return KWOK_WORKDIR / "clusters" / name


def _kwokctl_config(name: str, apiserver_args: list[dict]) -> dict:
    """Our binaries, loopback only, RBAC and admission on, kwok's log CRDs.

    The main cluster's apiserver also gets what the real node needs; another cluster's gets
    ``apiserver_args`` only.
    """
    pki = kwok_cluster_dir(name) / "pki"  # what kwokctl creates
    patches = _component_patches(pki)
    if name != CLUSTER:
        patches = [patch for patch in patches if patch["name"] != "kube-apiserver"]
        if apiserver_args:
            patches.append({"name": "kube-apiserver", "extraArgs": apiserver_args})
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",  # apiserver, kwok's kubelet API: loopback only
            "kubeApiserverBinary": str(BIN / "kube-apiserver"),
            "kubeControllerManagerBinary": str(BIN / "kube-controller-manager"),
            "kubeSchedulerBinary": str(BIN / "kube-scheduler"),
            "kwokControllerBinary": str(BIN / "kwok"),
            "etcdBinary": str(BIN / "etcd"),
            "kubectlBinary": shutil.which("kubectl"),
            "kubeAuthorization": True,  # --authorization-mode=Node,RBAC
            "kubeAdmission": True,  # the apiserver's default admission plugins, webhooks included
            "enableCRDs": ["Logs", "ClusterLogs"],  # pod logs are kwok objects tests can create
            # Pods reach the API at the kubernetes Service's ClusterIP (harness/api_service.py).
            "kubeApiserverCertSANs": [api_service.CLUSTER_IP],
        },
        "componentsPatches": patches,
    }


def _component_patches(pki: Path) -> list[dict]:
    """The flags kwokctl's components get beyond its own."""
    return [
        # Throwaway data: etcd need not wait for the disk on every write.
        {"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]},
        # One instance each: without leader election they ride out a kube-apiserver
        # restart (with it they exit once they cannot renew the lease, and nothing
        # restarts them).
        {"name": "kube-scheduler", "extraArgs": [{"key": "leader-elect", "value": "false"}]},
        # The real node's pods (harness/node.py): a Service range holding CoreDNS's
        # address, and the admission plugins that pin a namespace's pods to the node.
        {
            "name": "kube-apiserver",
            "extraArgs": [
                {"key": "service-cluster-ip-range", "value": SERVICE_RANGE},
                {
                    "key": "enable-admission-plugins",
                    "value": "PodNodeSelector,PodTolerationRestriction",
                },
                # Logs and exec reach the real kubelet at its address, as admin (kwok's
                # nodes have only a Hostname: localhost, where kwok serves them).
                {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"},
                {"key": "kubelet-client-certificate", "value": str(pki / "admin.crt")},
                {"key": "kubelet-client-key", "value": str(pki / "admin.key")},
            ],
        },
        # kwok plays its own nodes only (kwokctl's binary runtime passes
        # --manage-all-nodes=true; the last flag wins), never the real node's pods. Its
        # nodes get an InternalIP, where it serves their logs: with only a Hostname, kwok's
        # node-initialize stage, which runs again whenever a node is not Ready, writes
        # `addresses:` empty (kwok v0.8.0 kustomize/stage/node/fast/node-initialize.yaml),
        # and the apiserver then answers every log request for its pods with a 500.
        {
            "name": "kwok-controller",
            "extraArgs": [
                {"key": "node-ip", "value": "127.0.0.1"},
                {"key": "manage-all-nodes", "value": "false"},
                {
                    "key": "manage-nodes-with-annotation-selector",
                    "value": "kwok.x-k8s.io/node=fake",
                },
            ],
        },
        # Kubernetes' own node monitoring: kwokctl multiplies both by 5 for kwok's many fake
        # nodes (kwok v0.8.0 pkg/kwokctl/cmd/create/cluster/cluster.go mutationHeartbeat),
        # which would leave a lost real node Ready for 3m20s. kwok renews its nodes' leases
        # every 10 s (pkg/kwok/controllers/controller.go: a quarter of their 40 s).
        {
            "name": "kube-controller-manager",
            "extraArgs": [
                {"key": "leader-elect", "value": "false"},
                {"key": "node-monitor-grace-period", "value": "50s"},
                {"key": "node-monitor-period", "value": "5s"},
            ],
        },
    ]


def _log_prefix(name: str) -> str:
    """The prefix of a cluster's logs in build/cluster/logs ("worker-1-" for fmnist-worker-1)."""
    return "" if name == CLUSTER else f"{name.removeprefix(f'{CLUSTER}-')}-"


def start_control_plane(
    stage_files: list[Path],
    name: str = CLUSTER,
    kubeconfig: Path = KUBECONFIG,
    apiserver_args: tuple[dict, ...] = (),
) -> None:
    """Kwokctl create cluster --runtime binary with our binaries and kwok's pod stages."""
    path = RUN / f"kwokctl-{name}.yaml"
    path.write_text(yaml.safe_dump(_kwokctl_config(name, list(apiserver_args))))
    command = [str(BIN / "kwokctl")]
    for config_file in [path, *stage_files]:
        command += ["--config", str(config_file)]
    command += ["create", "cluster", "--name", name, "--timeout", "120s"]
    command += ["--kubeconfig", str(kubeconfig)]
    result = subprocess.run(command, env=kwok_env(), capture_output=True, text=True)
    (LOGS / f"{_log_prefix(name)}kwokctl.log").write_text(result.stdout + result.stderr)
    logs = kwok_cluster_dir(name) / "logs"
    if result.returncode:
        tails = "\n".join(f"--- {p.name}\n{log_tail(p, 15)}" for p in logs.glob("*.log"))
        raise SystemExit(f"kwokctl create cluster failed:\n{result.stdout}{result.stderr}\n{tails}")
    for log in logs.glob("*.log"):
        link = LOGS / f"{_log_prefix(name)}{log.name}"
        link.unlink(missing_ok=True)
        link.symlink_to(log)


def stop_control_plane(name: str = CLUSTER) -> None:
    """Kwokctl delete cluster, then stop whatever it left; keep its logs in logs/control-plane."""
    if not kwok_cluster_dir(name).exists():
        return
    saved = LOGS / f"{_log_prefix(name)}control-plane"
    shutil.rmtree(saved, ignore_errors=True)
    if (kwok_cluster_dir(name) / "logs").exists():
        shutil.copytree(kwok_cluster_dir(name) / "logs", saved)
    for link in LOGS.glob(f"{_log_prefix(name)}*.log"):
        if link.is_symlink() and link.resolve().is_relative_to(kwok_cluster_dir(name)):
            link.unlink()
    kwok_pids = [int(p.read_text()) for p in (kwok_cluster_dir(name) / "pids").glob("*.pid")]
    if (BIN / "kwokctl").exists():
        subprocess.run(
            [str(BIN / "kwokctl"), "delete", "cluster", "--name", name],
            env=kwok_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    for pid in kwok_pids:  # whatever kwokctl did not stop
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
    wait_gone(kwok_pids, 15)
    shutil.rmtree(kwok_cluster_dir(name), ignore_errors=True)


def apiserver_pid() -> int | None:
    """The kube-apiserver's pid, from kwokctl's pid file."""
    path = kwok_cluster_dir() / "pids" / "kube-apiserver.pid"
    return int(path.read_text()) if path.exists() else None


def stop_apiserver(grace: float = 5) -> None:
    """Stop the kube-apiserver: SIGTERM, SIGKILL after ``grace`` seconds; wait until gone.

    Its graceful shutdown waits for open requests (watches, followed logs) and can take
    tens of seconds, hence the short grace. The pid file goes too: kwokctl takes a pid
    that still exists (a zombie not yet reaped) for a running component and would not
    start it again.
    """
    path = kwok_cluster_dir() / "pids" / "kube-apiserver.pid"
    pid = apiserver_pid()
    if pid and alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_gone([pid], grace)
    path.unlink(missing_ok=True)


def start_apiserver(timeout: float = 60) -> None:
    """Start what kwokctl runs and is not running (the kube-apiserver), wait until it serves.

    `kwokctl start cluster` starts each component whose pid is not running, with the flags
    it was created with (sigs.k8s.io/kwok pkg/kwokctl/runtime/binary/cluster_operation.go).
    """
    result = subprocess.run(
        [str(BIN / "kwokctl"), "start", "cluster", "--name", CLUSTER],
        env=kwok_env(),
        capture_output=True,
        text=True,
        timeout=timeout + 60,
    )
    if result.returncode:
        raise SystemExit(f"kwokctl start cluster failed:\n{result.stdout}{result.stderr}")
    wait_for("the kube-apiserver to serve", readyz_apiserver, timeout, "kube-apiserver")


def readyz_apiserver() -> bool:
    """Whether the kube-apiserver answers /readyz."""
    try:
        kubectl("get", "--raw", "/readyz")
        return True
    except SystemExit:
        return False
