"""Fixtures of the cluster tier: a real kube-apiserver with the real Kubeflow controllers.

`make cluster-up` (tools/controlplane/cluster.py) starts it; `make test-cluster` runs this
tier between cluster-up and cluster-down. Nothing is faked here: etcd, kube-apiserver (RBAC
on), kube-controller-manager, kube-scheduler, kwok (nodes and pod lifecycles), JobSet,
Training Operator v1, Trainer v2, Kueue, Katib and KServe, each built from its pinned Go
module. kwok plays the kubelet; how it finishes pods is tools/controlplane/config/
pod-stages.yaml:

- a pod of a Job / PyTorchJob / TrainJob / trial (restartPolicy Never or OnFailure) runs for
  3 s, then succeeds; annotation ``fmnist.test/run-duration: "30s"`` changes how long;
- annotation ``fmnist.test/fail: "true"`` makes it fail instead, with exit code 1 or
  ``fmnist.test/exit-code``; put the annotations on a job's pod template;
- a Deployment's pods (restartPolicy Always) become Ready and stay Running;
- ``kubectl logs`` of a container named pytorch, node or trainer returns
  tools/controlplane/config/trainer.log (kwok ClusterLogs); ``pod_log`` gives one pod its own.
  A ``follow`` request never ends by itself (kwok v0.8.0), unlike a real kubelet's.

Acting as the pipeline: ``pipeline_account`` (a ServiceAccount token under the Role from
k8s/rbac) and ``as_pipeline`` (project code's ``kubernetes.config.load_*`` get that identity).
Disturbing the cluster: ``apiserver`` (stop/start/restart) and ``restart_apiserver``.
Helpers for tests (``wait_for``, ``condition``, ``queue_for``) are in cluster_helpers.py.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest
import yaml

from components.specs.pods import WorkPaths
from trainer.data import pack

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "cluster"
KUBECONFIG = BUILD / "kubeconfig"
HARNESS = REPO / "tools" / "controlplane"  # the harness package's parent folder
KATIB_INJECTION = "katib.kubeflow.org/metrics-collector-injection"

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests: `from cluster_helpers import`
from cluster_helpers import account_kubeconfig, wait_for  # noqa: E402


def _harness():
    """tools/controlplane/harness/control_plane.py (stop and start the kube-apiserver)."""
    if str(HARNESS) not in sys.path:
        sys.path.insert(0, str(HARNESS))
    return importlib.import_module("harness.control_plane")


@pytest.fixture(scope="session")
def packed(tmp_path_factory) -> Path:
    """The fault and isolation runs' slice of the real dataset: ~94 steps an epoch, so a fault
    lands in the middle of one and a probe finds the job still running."""
    out = tmp_path_factory.mktemp("packed")
    pack(str(out), train_limit=12_000, test_limit=2_000)
    return out


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    """The admin kubeconfig `make cluster-up` wrote; the tier fails (not skips) without it."""
    if not KUBECONFIG.exists():
        pytest.fail(
            f"no cluster: {KUBECONFIG} is missing. Start one with `make cluster-up` "
            "(or run the tier with `make test-cluster`).",
            pytrace=False,
        )
    return KUBECONFIG


@pytest.fixture(scope="session")
def api_client(kubeconfig) -> kubernetes.client.ApiClient:
    """An admin ApiClient (cluster-admin: the certificate kwokctl made)."""
    client = kubernetes.config.new_client_from_config(str(kubeconfig))
    try:
        kubernetes.client.VersionApi(client).get_code()
    except Exception as error:  # noqa: BLE001  (any failure: the cluster is not answering)
        pytest.fail(f"the cluster in {kubeconfig} does not answer ({error}); `make cluster-up`")
    return client


@pytest.fixture(scope="session")
def kubectl(kubeconfig):
    """``kubectl("get", "nodes", "-o", "json")`` as admin; returns stdout, raises on failure."""

    def run(*args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
        )
        if check and result.returncode:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout + (result.stderr if not check else "")

    return run


@pytest.fixture(scope="session")
def custom(api_client) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def core(api_client) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


def render(kubectl, folder: str) -> list[dict]:
    """``kubectl kustomize k8s/<folder>``, parsed."""
    return [d for d in yaml.safe_load_all(kubectl("kustomize", str(REPO / "k8s" / folder))) if d]


@pytest.fixture
def workspace(tmp_path) -> Path:
    """The run's workspace as the train step sees it, with the model the job "writes" there.

    kwok plays the job's pods, so nothing writes the model: it is there from the start.
    """
    root = tmp_path / "kfp-workspace"
    model = WorkPaths.under(root).model_dir
    model.mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weights")
    (model / "model.json").write_text("{}")
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "manifest.json").write_text("{}")
    return root


@pytest.fixture(scope="session")
def kueue_setup(kubectl) -> list[dict]:
    """The project's Kueue objects (k8s/kueue, k8s/kueue/mig), applied once; returns them."""
    objects = []
    for folder in ("kueue", "kueue/mig"):
        kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "k8s" / folder))
        objects += render(kubectl, folder)
    return objects


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


def make_namespace(request, core, kubectl, kueue_setup, labels=None, annotations=None):
    """Create a test namespace with its queues, account and RBAC; return (name, cleanup).

    It has the Katib metrics-collector injection label, a copy of every LocalQueue of
    k8s/kueue (and k8s/kueue/mig), the ServiceAccount ``pipeline-runner`` (KFP's runner
    account) and k8s/rbac rendered for it: the Role and RoleBinding in the namespace, the
    ClusterRole as it is, each ClusterRoleBinding copied as ``<name>-<namespace>`` with the
    subject moved to this namespace (and deleted by ``cleanup``).
    """
    # Short: KServe's raw-mode host name "<isvc>-predictor-<namespace>" must fit 63 characters.
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).removeprefix("test-")
    name = f"t-{slug[:16].strip('-')}-{uuid.uuid4().hex[:5]}"
    metadata = {
        "name": name,
        "labels": {KATIB_INJECTION: "enabled", "fmnist.test/tier": "cluster", **(labels or {})},
        "annotations": annotations or {},
    }
    core.create_namespace({"metadata": metadata})
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pipeline-runner"}}
    ]
    objects += copy.deepcopy([o for o in kueue_setup if o["kind"] == "LocalQueue"])
    objects += render(kubectl, "rbac")
    cluster_bindings = []
    for obj in objects:
        if obj["kind"] in CLUSTER_SCOPED:
            obj["metadata"].pop("namespace", None)
        else:
            obj["metadata"]["namespace"] = name
        if obj["kind"] == "ClusterRoleBinding":
            obj["metadata"]["name"] += f"-{name}"
            cluster_bindings.append(obj["metadata"]["name"])
        for subject in obj.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = name
    kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def cleanup():
        for binding in cluster_bindings:
            kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")
        core.delete_namespace(name, propagation_policy="Background")

    return name, cleanup


@pytest.fixture
def namespace_factory(request, core, kubectl, kueue_setup):
    """``namespace_factory(labels, annotations)``: a ``make_namespace`` deleted after the test."""
    cleanups = []

    def create(labels=None, annotations=None) -> str:
        name, cleanup = make_namespace(request, core, kubectl, kueue_setup, labels, annotations)
        cleanups.append(cleanup)
        return name

    yield create
    for cleanup in cleanups:
        cleanup()


@pytest.fixture
def namespace(namespace_factory) -> str:
    """A fresh namespace for one test (``make_namespace``); kwok plays its pods."""
    return namespace_factory()


@dataclass
class PipelineAccount:
    """The pipeline's ServiceAccount in a test namespace, and ways to act as it."""

    namespace: str
    service_account: str
    token: str
    kubeconfig: Path
    api_client: kubernetes.client.ApiClient


@pytest.fixture
def pipeline_account(namespace, api_client, kubeconfig, tmp_path) -> PipelineAccount:
    """A TokenRequest token for ``pipeline-runner`` and a kubeconfig / ApiClient using it.

    Requests made with it are authorized by the apiserver's RBAC against exactly the Role
    of k8s/rbac (nothing else is bound to that account).
    """
    token, config = account_kubeconfig(api_client, kubeconfig, "pipeline-runner", namespace)
    path = tmp_path / "pipeline-runner.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    client = kubernetes.config.new_client_from_config(str(path))
    return PipelineAccount(namespace, "pipeline-runner", token, path, client)


@pytest.fixture
def as_pipeline(pipeline_account, monkeypatch) -> PipelineAccount:
    """Make project code's ``kubernetes.config.load_incluster_config()`` / ``load_kube_config()``
    load the pipeline account's kubeconfig, as a KFP step pod running as it would.

    A ``load_kube_config`` of a named file (a MultiKueue worker's kubeconfig) loads that file,
    into the configuration it names."""
    real = kubernetes.config.load_kube_config

    def load_kube_config(config_file=None, **kwargs):
        return real(config_file=config_file or str(pipeline_account.kubeconfig), **kwargs)

    monkeypatch.setattr(
        kubernetes.config, "load_incluster_config", lambda *a, **k: load_kube_config()
    )
    monkeypatch.setattr(kubernetes.config, "load_kube_config", load_kube_config)
    monkeypatch.setenv("KUBECONFIG", str(pipeline_account.kubeconfig))
    return pipeline_account


@pytest.fixture
def pod_log(custom, tmp_path):
    """``pod_log(namespace, pod, text, container="pytorch")``: what `kubectl logs` returns for it.

    Writes ``text`` as a CRI log file (the format kwok reads: ``<time> stdout F <line>``) and
    creates a kwok ``Logs`` object (kwok.x-k8s.io/v1alpha1, named after the pod) pointing at
    it; kwok's kubelet API serves it through the apiserver. Note (kwok v0.8.0
    pkg/kwok/server/debugging_logs.go): a ``follow`` request streams until the client closes
    it, even after the pod has finished, unlike a real kubelet.
    """

    def set_log(namespace: str, pod: str, text: str, container: str = "pytorch"):
        path = tmp_path / f"{namespace}-{pod}-{container}.log"
        stamp = "2026-01-01T00:00:00.000000000Z"
        path.write_text("".join(f"{stamp} stdout F {line}\n" for line in text.splitlines()))
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [{"containers": [container], "logsFile": str(path)}]},
        }
        custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", body)
        return path

    return set_log


class Apiserver:
    """Stop and start the cluster's kube-apiserver (same flags, same etcd: state survives).

    tools/controlplane/harness/control_plane.py does the work: SIGTERM, SIGKILL after
    ``grace`` seconds, then `kwokctl start cluster`, which starts what is not running with its
    saved flags.
    """

    def __init__(self, harness):
        self._harness = harness

    def _call(self, function, *args):
        try:
            return function(*args)
        except SystemExit as error:  # the harness reports failures as SystemExit
            pytest.fail(f"kube-apiserver: {error}", pytrace=False)

    def stop(self, grace: float = 5) -> None:
        """Stop the kube-apiserver; returns once its process is gone."""
        self._call(self._harness.stop_apiserver, grace)

    def start(self, timeout: float = 60) -> None:
        """Start it again and wait until /readyz answers."""
        self._call(self._harness.start_apiserver, timeout)

    def restart(self, down_seconds: float = 0) -> None:
        """Stop, stay down ``down_seconds``, start; returns once it serves again."""
        self.stop()
        time.sleep(down_seconds)
        self.start()


@pytest.fixture
def apiserver(kubeconfig) -> Apiserver:
    """Control over the kube-apiserver, e.g. to restart it while a step is polling.

    Run the step in a thread, then ``apiserver.restart(down_seconds=5)``; clients see
    connection refused while it is down. Controllers reconnect by themselves.
    """
    server = Apiserver(_harness())
    yield server
    server.start()  # whatever the test did, leave it running


@pytest.fixture
def restart_apiserver(apiserver):
    """``restart_apiserver(down_seconds=0)``: stop the kube-apiserver, wait, start it again."""
    return apiserver.restart


@pytest.fixture(scope="session")
def cluster_state(kubeconfig) -> dict:
    """build/cluster/state.json: versions of the selectable builds, ports, pids."""
    return json.loads((BUILD / "state.json").read_text())


KFP_HOST = BUILD / "kfp-host"


@pytest.fixture(scope="session")
def kfp_host(kubeconfig) -> str:
    """The Kubeflow Pipelines API address on this cluster (build/cluster/kfp-host).

    Fails when the cluster has no KFP backend: tools/controlplane cannot build one, since
    the Go module proxy does not serve github.com/kubeflow/pipelines at a release tag, so
    one is attached by hand (docs/development.md, "Running the cluster test tier").
    """
    if not KFP_HOST.exists():
        pytest.fail(
            f"no Kubeflow Pipelines backend attached ({KFP_HOST} is missing)", pytrace=False
        )
    host = KFP_HOST.read_text().strip()
    try:
        with urllib.request.urlopen(f"{host}/apis/v2beta1/healthz", timeout=10) as answer:
            health = json.loads(answer.read())
    except OSError as error:
        pytest.fail(f"the KFP API server at {host} does not answer ({error})", pytrace=False)
    assert health["multi_user"] is False, health  # the single-user (standalone) install
    return host


@pytest.fixture(scope="session")
def kfp_client(kfp_host):
    """A ``kfp.Client`` for the cluster's KFP API server (single user: no token)."""
    import kfp

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with ... v2.0.0-beta.2"
        return kfp.Client(host=kfp_host)


def _attached(path: Path, what: str) -> str:
    """The address written to ``path`` when the KFP backend was attached; fails without it."""
    if not path.exists():
        pytest.fail(f"no {what} of an attached KFP backend ({path} is missing)", pytrace=False)
    return path.read_text().strip()


@pytest.fixture(scope="session")
def kfp_metadata(kfp_host):
    """KFP's ML Metadata store (``metadata-grpc-service``), read over gRPC (tests/cluster/mlmd.py).

    Its host:port is in build/cluster/kfp-metadata, e.g. after ``kubectl -n kubeflow
    port-forward svc/metadata-grpc-service 8080``.
    """
    from mlmd import MetadataStore

    return MetadataStore(_attached(BUILD / "kfp-metadata", "ML Metadata address"))


@pytest.fixture(scope="session")
def kfp_object_store(kfp_host):
    """A client of KFP's object store (``minio-service``) and the artifacts' bucket.

    build/cluster/kfp-object-store holds ``http://ACCESS:SECRET@HOST:PORT`` (the keys of the
    ``mlpipeline-minio-artifact`` Secret), e.g. after ``kubectl -n kubeflow port-forward
    svc/minio-service 9000``.
    """
    from urllib.parse import urlsplit

    from minio import Minio

    url = urlsplit(_attached(BUILD / "kfp-object-store", "object store address"))
    return Minio(
        f"{url.hostname}:{url.port}",
        access_key=url.username,
        secret_key=url.password,
        secure=url.scheme == "https",
    )


@pytest.fixture
def no_earlier_predictor(custom, core):
    """No InferenceService of an earlier run in a KFP namespace, nor its predictor pod."""
    remove_earlier_predictors(custom, core)


def remove_earlier_predictors(custom, core) -> None:
    """Delete the InferenceService of an earlier run in each KFP namespace; wait for its pods.

    Its 1 CPU would leave a run's Worker unschedulable on the real nodes' CPUs (seen: rank
    0 waited at the rendezvous until the step's timeout). A cluster with room needs nothing.
    """
    from kfp_helpers import ISVC_LABEL, KFP_NAMESPACES, MODEL_NAME

    for namespace in KFP_NAMESPACES:
        try:
            custom.delete_namespaced_custom_object(
                "serving.kserve.io", "v1beta1", namespace, "inferenceservices", MODEL_NAME
            )
        except kubernetes.client.exceptions.ApiException as error:
            assert error.status == 404, error
    selector = f"{ISVC_LABEL}={MODEL_NAME}"
    wait_for(
        lambda: not core.list_pod_for_all_namespaces(label_selector=selector).items,
        120,
        "the earlier predictors gone",
    )


KFP_LEGACY_HOST = BUILD / "kfp-legacy-host"


@pytest.fixture(scope="session")
def kfp_legacy_host(kubeconfig) -> str:
    """The address of an older KFP API server (2.2-2.14) on this cluster, if one runs.

    build/cluster/kfp-legacy-host; fails without it, like ``kfp_host``. It must watch a
    namespace of its own: a second KFP's persistence agent deletes the Workflows of runs its
    own API server does not know (kubeflow/pipelines 2.15.0 backend/src/apiserver/resource/
    resource_manager.go ReportWorkflowResource).
    """
    if not KFP_LEGACY_HOST.exists():
        pytest.fail(f"no older Kubeflow Pipelines backend ({KFP_LEGACY_HOST})", pytrace=False)
    return KFP_LEGACY_HOST.read_text().strip()


@pytest.fixture
def quick_polls(monkeypatch):
    """The steps' waits poll every second instead of every five or ten: the behaviour is the
    same, the tier faster (a module asks for it with ``pytest.mark.usefixtures``)."""
    from components.runtime import kserve, waiting

    monkeypatch.setattr(waiting, "POLL_SECONDS", 1.0)
    monkeypatch.setattr(kserve, "POLL_SECONDS", 1.0)
