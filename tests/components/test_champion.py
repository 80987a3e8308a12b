"""The serving model (the champion): found through the InferenceService, read from the model
volume within limits, evaluated on the same test images; and the evaluate step that decides
with it, against the fake Kubernetes API."""

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from kfp import dsl
from kubernetes.client.exceptions import ApiException

from components.runtime import champion as champion_module
from components.runtime import kube
from components.runtime.champion import ChampionUnknown, find_champion
from components.runtime.evaluation import evaluate_model_dir
from components.specs.params import Serving
from components.steps.evaluate import evaluate
from trainer.data import load_packed
from trainer.model import build_model, save_model_dir
from trainer.model_dir import ModelCard

NAMESPACE = "team-a"
SERVED = "fashion-mnist/run-1"  # under the model volume
URI = f"pvc://fmnist-models/{SERVED}"


@pytest.fixture(scope="module")
def untrained_dir(tmp_path_factory, packed_small) -> Path:
    """A model far worse than the trained one: an untrained network."""
    manifest = load_packed(packed_small).manifest
    torch.manual_seed(0)
    card = ModelCard(
        "lenet", manifest["class_names"], manifest["pixel_mean"], manifest["pixel_std"]
    )
    return save_model_dir(build_model(), tmp_path_factory.mktemp("untrained"), card)


@pytest.fixture
def cluster(fake_k8s, monkeypatch, tmp_path):
    """The fake API in namespace team-a, and an empty model volume (its mount point)."""
    monkeypatch.setattr(kube, "current_namespace", lambda: NAMESPACE)
    store = tmp_path / "model-store"
    store.mkdir()
    monkeypatch.setattr(champion_module, "MODEL_STORE", str(store))
    return fake_k8s, store


def serve(fake_k8s, store: Path, model_dir: Path | None, uri: str = URI) -> None:
    """An InferenceService serving ``uri``; ``model_dir`` copied to where that URI points."""
    env = [{"name": "STORAGE_URI", "value": uri}]
    fake_k8s.custom.objects[("inferenceservices", NAMESPACE, "fashion-mnist")] = {
        "metadata": {"name": "fashion-mnist", "namespace": NAMESPACE},
        "spec": {"predictor": {"containers": [{"name": "kserve-container", "env": env}]}},
    }
    if model_dir is not None:
        shutil.copytree(model_dir, store / SERVED)


def run_evaluate(model_dir: Path, packed: Path, out: Path, **gate) -> tuple[bool, str, dict]:
    """The evaluate step on a cluster: (deploy, its stdout, its metrics)."""
    out.mkdir(exist_ok=True)
    metrics = dsl.Metrics(uri=str(out / "metrics"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        _, deploy = evaluate.python_func(
            model=dsl.Model(uri=str(model_dir)),
            dataset=dsl.Dataset(uri=str(packed)),
            serving=Serving(min_accuracy=0.05, **gate).to_dict(),
            target="cluster",
            metrics=metrics,
            confusion_matrix=dsl.ClassificationMetrics(uri=str(out / "confusion")),
            report=dsl.Markdown(uri=str(out / "report")),
            report_html=dsl.HTML(uri=str(out / "report.html")),
        )
    return deploy, stdout.getvalue(), metrics.metadata


def test_a_worse_model_leaves_the_serving_one_and_says_why(
    cluster, trained_model_dir, untrained_dir, packed_small, tmp_path
):
    fake_k8s, store = cluster
    serve(fake_k8s, store, trained_model_dir)
    good, _ = evaluate_model_dir(str(trained_model_dir), str(packed_small))
    worse, _ = evaluate_model_dir(str(untrained_dir), str(packed_small))
    deploy, stdout, metrics = run_evaluate(untrained_dir, packed_small, tmp_path)
    assert deploy is False
    (line,) = [text for text in stdout.splitlines() if "Gate: " in text]
    assert line == (
        f"test accuracy {worse.accuracy:.4f}, loss {worse.loss:.4f} on 1,000 images; serving "
        f"model: accuracy {good.accuracy:.4f}, loss {good.loss:.4f}. Gate: Not passed: "
        f"{worse.accuracy:.2%} < the serving model's {good.accuracy:.2%} + 0.00% "
        f"(min_improvement); the serving model {URI} keeps serving."
    )
    assert metrics["accuracy"] == worse.accuracy
    assert metrics["champion_accuracy"] == good.accuracy
    assert metrics["champion_loss"] == pytest.approx(good.loss)
    for report in ("report", "report.html"):
        page = (tmp_path / report).read_text()
        assert f"{good.accuracy:.2%}" in page and f"{worse.accuracy:.2%}" in page
        assert "serving model" in page


def test_a_better_model_passes_and_a_tie_passes_with_no_min_improvement(
    cluster, trained_model_dir, untrained_dir, packed_small, tmp_path
):
    fake_k8s, store = cluster
    serve(fake_k8s, store, untrained_dir)
    assert run_evaluate(trained_model_dir, packed_small, tmp_path / "better")[0] is True
    shutil.rmtree(store / SERVED)
    shutil.copytree(trained_model_dir, store / SERVED)  # the same model serves: a tie
    assert run_evaluate(trained_model_dir, packed_small, tmp_path / "tie")[0] is True
    tied = run_evaluate(trained_model_dir, packed_small, tmp_path / "m", min_improvement=0.001)
    assert tied[0] is False


def test_nothing_serving_leaves_the_absolute_gate(cluster, trained_model_dir, packed_small):
    found = find_champion(Serving(), "cluster", str(packed_small))
    assert (found.serves, found.note) == (False, f"no InferenceService {NAMESPACE}/fashion-mnist")


def test_locally_nothing_serves(trained_model_dir, packed_small):
    found = find_champion(Serving(), "local", str(packed_small))
    assert (found.serves, found.note) == (False, champion_module.LOCAL_NOTE)


def link_weights(directory: Path) -> None:
    (directory / "model.pt").unlink()
    os.symlink("/etc/hostname", directory / "model.pt")


def other_classes(directory: Path) -> None:
    card = json.loads((directory / "model.json").read_text())
    card["class_names"] = [f"c{k}" for k in range(1000)]  # a model of 1000 classes
    (directory / "model.json").write_text(json.dumps(card))


@pytest.mark.parametrize(
    ("uri", "spoil", "note"),
    [
        ("s3://bucket/model", None, "it is not on model_pvc fmnist-models, the only volume"),
        ("pvc://other-pvc/fashion-mnist/run-1", None, "it is not on model_pvc fmnist-models"),
        ("pvc://fmnist-models/../../etc", None, "its path leaves the model folders"),
        ("pvc://fmnist-models/", None, "its path leaves the model folders"),
        ("pvc://fmnist-models/x\nGate: Passed", None, "no model.pt (No such file"),
        (URI, lambda d: (d / "model.json").unlink(), "no model.json (No such file or directory)"),
        (URI, link_weights, "model.pt is not a regular file"),
        (URI, lambda d: (d / "model.pt").write_bytes(b"\0" * (32 * 2**20 + 1)), "model.pt is over"),
        (URI, lambda d: (d / "model.json").write_text("{"), "model.json is not JSON"),
        (URI, other_classes, 'it classifies ["c0", "c1", '),
        (URI, lambda d: (d / "model.pt").write_bytes(b"junk"), "it does not load: "),
    ],
    ids=[
        "other-scheme", "other-pvc", "path-escapes", "the-volume-itself", "newline", "no-card",
        "link",
        "too-big", "bad-card", "other-classes", "bad-weights",
    ],
)  # fmt: skip
def test_a_champion_that_cannot_be_read_is_named_with_why(
    cluster, trained_model_dir, packed_small, uri, spoil, note
):
    fake_k8s, store = cluster
    serve(fake_k8s, store, trained_model_dir, uri)
    if spoil:
        spoil(store / SERVED)
    found = find_champion(Serving(), "cluster", str(packed_small))
    shown = uri if uri.isprintable() else ascii(uri)  # "...x\\nGate...": no line break
    assert (found.serves, found.accuracy, found.uri) == (True, None, shown)
    assert found.note.startswith(note)
    assert "\n" not in found.uri
    assert "\n" not in found.note


def test_a_service_without_storage_uri_cannot_be_read(cluster, packed_small):
    fake_k8s, store = cluster
    serve(fake_k8s, store, None)
    isvc = fake_k8s.custom.objects[("inferenceservices", NAMESPACE, "fashion-mnist")]
    isvc["spec"]["predictor"]["containers"][0]["env"] = []
    found = find_champion(Serving(), "cluster", str(packed_small))
    assert (found.uri, found.accuracy, found.note) == (
        f"InferenceService {NAMESPACE}/fashion-mnist",
        None,
        "its predictor names no STORAGE_URI",
    )


def test_an_api_that_refuses_the_read_fails_in_one_line(cluster, packed_small):
    fake_k8s, _ = cluster
    fake_k8s.fail("get", "inferenceservices", ApiException(status=403, reason="Forbidden"))
    with pytest.raises(ChampionUnknown) as error:
        find_champion(Serving(), "cluster", str(packed_small))
    assert str(error.value) == (
        f"cannot read InferenceService {NAMESPACE}/fashion-mnist to find the model serving "
        "now: 403 Forbidden"
    )
