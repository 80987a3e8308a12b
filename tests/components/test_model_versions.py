"""Model versions: the register step, deploying from the registry and ``fmnist models``.

Against recorded answers of a real Model Registry v0.3.8 server (kubeflow/model-registry
v0.3.8, ``model-registry proxy`` on MariaDB 10.11), played back over real HTTP by
tests/registry_tape.py; the Kubernetes side is tests/fake_kube.py. The real server, real
pods and whole pipeline runs are the by-hand ``model_registry`` tier
(tests/cluster/test_model_registry.py).

Upstream behaviour relied on, read in kubeflow/model-registry v0.3.8:
- ``clients/python/src/model_registry/_client.py``: ``register_model`` makes the
  RegisteredModel, the ModelVersion (custom properties: our metadata) and its ModelArtifact
  (the URI); ``get_model_version`` raises for a model that does not exist;
- ``pkg/inferenceservice-controller/controller.go``: with the inference-service-id label the
  controller only reads the record (``GetInferenceService``); with only the model ids it
  creates one from ``spec.predictor.model``, which our custom predictor does not have;
- ``manifests/kustomize/options/controller/overlays/base/params.env``: the label names;
- ``api/openapi/model-registry.yaml`` (v0.2.19, v0.3.4, v0.3.8) and the client's
  ``register_model`` (0.3.8, 0.3.11): a ModelArtifact's ``modelSource{Kind,Class,Group,Id,Name}``,
  which kubeflow/pipelines ``proposals/12020-model-registry-integration/README.md`` sets to
  ``kfp``, ``pipelinerun``, the run's namespace, id and name. The server answers them back in
  its JSON of sorted keys; the tapes of cluster registrations carry them, written by hand in
  that shape (recorded before the fields were sent).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from fake_kube import ISVC_URL, deployment, ready
from fake_predictor import FakePredictor
from kfp import dsl
from registry_tape import Tape

from cli.main import main
from components.runtime import kserve, kube, volumes, waiting
from components.runtime.registry import (
    INFERENCE_SERVICE_LABEL,
    MODEL_VERSION_LABEL,
    REGISTERED_MODEL_LABEL,
    URL_ANNOTATION,
    RegistryError,
)
from components.specs.params import Serving
from components.steps.deploy import deploy
from components.steps.register import register_model

TAPES = Path(__file__).parent / "registry_tapes"
RECORD_FROM = os.environ.get("FMNIST_RECORD_REGISTRY")  # a real server: record the tapes anew
NAMESPACE = "team-a"


@pytest.fixture
def tape(request, tmp_path):
    """The test's registry: its tape played back, or recorded from FMNIST_RECORD_REGISTRY.

    A recording uses a model of its own, so that it can be made again on a server that
    already holds earlier ones; the tape keeps its name as a placeholder.
    """
    unique = uuid.uuid4().hex[:8] if RECORD_FROM else "taped"
    substitutions = {"root": str(tmp_path), "model": f"fmnist-{unique}"}
    with Tape(TAPES / f"{request.node.name}.json", substitutions, RECORD_FROM) as played:
        yield played
    assert played.mismatches == []
    assert RECORD_FROM or played.position == len(played.exchanges), "answers left unasked"


def model_dir(root: Path, name: str, accuracy: float) -> Path:
    """A model directory as the trainer writes it (the weights are not read here)."""
    path = root / name
    path.mkdir()
    (path / "model.pt").write_bytes(b"weights of " + name.encode())
    info = {
        "metrics": {"accuracy": accuracy, "loss": 0.3},
        "training": {
            "config": {"epochs": 10, "batch_size": 128, "lr": 0.002, "optimizer": "adamw"},
            "world_size": 2,
        },
        "versions": {"torch": "2.9.1+cu128"},
    }
    (path / "model.json").write_text(json.dumps(info))
    return path


def register(tape: Tape, path: Path, run_id: str, target: str = "local", accuracy=0.9) -> str:
    """The register step as KFP calls it; the version's id."""
    metrics = dsl.Metrics(uri=str(path.parent / f"metrics-{run_id}"))
    metrics.metadata.update({"accuracy": accuracy, "loss": 0.3})
    return register_model.python_func(
        model=dsl.Model(uri=str(path)),
        metrics=metrics,
        serving=serving(tape).to_dict(),
        target=target,
        run_id=run_id,
        run_name=f"nightly-{run_id}",
    )


def serving(tape: Tape, **changes) -> Serving:
    return Serving(model_name=tape.substitutions["model"], model_registry=tape.address, **changes)


def fmnist(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_registered_versions_are_listed_and_shown(tape, tmp_path, capsys):
    first = register(tape, model_dir(tmp_path, "one", 0.9012), "run-1", accuracy=0.9012)
    second = register(tape, model_dir(tmp_path, "two", 0.9123), "run-2", accuracy=0.9123)
    assert first != second
    capsys.readouterr()
    model = ["--model-registry", tape.address, "--model-name", tape.substitutions["model"]]
    code, out, _ = fmnist(capsys, "models", "list", *model, "--namespace", NAMESPACE)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [row[:4] for row in rows] == [
        ["run-1", first, "0.9012", "0.3000"],
        ["run-2", second, "0.9123", "0.3000"],
    ]
    code, out, _ = fmnist(capsys, "models", "show", "run-1", *model)
    assert code == 0
    shown = dict(line.split(None, 1) for line in out.splitlines())
    assert shown["uri"] == str(tmp_path / "one")
    assert shown["served"] == "no"
    assert "source" not in shown  # a local run: no run in a KFP server to link to
    assert {key: shown[key] for key in ("lr", "epochs", "world_size", "kfp_run_id")} == {
        "lr": "0.002",
        "epochs": "10",
        "world_size": "2",
        "kfp_run_id": "run-1",
    }


def test_bad_input_is_one_line_exit_2_and_changes_nothing(tape, tmp_path, capsys, fake_k8s):
    register(tape, model_dir(tmp_path, "one", 0.9), "run-1")
    capsys.readouterr()
    registry = ["--model-registry", tape.address]
    model = [*registry, "--model-name", tape.substitutions["model"]]
    code, _, err = fmnist(capsys, "models", "show", "run-9", *model)
    assert (code, err.count("\n")) == (2, 1)
    assert "has no version 'run-9' (it has: run-1)" in err
    code, _, err = fmnist(capsys, "models", "deploy", "run-9", *model)
    assert (code, err.count("\n")) == (2, 1)
    assert "has no version 'run-9'" in err
    code, _, err = fmnist(capsys, "models", "list", *registry, "--model-name", "another-model")
    assert (code, err.count("\n")) == (2, 1)
    assert "has no model named 'another-model'" in err
    assert fake_k8s.custom.calls == []  # nothing applied


def test_a_retried_register_step_adopts_its_version_and_refuses_another_model(tape, tmp_path):
    path = model_dir(tmp_path, "one", 0.9)
    first = register(tape, path, "run-1")
    assert register(tape, path, "run-1") == first
    with pytest.raises(RegistryError, match="already has a version run-1 at .*/one, not .*/two"):
        register(tape, model_dir(tmp_path, "two", 0.9), "run-1")


@pytest.fixture
def cluster(monkeypatch, tmp_path, fake_k8s, crd_schemas):
    """The fake cluster with KServe's schema, the model store at tmp_path/store, quick polls."""
    isvc = "serving.kserve.io/v1beta1"
    fake_k8s.serve_schema(isvc, "InferenceService", crd_schemas[(isvc, "InferenceService")])
    monkeypatch.setattr(waiting, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(kserve, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(volumes, "MODEL_STORE", str(tmp_path / "store"))
    monkeypatch.setattr(kube, "current_namespace", lambda: NAMESPACE)
    return fake_k8s


def rolls_out(cluster, name: str, uri: str) -> None:
    """Script the next deploy's cluster: the predictor Deployment with ``uri``, then Ready."""
    cluster.custom.statuses["inferenceservices"] = [ready(1, mode="Standard")]
    template = deployment(uri)
    template.metadata.name = f"{name}-predictor"
    cluster.apps.deployments = [[template]]


def served(cluster, name: str) -> dict:
    return cluster.custom.objects[("inferenceservices", NAMESPACE, name)]


def test_deploy_serves_the_registered_version_and_models_deploy_rolls_back(
    tape, tmp_path, cluster, capsys
):
    name = tape.substitutions["model"]
    uri = {run: f"pvc://fmnist-models/{name}/{run}" for run in ("run-1", "run-2")}
    versions = {}
    for run, accuracy in (("run-1", 0.91), ("run-2", 0.92)):
        path = model_dir(tmp_path, run, accuracy)
        versions[run] = register(tape, path, run, "cluster", accuracy)
        assert (tmp_path / "store" / name / run / "model.pt").is_file()  # published first
        rolls_out(cluster, name, uri[run])
        url = deploy.python_func(
            model=dsl.Model(uri=str(tmp_path / run)),
            dataset=dsl.Dataset(uri=str(tmp_path / "unused")),
            serving=serving(tape, serving_timeout_seconds=5).to_dict(),
            target="cluster",
            run_id=run,
        )
        assert url == ISVC_URL
    isvc = served(cluster, name)
    container = isvc["spec"]["predictor"]["containers"][0]
    assert container["env"] == [{"name": "STORAGE_URI", "value": uri["run-2"]}]
    labels = isvc["metadata"]["labels"]
    assert labels[MODEL_VERSION_LABEL] == versions["run-2"]
    record = labels[INFERENCE_SERVICE_LABEL]
    assert isvc["metadata"]["annotations"][URL_ANNOTATION] == tape.address

    rolls_out(cluster, name, uri["run-1"])
    argv = ["models", "deploy", "run-1", "--model-registry", tape.address, "--model-name", name]
    code, out, _ = fmnist(capsys, *argv, "--serving-timeout-seconds", "5")
    assert code == 0, out
    assert f"{name} version run-1 serves at {ISVC_URL}" in out
    isvc = served(cluster, name)
    container = isvc["spec"]["predictor"]["containers"][0]
    assert container["env"] == [{"name": "STORAGE_URI", "value": uri["run-1"]}]
    labels = isvc["metadata"]["labels"]
    assert labels[MODEL_VERSION_LABEL] == versions["run-1"]
    assert labels[INFERENCE_SERVICE_LABEL] == record  # one record, now on run-1
    assert labels[REGISTERED_MODEL_LABEL]
    code, out, _ = fmnist(
        capsys, "models", "list", "--model-registry", tape.address, "--model-name", name
    )
    marked = [line.split()[1] for line in out.splitlines() if line.startswith("*  ")]
    assert marked == ["run-1"]
    assert out.splitlines()[-1] == (
        f"* served by InferenceService {NAMESPACE}/{name} at {ISVC_URL}"  # the record's url
    )
    code, out, _ = fmnist(
        capsys, "models", "show", "run-2", "--model-registry", tape.address, "--model-name", name
    )
    shown = dict(line.split(None, 1) for line in out.splitlines())
    assert (code, shown["served"]) == (0, "no")
    assert shown["source"] == f"kfp pipelinerun {NAMESPACE}/nightly-run-2 (run-2)"


def test_a_registry_that_does_not_answer_fails_in_one_line_and_publishes_nothing(
    tmp_path, monkeypatch
):
    from components.runtime.ports import free_port

    monkeypatch.setattr(volumes, "MODEL_STORE", str(tmp_path / "store"))
    path = model_dir(tmp_path, "one", 0.9)
    down = f"http://127.0.0.1:{free_port()}"
    metrics = dsl.Metrics(uri=str(tmp_path / "metrics"))
    metrics.metadata.update({"accuracy": 0.9, "loss": 0.3})
    with pytest.raises(RegistryError) as error:
        register_model.python_func(
            model=dsl.Model(uri=str(path)),
            metrics=metrics,
            serving=Serving(model_registry=down).to_dict(),
            target="cluster",
            run_id="run-1",
            run_name="nightly-run-1",
        )
    assert str(error.value).startswith(f"the model registry at {down} does not answer: ")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "store").exists()
    assert (path / "model.pt").read_bytes() == b"weights of one"  # the model stays


def test_a_roll_back_that_never_serves_is_one_line_and_exit_1(tape, tmp_path, cluster, capsys):
    name = tape.substitutions["model"]
    register(tape, model_dir(tmp_path, "run-1", 0.9), "run-1", "cluster")
    cluster.custom.statuses["inferenceservices"] = [{}]  # never Ready
    cluster.apps.deployments = [[]]
    capsys.readouterr()
    argv = ["models", "deploy", "run-1", "--model-registry", tape.address, "--model-name", name]
    code, _, err = fmnist(capsys, *argv, "--serving-timeout-seconds", "1")
    assert (code, err.count("\n")) == (1, 1), err
    assert err.startswith(f"fmnist models deploy: InferenceService {NAMESPACE}/{name} ")


def test_a_register_step_that_failed_between_version_and_artifact_resumes(tape, tmp_path):
    """The first try's artifact write fails (500) after its version was made; the retry finds
    the version with no artifact (404) and writes it, instead of refusing forever.

    The tape is the retried-register tape's exchanges in this order, with those two
    answers written by hand in the server's shape; the artifact request is the one
    ``register_model`` sends (model-registry 0.3.8/0.3.11 ``_client.py``,
    ``_register_model_artifact``).
    """
    path = model_dir(tmp_path, "one", 0.9)
    with pytest.raises(RegistryError, match="registering .* run-1 failed: "):
        register(tape, path, "run-1")
    version = register(tape, path, "run-1")
    assert version == "90"


def test_a_rollout_that_fails_restores_the_spec_and_leaves_the_registry_on_the_serving_version(
    tape, tmp_path, cluster, capsys
):
    """run-1 serves; run-2's rollout never finishes: the InferenceService gets back run-1's
    spec and ids, and the registry's record, written only after a rollout is done, still
    names run-1. The tape is the rolls-back tape's exchanges up to run-2's record lookup,
    then its closing ``models list`` (the server's answers for a record on run-1)."""
    name = tape.substitutions["model"]
    first = register(tape, model_dir(tmp_path, "run-1", 0.91), "run-1", "cluster", 0.91)
    rolls_out(cluster, name, f"pvc://fmnist-models/{name}/run-1")
    step = {"dataset": dsl.Dataset(uri=str(tmp_path / "unused")), "target": "cluster"}
    deploy.python_func(
        model=dsl.Model(uri=str(tmp_path / "run-1")),
        serving=serving(tape, serving_timeout_seconds=5).to_dict(),
        run_id="run-1",
        **step,
    )
    before = served(cluster, name)
    register(tape, model_dir(tmp_path, "run-2", 0.92), "run-2", "cluster", 0.92)
    cluster.custom.statuses["inferenceservices"] = [{}]  # never Ready
    cluster.apps.deployments = [[]]
    capsys.readouterr()
    with pytest.raises(TimeoutError):
        deploy.python_func(
            model=dsl.Model(uri=str(tmp_path / "run-2")),
            serving=serving(tape, serving_timeout_seconds=1).to_dict(),
            run_id="run-2",
            **step,
        )
    out = capsys.readouterr().out
    assert (
        f"rollout failed; restored InferenceService {NAMESPACE}/{name} to the spec that was "
        f"serving (pvc://fmnist-models/{name}/run-1)"
    ) in out
    after = served(cluster, name)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["labels"][MODEL_VERSION_LABEL] == first
    code, out, _ = fmnist(
        capsys, "models", "list", "--model-registry", tape.address, "--model-name", name
    )
    assert code == 0
    assert [line.split()[1] for line in out.splitlines() if line.startswith("*  ")] == ["run-1"]


def test_a_model_rolled_back_after_its_post_deploy_check_leaves_the_registry_on_the_serving_version(
    tape, tmp_path, cluster, capsys, packed_small
):
    """run-1 serves and passes its check; run-2 rolls out, answers wrongly and is rolled back:
    the InferenceService gets back run-1's spec and ids, and the record, written only after
    the check passed, still names run-1. The registry is asked exactly what it is asked when
    a rollout fails, so the tape is that test's (same server answers)."""
    name = tape.substitutions["model"]
    uri = {run: f"pvc://fmnist-models/{name}/{run}" for run in ("run-1", "run-2")}
    first = register(tape, model_dir(tmp_path, "run-1", 0.91), "run-1", "cluster", 0.91)
    step = {"dataset": dsl.Dataset(uri=str(packed_small)), "target": "cluster", "accuracy": 0.9}
    with FakePredictor(packed_small) as predictor:
        address = {"url": predictor.url}
        rolls_out(cluster, name, uri["run-1"])
        cluster.custom.statuses["inferenceservices"] = [ready(1, "Standard", address=address)]
        deploy.python_func(
            model=dsl.Model(uri=str(tmp_path / "run-1")),
            serving=serving(tape, serving_timeout_seconds=5).to_dict(),
            run_id="run-1",
            **step,
        )
        before = served(cluster, name)
        register(tape, model_dir(tmp_path, "run-2", 0.92), "run-2", "cluster", 0.92)
        cluster.apps.deployments = [[deployment(uri["run-2"])], [deployment(uri["run-1"], 3, 3)]]
        predictor.shift = 1
        with pytest.raises(kserve.DeployFailed) as error:
            deploy.python_func(
                model=dsl.Model(uri=str(tmp_path / "run-2")),
                serving=serving(tape, serving_timeout_seconds=5).to_dict(),
                run_id="run-2",
                **step,
            )
    assert str(error.value).startswith(
        f"InferenceService {NAMESPACE}/{name} serves {uri['run-1']} (model version id {first}) "
        f"again; the new model {uri['run-2']} failed its post-deploy check: it answered 0.0000"
    )
    after = served(cluster, name)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    capsys.readouterr()
    code, out, _ = fmnist(
        capsys, "models", "list", "--model-registry", tape.address, "--model-name", name
    )
    assert code == 0
    assert [line.split()[1] for line in out.splitlines() if line.startswith("*  ")] == ["run-1"]
