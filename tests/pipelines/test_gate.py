"""The accuracy gate by behaviour: the real evaluate-and-deploy sub-pipeline under kfp.local.

A model is deployed when its test accuracy reaches ``min_accuracy`` (``>=``, DESIGN.md),
so a model exactly at the gate is deployed, one a test image short of it is not. Locally
nothing serves, so the gate is ``min_accuracy`` alone (components/runtime/champion.py). The
model's accuracy is computed here, offline, as correct answers over the test images.
"""

import warnings
from pathlib import Path

import pytest
import torch
from kfp import dsl, local

from components.specs.params import Serving
from pipelines.evaluate_and_deploy import evaluate_and_deploy_pipeline
from pipelines.settings import CompileSettings
from trainer.data import load_packed
from trainer.model import build_model, load_model_dir, normalize, save_model_dir
from trainer.model_dir import ModelCard


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, packed_small) -> Path:
    """A real model directory of an untrained network (its accuracy is all the gate reads)."""
    manifest = load_packed(packed_small).manifest
    torch.manual_seed(0)
    card = ModelCard(
        "lenet", manifest["class_names"], manifest["pixel_mean"], manifest["pixel_std"]
    )
    return save_model_dir(build_model(), tmp_path_factory.mktemp("untrained"), card)


@pytest.fixture(scope="module")
def model_answers(model_dir, packed_small) -> tuple[int, int]:
    """(correct answers, test images) of the model, counted here."""
    network, card = load_model_dir(model_dir)
    test = load_packed(packed_small).test
    with torch.inference_mode():
        images = normalize(torch.tensor(test.images), card.pixel_mean, card.pixel_std)
        predicted = network(images).argmax(1)
    correct = int((predicted == torch.tensor(test.labels)).sum())
    assert 0 < correct < len(test)  # a gate on either side of it is a valid min_accuracy
    return correct, len(test)


def run_tail(model_dir: Path, packed: Path, min_accuracy: float, root: Path) -> bool:
    """Run the sub-pipeline on the model; whether its deploy step ran."""
    tail = evaluate_and_deploy_pipeline(CompileSettings())

    @dsl.pipeline(name="gate-under-test")
    def gate_under_test():
        model = dsl.importer(artifact_uri=str(model_dir), artifact_class=dsl.Model)
        dataset = dsl.importer(artifact_uri=str(packed), artifact_class=dsl.Dataset)
        tail(
            model=model.output,
            dataset=dataset.output,
            serving=Serving(min_accuracy=min_accuracy).to_dict(),
            model_pvc="fmnist-models",
            model_registry="",
            model_registry_secret=Serving().model_registry_secret,
            target="local",
        )

    local.init(
        local.SubprocessRunner(use_venv=False),
        pipeline_root=str(root / "outputs"),
        workspace_root=str(root / "workspace"),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "You may be attemping to run a task", RuntimeWarning)
        gate_under_test()
    return bool(list(root.glob("outputs/*/deploy")))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("images_from_the_gate", "deployed"),
    [(0, True), (-1, False), (1, True)],
    ids=["exactly-at", "just-under", "just-over"],
)
def test_the_gate_deploys_a_model_that_reaches_min_accuracy(
    model_dir, packed_small, model_answers, tmp_path, images_from_the_gate, deployed
):
    """``images_from_the_gate``: the model's correct answers minus the gate's, in images."""
    correct, count = model_answers
    min_accuracy = (correct - images_from_the_gate) / count  # exactly-at: the model's accuracy
    assert run_tail(model_dir, packed_small, min_accuracy, tmp_path) is deployed
    assert list(tmp_path.glob("outputs/*/evaluate"))  # evaluated either way
