#!/usr/bin/env python3
"""A real Kubernetes control plane with the Kubeflow controllers, on this machine, no containers.

    python tools/controlplane/cluster.py build  [--trainer v2.1.0|v2.3.0] [--kserve v0.15.2|v0.20.0]
    python tools/controlplane/cluster.py up     [same options]  # build what is missing, start
    python tools/controlplane/cluster.py down                    # stop everything
    python tools/controlplane/cluster.py status
    python tools/controlplane/cluster.py restart-apiserver [--down-seconds N]

Every component is built with ``go build`` from the module pinned in
``tools/controlplane/<component>/go.mod`` (the ``tool`` directives name the programs) into a
machine-level cache keyed by that go.mod/go.sum, ``${XDG_CACHE_HOME:-~/.cache}/fmnist-controlplane/
<component>-<hash>/``, together with the component's CRDs, webhook configurations and config
maps rendered with kustomize from the same module. ``up`` then

1. runs kwokctl's "binary" runtime (sigs.k8s.io/kwok pkg/kwokctl/runtime/binary) with our
   etcd, kube-apiserver (RBAC and the default admission plugins on), kube-controller-manager,
   kube-scheduler and kwok binaries; kwokctl makes the certificates and the admin kubeconfig;
2. applies the CRDs, the webhook configurations (each webhook's ``clientConfig`` rewritten to
   ``https://127.0.0.1:<port><path>`` with this harness's CA), the config maps and the fake
   nodes (config/nodes.yaml);
3. starts the controllers as local processes with the admin kubeconfig, each serving its
   webhooks with this harness's certificate, their own certificate rotators off where a flag
   or setting allows it (Training Operator v1 and Kueue keep theirs, fed a Secret holding
   this harness's certificate, which their rotators accept as valid);
4. waits until every controller answers its readiness probe and its webhook port over TLS,
   then applies what needs the webhooks (the torch-distributed ClusterTrainingRuntime) and
   kwok's ClusterLogs, and waits for the nodes to be Ready.

Files: build/cluster/kubeconfig (admin), build/cluster/logs/<component>.log,
build/cluster/state.json (ports, pids, versions), build/cluster/bin/ (links into the cache).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
import upstream  # noqa: E402  (tools/upstream.py)

BUILD = REPO / "build" / "cluster"
BIN, LOGS, RUN, PIDS = BUILD / "bin", BUILD / "logs", BUILD / "run", BUILD / "pids"
KUBECONFIG, STATE, PKI = BUILD / "kubeconfig", BUILD / "state.json", BUILD / "pki"
KWOK_WORKDIR = BUILD / "kwok"
CLUSTER = "fmnist"
CACHE = Path(
    os.environ.get("FMNIST_CONTROLPLANE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fmnist-controlplane"
)
RECIPE = "1"  # bump when the way a component is built or rendered changes
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are megabytes
KEEP_KINDS = {
    "Namespace",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ConfigMap",
}
# Fixed certificate folders in the controllers' source (no flag changes them).
TRAINING_OPERATOR_CERTS = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert/cert.go
KATIB_CERTS = Path("/tmp/cert")  # pkg/controller.v1beta1/consts/const.go CertDir
KATIB_SUGGESTION_PORT = 6789  # cmd/suggestion/goptuna/v1beta1/main.go listens on 0.0.0.0:6789


@dataclass(frozen=True)
class Component:
    """One folder under tools/controlplane: a Go module, its programs and its manifests."""

    name: str
    module: str
    tools: dict[str, str]  # binary name -> package
    manifests: tuple[str, ...] = ()  # kustomize folders of the module, rendered together
    namespace: str = ""  # the namespace kustomize sets on them
    files: tuple[str, ...] = ()  # files of the module kept as they are
    ldflags: tuple[str, ...] = field(default=())

    @property
    def dir(self) -> Path:
        """tools/controlplane/<name>/: its go.mod and go.sum."""
        return HERE / self.name


def _k8s_ldflags() -> tuple[str, ...]:
    """The version variables hack/lib/version.sh sets (kwokctl reads `--version`)."""
    version = upstream.pin("k8s.io/kubernetes").version
    major, minor = version[1:].split(".")[:2]
    flags = []
    for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        for key, value in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"),
        ):
            flags.append(f"-X {package}.{key}={value}")
    return tuple(flags)


def components(trainer: str, kserve: str) -> dict[str, Component]:
    """The components of one cluster, by folder name (Trainer and KServe selectable)."""
    trainer_module = "github.com/kubeflow/trainer/v2"
    found = [
        Component(
            "kubernetes",
            "k8s.io/kubernetes",
            {
                "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
                "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
                "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            },
            ldflags=_k8s_ldflags(),
        ),
        Component("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}),
        Component(
            "kwok",
            "sigs.k8s.io/kwok",
            {"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"},
            files=(
                "kustomize/stage/node/fast/node-initialize.yaml",
                "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                "kustomize/stage/pod/fast/pod-ready.yaml",
                "kustomize/stage/pod/fast/pod-delete.yaml",
            ),
            ldflags=(
                "-X sigs.k8s.io/kwok/pkg/consts.KubeVersion="
                + upstream.pin("k8s.io/kubernetes").version[1:],
            ),
        ),
        Component(
            "jobset", "sigs.k8s.io/jobset", {"jobset": "sigs.k8s.io/jobset"}, ("config/default",)
        ),
        Component(
            "training-operator",
            "github.com/kubeflow/training-operator",
            {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"},
            ("manifests/overlays/standalone",),
        ),
        Component(
            f"trainer-{trainer}",
            trainer_module,
            {"trainer-controller-manager": f"{trainer_module}/cmd/trainer-controller-manager"},
            ("manifests/base/crds", "manifests/base/webhook"),
            namespace="kubeflow-system",
            files=(
                "manifests/base/manager/controller_manager_config.yaml",
                "manifests/base/runtimes/torch_distributed.yaml",
            ),
        ),
        Component(
            "kueue",
            "sigs.k8s.io/kueue",
            {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
            ("config/default",),
        ),
        Component(
            "katib",
            "github.com/kubeflow/katib",
            {
                "katib-controller": "github.com/kubeflow/katib/cmd/katib-controller/v1beta1",
                "goptuna-suggestion": "github.com/kubeflow/katib/cmd/suggestion/goptuna/v1beta1",
            },
            ("manifests/v1beta1/installs/katib-standalone",),
        ),
        Component(
            f"kserve-{kserve}",
            "github.com/kserve/kserve",
            {"kserve-manager": "github.com/kserve/kserve/cmd/manager"},
            ("config/default",) if kserve == "v0.15.2" else ("config/default", "config/configmap"),
            namespace="" if kserve == "v0.15.2" else "kserve",
        ),
    ]
    for component in found:
        if not (component.dir / "go.mod").exists():
            raise SystemExit(f"no {component.dir}/go.mod: choose a version that has a folder")
    return {component.name: component for component in found}


def pinned_version(component: Component) -> str:
    """The version of the component's module that its own go.mod pins."""
    (pin,) = [
        p
        for p in upstream.pins()
        if p.module == component.module and p.gomod.parent == component.dir
    ]
    return pin.version


# --- building --------------------------------------------------------------------------


def cache_dir(component: Component) -> Path:
    """Where this component's build lives: keyed by its go.mod, go.sum and recipe."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.dir / name).read_bytes())
    digest.update(
        json.dumps(
            [
                RECIPE,
                component.tools,
                component.manifests,
                component.namespace,
                component.files,
                component.ldflags,
            ]
        ).encode()
    )
    return CACHE / f"{component.name}-{digest.hexdigest()[:16]}"


def go_env() -> dict[str, str]:
    """The environment of `go build`: static binaries, this module's go.sum only."""
    return {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly"}


def build(component: Component) -> Path:
    """Build (or find in the cache) one component; returns its cache folder."""
    out = cache_dir(component)
    if (out / "built.json").exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=CACHE))
    started = time.monotonic()
    try:
        version = pinned_version(component)
        print(f"building {component.name} ({component.module} {version})", flush=True)
        for binary, package in component.tools.items():
            command = [
                "go",
                "build",
                "-trimpath",
                "-ldflags",
                " ".join(("-s", "-w") + component.ldflags),
            ]
            command += ["-o", str(tmp / "bin" / binary), package]
            run(command, cwd=component.dir, env=go_env())
        root = upstream.module_dir(component.module, version)
        if component.manifests:
            (tmp / "manifests.yaml").write_text(render(root, component, tmp))
        for relative in component.files:
            (tmp / "files").mkdir(exist_ok=True)
            shutil.copyfile(root / relative, tmp / "files" / Path(relative).name)
        seconds = round(time.monotonic() - started, 1)
        info = {
            "module": component.module,
            "version": version,
            "seconds": seconds,
            "go": subprocess.run(
                ["go", "env", "GOVERSION"], capture_output=True, text=True
            ).stdout.strip(),
        }
        (tmp / "built.json").write_text(json.dumps(info, indent=1))
        try:
            tmp.rename(out)
        except OSError:  # built meanwhile by another run
            shutil.rmtree(tmp)
        print(f"built {component.name} in {seconds} s", flush=True)
        return out
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def render(root: Path, component: Component, scratch: Path) -> str:
    """The module's kustomizations, rendered by kubectl, cut to KEEP_KINDS."""
    kustomization = scratch / "kustomize"
    kustomization.mkdir()
    resources = [os.path.relpath(root / folder, kustomization) for folder in component.manifests]
    spec = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }
    if component.namespace:
        spec["namespace"] = component.namespace
    (kustomization / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    rendered = run(["kubectl", "kustomize", str(kustomization)], capture=True)
    shutil.rmtree(kustomization)
    kept = [
        doc for doc in yaml.load_all(rendered, Loader=LOADER) if doc and doc["kind"] in KEEP_KINDS
    ]
    return yaml.safe_dump_all(kept, sort_keys=False)


def build_all(wanted: dict[str, Component]) -> dict[str, Path]:
    """Build every component; link binaries and manifests into build/cluster/."""
    built = {name: build(component) for name, component in wanted.items()}
    for sub in ("bin", "manifests", "files"):
        shutil.rmtree(BUILD / sub, ignore_errors=True)
        (BUILD / sub).mkdir(parents=True)
    for name, folder in built.items():
        for binary in (folder / "bin").iterdir():
            (BIN / binary.name).symlink_to(binary)
        if (folder / "manifests.yaml").exists():
            (BUILD / "manifests" / f"{name}.yaml").symlink_to(folder / "manifests.yaml")
        for path in (folder / "files").glob("*") if (folder / "files").exists() else ():
            (BUILD / "files" / name).mkdir(exist_ok=True)
            (BUILD / "files" / name / path.name).symlink_to(path)
    return built


# --- certificates -----------------------------------------------------------------------

# The names the controllers' certificate rotators check (open-policy-agent/cert-controller
# ValidCert): the CA must be valid for the rotator's CAName, the serving certificate for the
# webhook Service's DNS name. The apiserver checks the IP of the rewritten URL.
CA_NAMES = ["training-operator-ca", "kueue-ca"]  # training-operator pkg/cert, kueue pkg/util/cert
SERVICE_NAMES = [
    "training-operator.kubeflow.svc",
    "kueue-webhook-service.kueue-system.svc",
    "jobset-webhook-service.jobset-system.svc",
    "kubeflow-trainer-controller-manager.kubeflow-system.svc",
    "katib-controller.kubeflow.svc",
    "kserve-webhook-server-service.kserve.svc",
]


def make_pki() -> dict[str, Path]:
    """A CA and one serving certificate (127.0.0.1 and every webhook Service name).

    RSA keys in PKCS#1 form: cert-controller's rotator parses the CA key with
    x509.ParsePKCS1PrivateKey (open-policy-agent/cert-controller v0.16.0 pkg/rotator).
    """
    PKI.mkdir(parents=True, exist_ok=True)
    paths = {name: PKI / name for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    if all(path.exists() for path in paths.values()):
        return paths
    ca_names = ",".join(f"DNS:{name}" for name in CA_NAMES)
    tls_names = ",".join(f"DNS:{name}" for name in ["localhost", *SERVICE_NAMES])
    (PKI / "tls.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,{tls_names}\n"
    )
    ca_key, ca_crt, key, crt = (str(paths[n]) for n in ("ca.key", "ca.crt", "tls.key", "tls.crt"))
    csr = str(PKI / "tls.csr")
    for command in (
        f"genrsa -traditional -out {ca_key} 2048",
        f"req -x509 -new -key {ca_key} -subj /CN=fmnist-cluster-tier-ca -days 3650 -out {ca_crt}"
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
        f" -addext subjectAltName={ca_names}",
        f"genrsa -traditional -out {key} 2048",
        f"req -new -key {key} -subj /CN=127.0.0.1 -out {csr}",
        f"x509 -req -in {csr} -CA {ca_crt} -CAkey {ca_key} -CAcreateserial -days 3650"
        f" -extfile {PKI / 'tls.ext'} -out {crt}",
    ):
        run(["openssl", *command.split()])
    return paths


def install_certs(folder: Path, pki: dict[str, Path]) -> None:
    """tls.crt/tls.key (and ca.crt) where controller-runtime's webhook server reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copyfile(pki[name], folder / name)


# --- small helpers ------------------------------------------------------------------------


def run(
    command: list[str], cwd: Path | None = None, env: dict | None = None, capture: bool = False
) -> str:
    """Run a command; on failure raise with its output."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        output = (result.stdout + result.stderr).strip()[-4000:]
        raise SystemExit(f"command failed ({result.returncode}): {' '.join(command)}\n{output}")
    return result.stdout if capture else ""


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on every address."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def kubectl(*args: str, stdin: str | None = None) -> str:
    """Run kubectl with the admin kubeconfig; return stdout, exit with its output on failure."""
    command = ["kubectl", f"--kubeconfig={KUBECONFIG}", *args]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(
            f"kubectl {' '.join(args)} failed:\n{(result.stdout + result.stderr)[-4000:]}"
        )
    return result.stdout


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file (for error messages)."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- the control plane (kwokctl) -------------------------------------------------------


def kwok_env() -> dict[str, str]:
    """The environment of kwokctl: its work folder is build/cluster/kwok."""
    return {**os.environ, "KWOK_WORKDIR": str(KWOK_WORKDIR)}


def kwok_cluster_dir() -> Path:
    """The folder kwokctl keeps this cluster in: kwokctl.yaml, pki/, pids/, logs/, etcd data."""
    return KWOK_WORKDIR / "clusters" / CLUSTER


def start_control_plane(stage_files: list[Path]) -> None:
    """Kwokctl create cluster --runtime binary with our binaries (see module docstring)."""
    config = {
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
        },
        "componentsPatches": [
            # Throwaway data: etcd need not wait for the disk on every write.
            {"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]},
            # One instance each: without leader election they ride out a kube-apiserver
            # restart (with it they exit once they cannot renew the lease, and nothing
            # restarts them).
            {"name": "kube-scheduler", "extraArgs": [{"key": "leader-elect", "value": "false"}]},
            {
                "name": "kube-controller-manager",
                "extraArgs": [{"key": "leader-elect", "value": "false"}],
            },
        ],
    }
    path = RUN / "kwokctl.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [str(BIN / "kwokctl")]
    for config_file in [path, *stage_files]:
        command += ["--config", str(config_file)]
    command += [
        "create",
        "cluster",
        "--name",
        CLUSTER,
        "--timeout",
        "120s",
        "--kubeconfig",
        str(KUBECONFIG),
    ]
    result = subprocess.run(command, env=kwok_env(), capture_output=True, text=True)
    (LOGS / "kwokctl.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        logs = "\n".join(
            f"--- {p.name}\n{log_tail(p, 15)}" for p in (kwok_cluster_dir() / "logs").glob("*.log")
        )
        raise SystemExit(f"kwokctl create cluster failed:\n{result.stdout}{result.stderr}\n{logs}")
    for log in (kwok_cluster_dir() / "logs").glob("*.log"):
        link = LOGS / log.name
        link.unlink(missing_ok=True)
        link.symlink_to(log)


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
    wait_for("the kube-apiserver to serve", lambda: readyz_apiserver(), timeout, "kube-apiserver")


def readyz_apiserver() -> bool:
    """Whether the kube-apiserver answers /readyz."""
    try:
        kubectl("get", "--raw", "/readyz")
        return True
    except SystemExit:
        return False


# --- manifests ----------------------------------------------------------------------------


def rewrite_webhooks(docs: list[dict], port: int, ca_bundle: str) -> list[dict]:
    """Point every webhook (admission and CRD conversion) at https://127.0.0.1:<port><path>."""
    for doc in docs:
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"].get("path", "/")
                webhook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": ca_bundle,
                }
        elif doc["kind"] == "CustomResourceDefinition":
            conversion = doc["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                config = conversion["webhook"]["clientConfig"]
                path = config.get("service", {}).get("path", "/convert")
                conversion["webhook"]["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": ca_bundle,
                }
    return docs


def cert_secret(namespace: str, name: str, pki: dict[str, Path]) -> dict:
    """A Secret a cert-controller rotator accepts as its CA and serving certificate."""
    data = {key: base64.b64encode(path.read_bytes()).decode() for key, path in pki.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"namespace": namespace, "name": name},
        "data": data,
    }


def config_map(docs: list[dict], name: str) -> dict:
    """The ConfigMap ``name`` among rendered manifests."""
    found = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    if not found:
        raise SystemExit(f"the rendered manifests have no ConfigMap {name}")
    return found[0]


# --- controllers -----------------------------------------------------------------------


@dataclass
class Process:
    """A program the harness starts and keeps the pid of."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str = ""  # http URL answering 200 when ready
    webhook_port: int = 0  # answers TLS with our certificate when ready

    def start(self) -> int:
        """Start it in its own session, output to build/cluster/logs/<name>.log; return its pid."""
        log = (LOGS / f"{self.name}.log").open("ab")
        env = {**os.environ, "KUBECONFIG": str(KUBECONFIG), **self.env}
        child = subprocess.Popen(
            self.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=RUN,
            start_new_session=True,
        )
        (PIDS / f"{self.name}.pid").write_text(str(child.pid))
        return child.pid


def controllers(
    wanted: dict[str, Component], pki: dict[str, Path], trainer: str, kserve: str
) -> tuple[list[Process], list[dict]]:
    """The controller processes and the objects to apply before they start."""
    ca_bundle = base64.b64encode(pki["ca.crt"].read_bytes()).decode()
    manifests = {
        name: list(yaml.load_all((BUILD / "manifests" / f"{name}.yaml").read_text(), Loader=LOADER))
        for name in wanted
        if (BUILD / "manifests" / f"{name}.yaml").exists()
    }
    processes, objects = [], []

    def ports() -> tuple[int, int]:
        return free_port(), free_port()

    def config_file(name: str, content: dict | str) -> Path:
        path = RUN / name / Path("config.yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        )
        return path

    # JobSet (sigs.k8s.io/jobset main.go; its config is the release ConfigMap's).
    webhook, health = ports()
    docs = rewrite_webhooks(manifests["jobset"], webhook, ca_bundle)
    config = yaml.safe_load(
        config_map(docs, "jobset-manager-config")["data"]["controller_manager_config.yaml"]
    )
    config.update(
        leaderElection={"leaderElect": False},
        internalCertManagement={"enable": False},
        webhook={"port": webhook, "certDir": str(RUN / "jobset" / "certs")},
        metrics={"bindAddress": "0"},
        health={"healthProbeBindAddress": f"127.0.0.1:{health}"},
    )
    install_certs(RUN / "jobset" / "certs", pki)
    processes.append(
        Process(
            "jobset",
            [str(BIN / "jobset"), "--config", str(config_file("jobset", config))],
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )
    objects += docs

    # Training Operator v1.9.4: flags only (cmd/training-operator.v1/main.go); its cert
    # rotator (pkg/cert/cert.go) always runs: it gets our certificate in its Secret and in
    # the fixed folder it checks.
    webhook, health = ports()
    docs = rewrite_webhooks(manifests["training-operator"], webhook, ca_bundle)
    install_certs(TRAINING_OPERATOR_CERTS, pki)
    objects += docs + [cert_secret("kubeflow", "training-operator-webhook-cert", pki)]
    processes.append(
        Process(
            "training-operator",
            [
                str(BIN / "training-operator"),
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--webhook-server-port={webhook}",
                "--leader-elect=false",
            ],
            env={"MY_POD_NAMESPACE": "kubeflow", "TMPDIR": "/tmp"},
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )

    # Trainer v2: its release configuration file with cert management off.
    name = f"trainer-{trainer}"
    webhook, health = ports()
    docs = rewrite_webhooks(manifests[name], webhook, ca_bundle)
    config = yaml.safe_load((BUILD / "files" / name / "controller_manager_config.yaml").read_text())
    config.update(
        health={**config.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{health}"},
        metrics={**config.get("metrics", {}), "bindAddress": "0"},
        webhook={**config.get("webhook", {}), "port": webhook},
        certManagement={**config["certManagement"], "enable": False},
    )
    config["leaderElection"]["leaderElect"] = False
    if "statusServer" in config:  # v2.3.0: the TrainJobStatus server (feature gate, off by default)
        config["statusServer"]["port"] = free_port()
    tmpdir = RUN / "trainer" / "tmp"
    install_certs(tmpdir / "k8s-webhook-server" / "serving-certs", pki)  # controller-runtime's
    processes.append(
        Process(
            "trainer",
            [
                str(BIN / "trainer-controller-manager"),
                "--config",
                str(config_file("trainer", config)),
            ],
            env={"TMPDIR": str(tmpdir)},
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )
    objects += docs

    # Kueue: OUR k8s/kueue/config, plus what running it here needs. Internal cert management
    # stays on (off, it reads metrics certificates from /etc/kueue/metrics/certs): its rotator
    # is handed our certificate in its Secret, and reads it from webhook.certDir.
    webhook, health = ports()
    docs = rewrite_webhooks(manifests["kueue"], webhook, ca_bundle)
    config = yaml.safe_load(
        (REPO / "k8s" / "kueue" / "config" / "controller_manager_config.yaml").read_text()
    )
    config.update(
        namespace="kueue-system",
        health={**config.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{health}"},
        metrics={**config.get("metrics", {}), "bindAddress": "0"},
        webhook={
            **config.get("webhook", {}),
            "port": webhook,
            "certDir": str(RUN / "kueue" / "certs"),
        },
        leaderElection={**config.get("leaderElection", {}), "leaderElect": False},
        internalCertManagement={
            "enable": True,
            "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert",
        },
    )
    install_certs(RUN / "kueue" / "certs", pki)
    objects += docs + [cert_secret("kueue-system", "kueue-webhook-server-cert", pki)]
    processes.append(
        Process(
            "kueue",
            [
                str(BIN / "kueue"),
                "--config",
                str(config_file("kueue", config)),
                "--feature-gates=VisibilityOnDemand=false",
            ],
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )

    # Katib: its release katib-config with the cert generator off and local ports; the
    # suggestion service runs here, reached through connect_proxy.py.
    webhook, health = ports()
    proxy = free_port()
    docs = rewrite_webhooks(manifests["katib"], webhook, ca_bundle)
    katib_config = config_map(docs, "katib-config")
    config = yaml.safe_load(katib_config["data"]["katib-config.yaml"])
    config["init"]["certGenerator"] = {"enable": False}
    config["init"]["controller"].update(
        webhookPort=webhook, metricsAddr="0", healthzAddr=f"127.0.0.1:{health}"
    )
    katib_config["data"]["katib-config.yaml"] = yaml.safe_dump(config, sort_keys=False)
    install_certs(KATIB_CERTS, pki)
    if not port_free(KATIB_SUGGESTION_PORT):
        raise SystemExit(f"port {KATIB_SUGGESTION_PORT} (Katib's suggestion service) is in use")
    processes.append(Process("katib-suggestion", [str(BIN / "goptuna-suggestion")]))
    processes.append(
        Process(
            "katib-proxy",
            [
                sys.executable,
                str(HERE / "connect_proxy.py"),
                str(proxy),
                f"127.0.0.1:{KATIB_SUGGESTION_PORT}",
                "katib-db-manager.",
            ],
        )
    )
    proxy_url = f"http://127.0.0.1:{proxy}"
    processes.append(
        Process(
            "katib",
            [
                str(BIN / "katib-controller"),
                "--katib-config",
                str(config_file("katib", katib_config["data"]["katib-config.yaml"])),
            ],
            env={
                "KATIB_CORE_NAMESPACE": "kubeflow",
                "HTTPS_PROXY": proxy_url,
                "HTTP_PROXY": proxy_url,
                "NO_PROXY": "127.0.0.1,localhost",
            },
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )
    objects += docs

    # KServe: flags (cmd/manager/main.go) and its release inferenceservice-config ConfigMap;
    # the webhook server reads controller-runtime's default folder under TMPDIR.
    name = f"kserve-{kserve}"
    webhook, health = ports()
    docs = rewrite_webhooks(manifests[name], webhook, ca_bundle)
    if not any(d["kind"] == "Namespace" and d["metadata"]["name"] == "kserve" for d in docs):
        docs.insert(0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kserve"}})
    tmpdir = RUN / "kserve" / "tmp"
    install_certs(tmpdir / "k8s-webhook-server" / "serving-certs", pki)
    processes.append(
        Process(
            "kserve",
            [
                str(BIN / "kserve-manager"),
                "--metrics-addr=0",
                f"--webhook-port={webhook}",
                f"--health-probe-addr=127.0.0.1:{health}",
                "--leader-elect=false",
            ],
            env={"POD_NAMESPACE": "kserve", "TMPDIR": str(tmpdir)},
            health=f"http://127.0.0.1:{health}/readyz",
            webhook_port=webhook,
        )
    )
    objects += docs
    return processes, objects


# Where each kind the harness creates lives in the API (apiVersion gives the prefix).
PLURALS = {
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "ClusterTrainingRuntime": ("clustertrainingruntimes", False),
    "ClusterLogs": ("clusterlogs", False),
}


class Api:
    """The few REST calls the harness makes, as admin (kwokctl's client certificate).

    Creating the ~50 objects of a fresh cluster with parallel POSTs takes a third of the
    time `kubectl apply --server-side` takes (one PATCH after another, managed fields).
    """

    def __init__(self, kubeconfig: Path):
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.server = cluster["server"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.context.load_cert_chain(user["client-certificate"], user["client-key"])

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """One request; returns (HTTP status, decoded body)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=60) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def create(self, obj: dict) -> None:
        """POST ``obj``; an object that already exists is fine, any other error is not."""
        plural, namespaced = PLURALS[obj["kind"]]
        prefix = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
        namespace = obj["metadata"].get("namespace") if namespaced else None
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        status, answer = self.call("POST", path, obj)
        if status not in (200, 201, 409):
            raise SystemExit(
                f"creating {obj['kind']} {obj['metadata']['name']}: {status} "
                f"{answer.get('message', answer)}"
            )

    def create_all(self, objects: list[dict], name: str) -> None:
        """Namespaces first, then everything else in parallel (kept in run/<name>.json)."""
        (RUN / f"{name}.json").write_text(json.dumps(objects))
        first = [o for o in objects if o["kind"] == "Namespace"]
        rest = [o for o in objects if o["kind"] != "Namespace"]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for batch in (first, rest):
                list(pool.map(self.create, batch))

    def established(self, names: set[str]) -> bool:
        """Whether every CRD named is Established (served)."""
        _, answer = self.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        ready = {
            item["metadata"]["name"]
            for item in answer.get("items", [])
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in item.get("status", {}).get("conditions") or []
            )
        }
        return names <= ready

    def nodes_ready(self, count: int) -> bool:
        """Whether ``count`` nodes report Ready."""
        _, answer = self.call("GET", "/api/v1/nodes")
        ready = [
            n
            for n in answer.get("items", [])
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions") or []
            )
        ]
        return len(ready) >= count


# --- waiting ------------------------------------------------------------------------------


def wait_for(what: str, check, timeout: float, component: str | None = None) -> None:
    """Poll ``check()`` until true; on timeout exit naming ``what`` with the component's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    log = LOGS / f"{component}.log" if component else None
    tail = f"\n--- last lines of {log}:\n{log_tail(log)}" if log else ""
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}{tail}")


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def tls_ok(port: int, ca: Path) -> bool:
    """The webhook server answers HTTPS on 127.0.0.1 with a certificate our CA signed."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/healthz-probe", method="POST", data=b"{}"
        )
        urllib.request.urlopen(request, context=context, timeout=2)
        return True
    except urllib.error.HTTPError:  # any HTTP answer over verified TLS will do
        return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float) -> None:
    """Wait until the processes exit; SIGKILL what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    while any(alive(p) for p in pids):
        time.sleep(0.05)


# --- commands -----------------------------------------------------------------------------


def up(args) -> None:
    """Build what is missing, start the control plane and the controllers, wait until ready."""
    started = time.monotonic()
    if STATE.exists() or kwok_cluster_dir().exists():
        print("a previous cluster is still here: stopping it first", flush=True)
        down(args)
    wanted = components(args.trainer, args.kserve)
    build_all(wanted)
    built = time.monotonic()
    progress(started, "binaries ready")
    for folder in (LOGS, RUN, PIDS):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    pki = make_pki()
    STATE.write_text(json.dumps({"trainer": args.trainer, "kserve": args.kserve, "starting": True}))

    kwok_files = BUILD / "files" / "kwok"
    stages = [
        kwok_files / "node-initialize.yaml",
        kwok_files / "node-heartbeat-with-lease.yaml",
        kwok_files / "pod-ready.yaml",
        kwok_files / "pod-delete.yaml",
        HERE / "config" / "pod-stages.yaml",
    ]
    start_control_plane(stages)
    plane = time.monotonic()
    progress(started, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok up")

    processes, objects = controllers(wanted, pki, args.trainer, args.kserve)
    nodes = list(yaml.safe_load_all((HERE / "config" / "nodes.yaml").read_text()))
    api = Api(KUBECONFIG)
    api.create_all(objects + nodes, "controllers")
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    wait_for("the CRDs to be established", lambda: api.established(crds), 120, "kube-apiserver")
    progress(started, f"{len(crds)} CRDs established; webhook configurations, nodes created")
    pids = {p.name: p.start() for p in processes}
    STATE.write_text(
        json.dumps(
            {
                "trainer": args.trainer,
                "kserve": args.kserve,
                "pids": pids,
                "processes": [p.__dict__ for p in processes],
            },
            indent=1,
        )
    )
    for process in processes:
        if process.health:

            def ready(p=process):
                if not alive(pids[p.name]):
                    raise SystemExit(
                        f"{p.name} exited while starting; last lines of "
                        f"{LOGS / (p.name + '.log')}:\n{log_tail(LOGS / (p.name + '.log'))}"
                    )
                return http_ok(p.health) and tls_ok(p.webhook_port, pki["ca.crt"])

            wait_for(f"{process.name} (readiness probe and webhook)", ready, 120, process.name)
    for process in processes:
        if not alive(pids[process.name]):
            raise SystemExit(f"{process.name} exited:\n{log_tail(LOGS / (process.name + '.log'))}")
    controllers_ready = time.monotonic()
    progress(started, "every controller ready, webhooks answering")

    runtime = yaml.safe_load(
        (BUILD / "files" / f"trainer-{args.trainer}" / "torch_distributed.yaml").read_text()
    )
    trainer_log = HERE / "config" / "trainer.log"
    cluster_logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "fmnist-trainer-log"},
        "spec": {
            "logs": [{"containers": ["pytorch", "node", "trainer"], "logsFile": str(trainer_log)}]
        },
    }
    api.create_all([runtime, cluster_logs], "after-webhooks")
    wait_for("the nodes to be Ready", lambda: api.nodes_ready(len(nodes)), 60, "kwok-controller")
    progress(started, "torch-distributed runtime and kwok ClusterLogs created, nodes Ready")
    state = json.loads(STATE.read_text())
    state.update(
        seconds={
            "build_check": round(built - started, 1),
            "control_plane": round(plane - built, 1),
            "controllers": round(controllers_ready - plane, 1),
            "total": round(time.monotonic() - started, 1),
        }
    )
    STATE.write_text(json.dumps(state, indent=1))
    print(
        f"cluster up in {state['seconds']['total']} s ({json.dumps(state['seconds'])}); "
        f"KUBECONFIG={KUBECONFIG}; logs in {LOGS}",
        flush=True,
    )


def progress(started: float, what: str) -> None:
    """One line per start-up phase, with the seconds since ``started``."""
    print(f"[{time.monotonic() - started:5.1f} s] {what}", flush=True)


def down(args=None) -> None:
    """Stop every process the harness and kwokctl started; keep the logs."""
    pids = [int(p.read_text()) for p in PIDS.glob("*.pid")] if PIDS.exists() else []
    for pid in pids:
        if alive(pid):
            os.killpg(pid, signal.SIGTERM) if os.getpgid(pid) == pid else os.kill(
                pid, signal.SIGTERM
            )
    wait_gone(pids, 15)
    shutil.rmtree(PIDS, ignore_errors=True)
    if kwok_cluster_dir().exists():
        saved = LOGS / "control-plane"
        shutil.rmtree(saved, ignore_errors=True)
        if (kwok_cluster_dir() / "logs").exists():
            shutil.copytree(kwok_cluster_dir() / "logs", saved)
        for link in LOGS.glob("*.log"):
            if link.is_symlink():
                link.unlink()
        kwok_pids = [int(p.read_text()) for p in (kwok_cluster_dir() / "pids").glob("*.pid")]
        if (BIN / "kwokctl").exists():
            subprocess.run(
                [str(BIN / "kwokctl"), "delete", "cluster", "--name", CLUSTER],
                env=kwok_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
        for pid in kwok_pids:  # whatever kwokctl did not stop
            if alive(pid):
                os.kill(pid, signal.SIGTERM)
        wait_gone(kwok_pids, 15)
        shutil.rmtree(KWOK_WORKDIR, ignore_errors=True)
    for folder in (TRAINING_OPERATOR_CERTS, KATIB_CERTS):  # ours only: same bytes as build's
        for name in ("tls.crt", "tls.key", "ca.crt"):
            ours, theirs = PKI / name, folder / name
            if ours.exists() and theirs.exists() and ours.read_bytes() == theirs.read_bytes():
                theirs.unlink()
        for empty in (folder, *folder.parents):
            if empty == Path("/tmp") or not empty.is_dir() or any(empty.iterdir()):
                break
            empty.rmdir()
    STATE.unlink(missing_ok=True)
    KUBECONFIG.unlink(missing_ok=True)
    for path in BUILD.glob("kfp*-host"):  # KFP API servers attached to this cluster went with it
        path.unlink()
    print("cluster down", flush=True)


def status(args) -> None:
    """Print which processes run; exit 1 if one does not."""
    if not STATE.exists():
        print("no cluster (make cluster-up)")
        sys.exit(1)
    state = json.loads(STATE.read_text())
    failed = False
    for name, pid in state.get("pids", {}).items():
        ok = alive(pid)
        failed |= not ok
        print(f"{name:20} pid {pid:<8} {'running' if ok else 'NOT RUNNING'}")
    pid = apiserver_pid()
    running = "running" if pid and alive(pid) else "NOT RUNNING"
    print(f"{'kube-apiserver':20} pid {pid or '-':<8} {running}")
    sys.exit(1 if failed else 0)


def restart_apiserver(args) -> None:
    """Stop the kube-apiserver, wait ``--down-seconds``, start it again."""
    stop_apiserver()
    time.sleep(args.down_seconds)
    start_apiserver()
    print("kube-apiserver restarted", flush=True)


def main(argv: list[str]) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "up"):
        command = sub.add_parser(name)
        command.add_argument("--trainer", default=os.environ.get("TRAINER") or "v2.1.0")
        command.add_argument("--kserve", default=os.environ.get("KSERVE") or "v0.15.2")
    sub.add_parser("down")
    sub.add_parser("status")
    restart = sub.add_parser("restart-apiserver")
    restart.add_argument("--down-seconds", type=float, default=0)
    args = parser.parse_args(argv)
    BUILD.mkdir(parents=True, exist_ok=True)
    if args.command == "build":
        started = time.monotonic()
        build_all(components(args.trainer, args.kserve))
        print(f"all built ({time.monotonic() - started:.1f} s); binaries in {BIN}")
    elif args.command == "up":
        LOGS.mkdir(parents=True, exist_ok=True)
        try:
            up(args)
        except BaseException:
            print(
                "cluster-up failed; stopping what started (logs stay in build/cluster/logs)",
                file=sys.stderr,
            )
            down()
            raise
    elif args.command == "down":
        down(args)
    elif args.command == "status":
        status(args)
    else:
        restart_apiserver(args)


if __name__ == "__main__":
    main(sys.argv[1:])
