"""Model versions against a real Kubeflow Model Registry server, attached to the tier by hand.

The server's Go module is refused by the module proxy (github.com/kubeflow/model-registry:
403), so tools/controlplane cannot build it: it is built from a checkout of
kubeflow/model-registry v0.3.8 (``model-registry proxy`` over MariaDB 10.11) and its address
written to build/cluster/model-registry (docs/development.md, "Model Registry: attached by
hand"). Without it these tests fail; they never skip. ``make test-model-registry`` runs them.

- Two whole pipeline runs (``fmnist run``: kfp.local, torchrun with gloo, the real register
  and deploy steps) register two versions; ``fmnist models list`` shows both with the
  accuracy each run measured.
- On the tier's real nodes: the register and deploy steps (as the pipeline's account) serve
  a first and a second model from the registry; ``fmnist models deploy`` rolls back, and the
  predictor pod answers real test images as the first model does here. The compiled
  register-model step also runs in its own pod, as KFP's launcher starts it.
- A registry that does not answer fails the register step of a whole run in one line; the
  trained model stays in the run's outputs.

Upstream behaviour relied on: kubeflow/model-registry v0.3.8 ``cmd/proxy.go`` (the REST
server on ``--port``, migrating its schema at start), ``pkg/inferenceservice-controller/
controller.go`` and the KServe behaviour named in test_real_serving.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
from kfp import dsl
from kfp.dsl import Metrics, Model
from real_pods import (  # noqa: F401  (real_namespace: this module's ``namespace``)
    bind_workspace,
    real_namespace,
    running_predictor,
    v1_predictions,
)
from test_real_components import (  # noqa: F401  (pipeline_spec: the compiled pipeline)
    PIPELINE_ROOT,
    executor_input,
    local_folder,
    pipeline_spec,
    run_pod,
    step_pod,
    workspace_artifact,
)
from test_real_serving import STORE, known_images, local_probabilities  # noqa: F401

from components.runtime import volumes
from components.runtime.ports import free_port
from components.runtime.registry import MODEL_VERSION_LABEL, SOURCE_FIELDS, Registry
from components.specs import pods
from components.specs.params import Serving
from components.steps.deploy import deploy
from components.steps.register import register_model
from serving.defaults import MODEL_NAME
from trainer.model_dir import MODEL_STORE

pytestmark = [pytest.mark.cluster, pytest.mark.model_registry]
BUILD = Path(__file__).resolve().parents[2] / "build" / "cluster"
REGISTRY_FILE = BUILD / "model-registry"
SLICE = ["--epochs", "1", "--train-limit", "2000", "--test-limit", "500", "--workers", "2"]


@pytest.fixture(scope="session")
def registry_address() -> str:
    """The attached Model Registry's address (build/cluster/model-registry); fails without."""
    if not REGISTRY_FILE.exists():
        pytest.fail(f"no Model Registry attached ({REGISTRY_FILE} is missing)", pytrace=False)
    address = REGISTRY_FILE.read_text().strip()
    try:
        urllib.request.urlopen(
            f"{address}/api/model_registry/v1alpha3/registered_models", timeout=10
        ).close()
    except OSError as error:
        pytest.fail(f"the Model Registry at {address} does not answer ({error})", pytrace=False)
    return address


def fmnist(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The ``fmnist`` command, as a user runs it."""
    command = [str(Path(sys.executable).with_name("fmnist")), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def whole_run(run_dir: Path, model: str, registry: str, data_dir) -> subprocess.CompletedProcess:
    """``fmnist run`` on a slice, registering in ``registry``."""
    argv = ["run", "--run-dir", str(run_dir), "--data-dir", str(data_dir), *SLICE]
    argv += ["--min-accuracy", "0.3", "--model-name", model, "--model-registry", registry]
    return fmnist(*argv)


def registered_version(output: str) -> str:
    """The version the register step says it registered (named after kfp.local's run id)."""
    found = re.search(r"registered \S+ version (\S+) \(id \d+\)", output)
    assert found, output
    return found[1]


@pytest.mark.timeout(900)
def test_two_whole_runs_register_two_versions_listed_with_their_accuracy(
    registry_address, tmp_path, fashion_mnist_dir
):
    model = f"fmnist-{uuid.uuid4().hex[:6]}"
    runs, versions = [tmp_path / "first", tmp_path / "second"], []
    for run_dir in runs:
        done = whole_run(run_dir, model, registry_address, fashion_mnist_dir)
        assert done.returncode == 0, done.stdout + done.stderr
        versions.append(registered_version(done.stdout))
    listed = fmnist("models", "list", "--model-registry", registry_address, "--model-name", model)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    measured = [json.loads((run / "metrics.json").read_text()) for run in runs]
    assert [(row[0], row[2]) for row in rows] == [
        (version, f"{metrics['accuracy']:.4f}")
        for version, metrics in zip(versions, measured, strict=True)
    ]
    version = Registry(registry_address).version(model, versions[0])
    assert Path(version.uri, "model.pt").is_file()  # a local run registers its model folder
    assert version.properties["epochs"] == 1 and version.properties["world_size"] == 2


@pytest.mark.timeout(900)
def test_a_registry_that_is_down_fails_the_register_step_and_keeps_the_model(
    tmp_path, fashion_mnist_dir
):
    down = f"http://127.0.0.1:{free_port()}"
    done = whole_run(tmp_path / "run", "fmnist-down", down, fashion_mnist_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    failure = f"the model registry at {down} does not answer"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if failure in line]
    assert lines, done.stdout + done.stderr
    assert "register-model" in done.stdout
    (model,) = (tmp_path / "run" / "outputs").glob("*/train/model")
    assert (model / "model.pt").is_file() and (model / "model.json").is_file()


def train_second_model(packed_small, root: Path) -> Path:
    """Another real model (another seed, one epoch): its answers differ from the first's."""
    out = root / "second-model"
    argv = [sys.executable, "-m", "trainer", "--epochs", "1", "--seed", "7"]
    argv += ["--data-dir", str(packed_small), "--model-dir", str(out), "--log-interval", "1000"]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


@pytest.mark.real_pods
@pytest.mark.timeout(1500)
def test_models_deploy_rolls_the_predictor_back_to_the_first_version(
    registry_address,
    as_pipeline,
    namespace,
    core,
    monkeypatch,
    trained_model_dir,
    packed_small,
    known_images,  # noqa: F811
    tmp_path,
    quick_polls,
):
    images, _ = known_images
    store = bind_workspace(core, namespace, STORE)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(store.path))
    serving = Serving(model_pvc=STORE, serving_timeout_seconds=420, model_registry=registry_address)
    models = {"run-a": trained_model_dir, "run-b": train_second_model(packed_small, tmp_path)}
    runs = {run: f"{run}-{uuid.uuid4().hex[:6]}" for run in models}
    for run, model_dir in models.items():
        metrics = dsl.Metrics(uri=str(tmp_path / f"metrics-{run}"))
        metrics.metadata.update(json.loads((model_dir / "model.json").read_text())["metrics"])
        artifact = dsl.Model(uri=str(model_dir))
        step = {"serving": serving.to_dict(), "target": "cluster", "run_id": runs[run]}
        register_model.python_func(
            model=artifact, metrics=metrics, run_name=f"nightly-{run}", **step
        )
        dataset = dsl.Dataset(uri=str(packed_small))
        deploy.python_func(model=artifact, dataset=dataset, **step)
    registry = Registry(registry_address)
    first = registry.version(MODEL_NAME, runs["run-a"])
    source = {field: first.source.get(field) for field in SOURCE_FIELDS if "group" not in field}
    assert source == {  # the group is the namespace of the kubeconfig's context here
        "model_source_kind": "kfp",
        "model_source_class": "pipelinerun",
        "model_source_name": "nightly-run-a",
        "model_source_id": runs["run-a"],
    }

    rollback = fmnist(
        "models", "deploy", runs["run-a"], "--model-registry", registry_address,
        "--model-pvc", STORE, "--namespace", namespace, "--serving-timeout-seconds", "420",
    )  # fmt: skip
    assert rollback.returncode == 0, rollback.stdout + rollback.stderr
    isvc = json.loads(
        subprocess.run(
            ["kubectl", "get", "inferenceservice", MODEL_NAME, "-n", namespace, "-o", "json"],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    assert isvc["metadata"]["labels"][MODEL_VERSION_LABEL] == first.id
    served = registry.served(namespace, MODEL_NAME)
    assert (served.version_id, served.url) == (first.id, isvc["status"]["url"])
    pod = running_predictor(core, namespace, MODEL_NAME)
    predictions = v1_predictions(pod, MODEL_NAME, images)
    got = np.array([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(got, local_probabilities(models["run-a"], images), atol=1e-4)
    second = local_probabilities(models["run-b"], images)
    assert not np.allclose(got, second, atol=1e-3)  # not the model it replaced


def pod_address(core, registry_address: str) -> str:
    """The registry as pods reach it: this machine's address on the real nodes' network.

    The real nodes run on this machine, and real-node-1's InternalIP is this machine's own
    address, so a server listening on all addresses (``--hostname 0.0.0.0``) answers there.
    """
    node = core.read_node("real-node-1")
    (internal,) = [a.address for a in node.status.addresses if a.type == "InternalIP"]
    port = registry_address.rsplit(":", 1)[1].rstrip("/")
    return f"http://{internal}:{port}"


@pytest.mark.real_pods
@pytest.mark.parametrize("namespace", ["restricted"], indirect=True)
@pytest.mark.timeout(900)
def test_the_register_step_runs_in_its_pod_as_the_launcher_starts_it(
    registry_address,
    namespace,
    core,
    trained_model_dir,
    pipeline_spec,  # noqa: F811
):
    """register-model from the compiled pipeline, in the components image, in a real pod:
    uid 10001 under Pod Security "restricted", the pipeline's account (its token is what the
    client sends), the model PVC at /mnt/model-store. It publishes the model there and
    registers the version with that volume's URI, which the registry then holds."""
    workspace, store = bind_workspace(core, namespace), bind_workspace(core, namespace, STORE)
    run, model = uuid.uuid4().hex[:8], f"fmnist-{uuid.uuid4().hex[:6]}"
    model_uri = f"{PIPELINE_ROOT}/{run}/train/model"
    shutil.copytree(trained_model_dir, local_folder(workspace, model_uri))  # train's output
    measured = json.loads((trained_model_dir / "model.json").read_text())["metrics"]
    address = pod_address(core, registry_address)
    arguments = {
        "model": workspace_artifact(Model, model_uri),
        "metrics": workspace_artifact(Metrics, f"{PIPELINE_ROOT}/{run}/evaluate/metrics", measured),
        "serving": Serving(model_name=model, model_registry=address).to_dict(),
        "target": "cluster",
        "run_id": run,
    }
    body = step_pod(
        pipeline_spec, "register-model", run,
        executor_input(pipeline_spec, "register-model", run, arguments),
        workspace.pvc,
    )  # fmt: skip
    body["spec"]["volumes"].append(pods.pvc_volume("model-store", STORE))
    mount = {"name": "model-store", "mountPath": MODEL_STORE}
    body["spec"]["containers"][0]["volumeMounts"].append(mount)
    log = run_pod(core, namespace, body)

    version = Registry(registry_address).version(model, run)
    assert f"registered {model} version {run} (id {version.id}) in {address}" in log, log
    assert version.uri == f"pvc://{STORE}/{model}/{run}"
    assert version.accuracy == measured["accuracy"]
    published = store.path / model / run
    assert (published / "model.pt").read_bytes() == (trained_model_dir / "model.pt").read_bytes()
    assert published.stat().st_gid == pods.IMAGE_USER  # the pod's fsGroup on the volume
