"""The KServe predictor on a CUDA GPU answers v1 and v2 requests with the model's own outputs.

The expectation is computed here, without any serving code: the network rebuilt from
``model.pt`` and ``model.json`` in float64 on the CPU, the pixels normalised by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible"),
    pytest.mark.timeout(600),
]
kserve = pytest.importorskip("kserve", reason="the predictor needs KServe")
IMAGES = 64
# FashionMNIST's labels 0-9, as Zalando's README lists them.
CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(dataset, tmp_path_factory):
    """A model directory trained for two epochs on the GPU."""
    from trainer.config import TrainConfig
    from trainer.distributed import Context
    from trainer.train import Trainer

    out = tmp_path_factory.mktemp("model")
    config = TrainConfig(epochs=2, log_interval=10**9, device="cuda", model_dir=str(out))
    Trainer(config, dataset, Context(0, 0, 1, torch.device("cuda", 0))).train()
    return out


@pytest.fixture(scope="module")
def predictor(model_dir):
    """The CUDA predictor on that model; torch's process-wide settings restored after."""
    from serving.predictor import FashionMNISTModel, ServingConfig

    settings = (
        torch.get_num_threads(),
        torch.backends.mkldnn.enabled,
        torch.backends.cudnn.allow_tf32,
    )
    model = FashionMNISTModel("fashion-mnist", ServingConfig(str(model_dir), device="cuda"))
    assert model.load()
    yield model
    torch.set_num_threads(settings[0])
    torch.backends.mkldnn.enabled, torch.backends.cudnn.allow_tf32 = settings[1:]


@pytest.fixture(scope="module")
def images(dataset) -> np.ndarray:
    return np.asarray(dataset.test.images[:IMAGES])


@pytest.fixture(scope="module")
def expected(model_dir, images) -> np.ndarray:
    """Class probabilities [64, 10] from model.pt and model.json alone, float64 on the CPU."""
    from trainer.model import build_model

    card = json.loads((model_dir / "model.json").read_text())
    network = build_model(card["architecture"], len(card["class_names"])).double().eval()
    network.load_state_dict(torch.load(model_dir / "model.pt", weights_only=True))
    pixels = torch.tensor(images, dtype=torch.float64).reshape(-1, 1, 28, 28) / 255
    with torch.inference_mode():
        return network((pixels - card["pixel_mean"]) / card["pixel_std"]).exp().numpy()


def test_the_network_sits_on_the_gpu(predictor):
    assert next(predictor.net.parameters()).device.type == "cuda"


def test_v1_answers_are_the_models(predictor, images, expected, dataset):
    response = predictor.predict(predictor.preprocess({"instances": images.tolist()}))
    predictions = response["predictions"]
    probabilities = np.array([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(probabilities, expected, atol=1e-4)
    labels = [p["label"] for p in predictions]
    assert labels == expected.argmax(axis=1).tolist()
    assert [p["class_name"] for p in predictions] == [CLASSES[label] for label in labels]
    correct = np.mean(np.array(labels) == np.asarray(dataset.test.labels[:IMAGES]))
    assert correct > 0.75  # two epochs on the whole split: about 0.88


def test_v2_answers_are_the_models(predictor, images, expected):
    from kserve.protocol.infer_type import InferInput, InferRequest

    tensor = InferInput("image", [IMAGES, 28, 28], "UINT8", data=images.reshape(-1).tolist())
    response = predictor.predict(
        predictor.preprocess(InferRequest("fashion-mnist", [tensor], "r1"))
    )
    outputs = {out.name: out for out in response.outputs}
    assert outputs["label"].data == expected.argmax(axis=1).tolist()
    assert outputs["probabilities"].shape == [IMAGES, 10]
    got = np.array(outputs["probabilities"].data).reshape(IMAGES, 10)
    np.testing.assert_allclose(got, expected, atol=1e-4)
