"""The KServe predictor on a CUDA GPU answers v1 and v2 requests as it does on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible"),
]
kserve = pytest.importorskip("kserve", reason="the predictor needs KServe")


@pytest.fixture(scope="module")
def predictors(dataset, tmp_path_factory):
    """The same trained model directory loaded by a CPU and by a CUDA predictor."""
    from serving.predictor import FashionMNISTModel, ServingConfig
    from trainer.config import TrainConfig
    from trainer.distributed import Context
    from trainer.train import Trainer

    model_dir = tmp_path_factory.mktemp("model")
    config = TrainConfig(epochs=2, log_interval=10**9, device="cuda", model_dir=str(model_dir))
    Trainer(config, dataset, Context(0, 0, 1, torch.device("cuda", 0))).train()
    settings = (
        torch.get_num_threads(),
        torch.backends.mkldnn.enabled,
        torch.backends.cudnn.allow_tf32,
    )
    models = {}
    for device in ("cpu", "cuda"):
        models[device] = FashionMNISTModel(
            "fashion-mnist", ServingConfig(str(model_dir), device=device)
        )
        assert models[device].load()
    yield models
    torch.set_num_threads(settings[0])
    torch.backends.mkldnn.enabled, torch.backends.cudnn.allow_tf32 = settings[1:]


def test_the_network_sits_on_the_gpu(predictors):
    assert next(predictors["cuda"].net.parameters()).device.type == "cuda"
    assert next(predictors["cpu"].net.parameters()).device.type == "cpu"


def test_v1_answers_match(predictors, dataset):
    images = np.asarray(dataset.test.images[:64])
    answers = {
        device: model.predict(model.preprocess({"instances": images.tolist()}))
        for device, model in predictors.items()
    }
    cpu, cuda = (answers[d]["predictions"] for d in ("cpu", "cuda"))
    assert [p["label"] for p in cuda] == [p["label"] for p in cpu]
    assert [p["class_name"] for p in cuda] == [p["class_name"] for p in cpu]
    for on_gpu, on_cpu in zip(cuda, cpu, strict=True):
        assert on_gpu["probabilities"] == pytest.approx(on_cpu["probabilities"], abs=1e-4)


def test_v2_answers_match(predictors, dataset):
    from kserve.protocol.infer_type import InferInput, InferRequest

    images = np.asarray(dataset.test.images[:64])
    outputs = {}
    for device, model in predictors.items():
        tensor = InferInput("image", [64, 28, 28], "UINT8", data=images.reshape(-1).tolist())
        response = model.predict(model.preprocess(InferRequest("fashion-mnist", [tensor], "r1")))
        outputs[device] = {out.name: out.data for out in response.outputs}
    assert outputs["cuda"]["label"] == outputs["cpu"]["label"]
    np.testing.assert_allclose(
        outputs["cuda"]["probabilities"], outputs["cpu"]["probabilities"], atol=1e-4
    )
