"""Karmada over the tier's worker clusters, attached to a running tier: `cluster.py karmada`.

Karmada's API server is a kube-apiserver of its own (kwokctl cluster ``fmnist-karmada``, no
nodes, its kube-controller-manager for namespaces and garbage collection). Beside it run
karmada-aggregated-apiserver (serves ``cluster.karmada.io`` behind an APIService),
karmada-webhook, karmada-controller-manager and karmada-scheduler, built from
github.com/karmada-io/karmada (tools/controlplane/karmada/go.mod) like every component, but
on their own (``cluster.py build-karmada``, or here when first attached). The MultiKueue
workers join in push mode as members ``member1`` and ``member2`` (k8s/karmada's cluster
names).

What is relied on (Karmada v1.18.1): the webhook alone sets the permanent-id labels that
bindings and Works are matched by (pkg/webhook/propagationpolicy/mutating.go,
resourcebinding/mutating.go, work/mutating.go); the aggregator reaches an APIService through
an ExternalName Service and checks the certificate for ``<service>.<namespace>.svc``;
a push member is reached with a bearer token and CA from the Secret ``spec.secretRef``
names (pkg/util/membercluster_client.go BuildClusterConfig); the NoExecute taint manager
runs only with ``Failover=true`` and ``--enable-no-execute-taint-eviction``
(cmd/controller-manager/app/controllermanager.go); whole-job placement by capacity needs
``MultiplePodTemplatesScheduling`` (pkg/detector/detector.go, pkg/scheduler/core/).
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from harness import control_plane, workers
from harness.api import Api, condition_true
from harness.build import LOADER
from harness.paths import BIN, BUILD, CLUSTER, PIDS, RUN
from harness.pki import install_certs
from harness.processes import Process, free_port, terminate, wait_for, wait_ready

NAME = f"{CLUSTER}-karmada"  # kwokctl's name for Karmada's API server
KUBECONFIG = BUILD / "kubeconfig-karmada"
FILES = BUILD / "files" / "karmada"  # its CRDs and webhook configurations, from the module
MEMBERS = {"member1": "worker-1", "member2": "worker-2"}  # Karmada's name -> the tier's worker
CLUSTER_NAMESPACE = "karmada-cluster"  # members' Secrets here; their accounts on the members
FEATURE_GATES = "Failover=true,MultiplePodTemplatesScheduling=true"
# The scheduler checks a job against the clusters' resource models too, when these are on
# (the default): the default models grade nodes by CPU and memory alone, so a job asking
# for a GPU fits none (pkg/estimator/client/general.go getMaximumSetsBasedOnResourceModels).
SCHEDULER_GATES = "MultiplePodTemplatesScheduling=true,CustomizedClusterResourceModeling=false"
AGGREGATED_SERVICE = ("karmada-aggregated-apiserver", "karmada-system")
# The job kinds Karmada holds as templates: their CRDs, from the tier's rendered manifests.
JOB_CRDS = {
    "training-operator": "pytorchjobs.kubeflow.org",
    "trainer": "trainjobs.trainer.kubeflow.org",
}


def workers_running() -> bool:
    """Whether both workers Karmada joins are up."""
    return all(workers.kubeconfig(worker).exists() for worker in MEMBERS.values())


def attach(pki: dict[str, Path], trainer: str) -> dict[str, int]:
    """Start Karmada's control plane, join both workers; returns the pids started, by name."""
    control_plane.start_control_plane([], NAME, KUBECONFIG, _requestheader_args(NAME))
    api = Api(KUBECONFIG)
    ca_bundle = base64.b64encode(pki["ca.crt"].read_bytes()).decode()
    crds = _crds(trainer)
    api.create_all(_namespaces() + crds, "karmada-crds")
    names = {doc["metadata"]["name"] for doc in crds}
    wait_for("Karmada's CRDs to be established", lambda: api.established(names), 120)

    certs = RUN / "karmada" / "certs"
    install_certs(certs, pki)
    aggregated, webhook = free_port(), free_port()
    etcd = f"http://127.0.0.1:{_etcd_port(NAME)}"
    servers = [_aggregated_apiserver(etcd, certs, aggregated), _webhook(certs, webhook)]
    pids = {process.name: process.start() for process in servers}
    api.create_all(_aggregated_api(aggregated, ca_bundle), "karmada-apiservice")
    for process in servers:
        wait_ready(process, pids[process.name], pki["ca.crt"])
    api.create_all(_webhook_configurations(webhook, ca_bundle), "karmada-webhooks")
    wait_for(
        "the APIService v1alpha1.cluster.karmada.io to be Available",
        lambda: _available(api),
        120,
        "karmada-aggregated-apiserver",
    )
    for name in ("controller-manager", "scheduler"):
        process = _controller(name)
        pids[process.name] = process.start()
        wait_ready(process, pids[process.name], pki["ca.crt"])
    for member, worker in MEMBERS.items():
        api.create_all(_member_objects(member, worker), f"karmada-{member}")
    for member in MEMBERS:
        wait_for(
            f"Cluster {member} to be Ready",
            lambda member=member: _cluster_ready(api, member),
            120,
            "karmada-controller-manager",
        )
    return pids


def stop() -> None:
    """Stop Karmada: its processes (by their pid files), then its API server."""
    pid_files = list(PIDS.glob("karmada-*.pid"))
    terminate([int(path.read_text()) for path in pid_files], 15)
    for path in pid_files:
        path.unlink()
    control_plane.stop_control_plane(NAME)
    KUBECONFIG.unlink(missing_ok=True)


def _requestheader_args(name: str) -> list[dict]:
    """The aggregator's identity headers, trusted from kwokctl's admin certificate.

    kwokctl's apiserver presents its admin certificate to aggregated API servers
    (--proxy-client-cert-file, sigs.k8s.io/kwok pkg/kwokctl/components/kube_apiserver.go) but
    sets no --requestheader-* flags, without which they cannot tell who is asking.
    """
    pki = control_plane.kwok_cluster_dir(name) / "pki"
    return [
        {"key": "requestheader-client-ca-file", "value": str(pki / "ca.crt")},
        {"key": "requestheader-allowed-names", "value": "kwok-admin"},
        {"key": "requestheader-username-headers", "value": "X-Remote-User"},
        {"key": "requestheader-group-headers", "value": "X-Remote-Group"},
        {"key": "requestheader-extra-headers-prefix", "value": "X-Remote-Extra-"},
    ]


def _etcd_port(name: str) -> int:
    """The port of the etcd kwokctl started (the aggregated apiserver stores Clusters there)."""
    docs = yaml.safe_load_all((control_plane.kwok_cluster_dir(name) / "kwok.yaml").read_text())
    (config,) = [doc for doc in docs if doc["kind"] == "KwokctlConfiguration"]
    return int(config["options"]["etcdPort"])


def _namespaces() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in ("karmada-system", CLUSTER_NAMESPACE)
    ]


def _crds(trainer: str) -> list[dict]:
    """Karmada's CRDs and the job kinds' (templates only: no job controller runs here)."""
    docs = [yaml.load(path.read_text(), Loader=LOADER) for path in sorted(FILES.glob("*_*.yaml"))]
    for component, crd in JOB_CRDS.items():
        folder = f"trainer-{trainer}" if component == "trainer" else component
        rendered = yaml.load_all(
            (BUILD / "manifests" / f"{folder}.yaml").read_text(), Loader=LOADER
        )
        (found,) = [d for d in rendered if d and d["metadata"]["name"] == crd]
        found["spec"].pop("conversion", None)  # no conversion webhook runs here
        docs.append(found)
    return docs


def _aggregated_api(port: int, ca_bundle: str) -> list[dict]:
    """The APIService of cluster.karmada.io, reaching the host process by an ExternalName."""
    name, namespace = AGGREGATED_SERVICE
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1alpha1.cluster.karmada.io"},
            "spec": {
                "group": "cluster.karmada.io",
                "version": "v1alpha1",
                "groupPriorityMinimum": 2000,
                "versionPriority": 10,
                "caBundle": ca_bundle,
                "service": {"name": name, "namespace": namespace, "port": port},
            },
        },
    ]


def _webhook_configurations(port: int, ca_bundle: str) -> list[dict]:
    """Karmada's own webhook configurations, each URL pointed at 127.0.0.1:``port``."""
    text = (FILES / "webhook-configuration.yaml").read_text()
    docs = list(yaml.safe_load_all(text.replace("{{caBundle}}", ca_bundle)))
    for doc in docs:
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["url"].split(".svc:443", 1)[1]
            webhook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{path}"
    return docs


def _binary(name: str) -> str:
    return str(BIN / f"karmada-{name}")


def _aggregated_apiserver(etcd: str, certs: Path, port: int) -> Process:
    kubeconfig = str(KUBECONFIG)
    return Process(
        "karmada-aggregated-apiserver",
        [
            _binary("aggregated-apiserver"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--etcd-servers={etcd}",
            "--etcd-prefix=/karmada-aggregated",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={certs / 'tls.crt'}",
            f"--tls-private-key-file={certs / 'tls.key'}",
        ],
        env={"KUBECONFIG": kubeconfig},
        webhook_port=port,
    )


def _webhook(certs: Path, port: int) -> Process:
    return Process(
        "karmada-webhook",
        [
            _binary("webhook"),
            f"--kubeconfig={KUBECONFIG}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={certs}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            f"--feature-gates={FEATURE_GATES}",
        ],
        env={"KUBECONFIG": str(KUBECONFIG)},
        webhook_port=port,
    )


def _controller(name: str) -> Process:
    """karmada-controller-manager or karmada-scheduler, polled quickly, failover on."""
    health = free_port()
    command = [
        _binary(name),
        f"--kubeconfig={KUBECONFIG}",
        "--leader-elect=false",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        f"--feature-gates={SCHEDULER_GATES if name == 'scheduler' else FEATURE_GATES}",
    ]
    if name == "controller-manager":
        command += [
            "--cluster-status-update-frequency=3s",  # capacity and health seen within seconds
            "--enable-no-execute-taint-eviction=true",
        ]
    return Process(
        f"karmada-{name}",
        command,
        env={"KUBECONFIG": str(KUBECONFIG)},
        health=f"http://127.0.0.1:{health}/healthz",
    )


def _available(api: Api) -> bool:
    _, answer = api.call(
        "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.cluster.karmada.io"
    )
    return condition_true(answer, "Available")


def _member_objects(member: str, worker: str) -> list[dict]:
    """A cluster-admin account on the worker, its token in Karmada, the push-mode Cluster.

    What `karmadactl join` makes (pkg/util/credential.go), without its impersonator account,
    which only the unified-auth controller and the cluster proxy use.
    """
    token = _member_token(member, worker)
    kubeconfig = yaml.safe_load(workers.kubeconfig(worker).read_text())
    cluster = kubeconfig["clusters"][0]["cluster"]
    ca = Path(cluster["certificate-authority"]).read_bytes()
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": member, "namespace": CLUSTER_NAMESPACE},
            "data": {
                "token": base64.b64encode(token.encode()).decode(),
                "caBundle": base64.b64encode(ca).decode(),
            },
        },
        {
            "apiVersion": "cluster.karmada.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": member},
            "spec": {
                "syncMode": "Push",
                "apiEndpoint": cluster["server"],
                "secretRef": {"namespace": CLUSTER_NAMESPACE, "name": member},
            },
        },
    ]


def _member_token(member: str, worker: str) -> str:
    """A token (TokenRequest, a year) of ServiceAccount karmada-<member>, cluster-admin there.

    Not a service-account-token Secret: the workers' kube-controller-manager (kwokctl's)
    runs no token controller to fill one in.
    """
    api = Api(workers.kubeconfig(worker))
    account = f"karmada-{member}"
    api.create_all(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLUSTER_NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": CLUSTER_NAMESPACE},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": account},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": account, "namespace": CLUSTER_NAMESPACE}
                ],
            },
        ],
        f"karmada-{member}-account",
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 365 * 24 * 3600},
    }
    path = f"/api/v1/namespaces/{CLUSTER_NAMESPACE}/serviceaccounts/{account}/token"
    status, answer = api.call("POST", path, request)
    if status != 201:
        raise SystemExit(f"no token for {account} on {worker}: {status} {answer}")
    return answer["status"]["token"]


def _cluster_ready(api: Api, member: str) -> bool:
    _, answer = api.call("GET", f"/apis/cluster.karmada.io/v1alpha1/clusters/{member}")
    return condition_true(answer, "Ready")
