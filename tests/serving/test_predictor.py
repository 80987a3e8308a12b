"""The predictor in-process: readiness, one forward pass per batch, gRPC tensors, config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kserve.protocol.grpc.grpc_predict_v2_pb2 import ModelInferRequest
from kserve.protocol.infer_type import InferInput, InferRequest

from serving.predictor import FashionMNISTModel, ServingConfig

# FashionMNIST's labels 0-9, as Zalando's README lists them.
CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip


@pytest.fixture
def forward_inputs(model):
    """The shape of every input the network sees while the test runs."""
    shapes = []
    handle = model.net.register_forward_hook(lambda _m, args, _out: shapes.append(args[0].shape))
    yield shapes
    handle.remove()


def test_v1_batch_is_one_forward_pass(model, test_images, offline_probabilities, forward_inputs):
    batch = model.preprocess({"instances": test_images[:5].tolist()})
    response = model.predict(batch)
    assert forward_inputs == [(5, 1, 28, 28)]
    predictions = response["predictions"]
    probabilities = np.array([prediction["probabilities"] for prediction in predictions])
    np.testing.assert_allclose(probabilities, offline_probabilities[:5], rtol=1e-5, atol=1e-7)
    labels = [prediction["label"] for prediction in predictions]
    assert labels == offline_probabilities[:5].argmax(axis=1).tolist()
    assert [prediction["class_name"] for prediction in predictions] == [CLASSES[i] for i in labels]


def test_v2_batch_is_one_forward_pass(model, test_images, offline_probabilities, forward_inputs):
    tensor = InferInput("image", [7, 784], "UINT8", data=test_images[:7].reshape(-1).tolist())
    response = model.predict(model.preprocess(InferRequest("fashion-mnist", [tensor])))
    assert forward_inputs == [(7, 1, 28, 28)]
    label = response.get_output_by_name("label")
    assert label.data == offline_probabilities[:7].argmax(axis=1).tolist()
    probabilities = response.get_output_by_name("probabilities")
    assert probabilities.shape == [7, 10]
    got = np.array(probabilities.data).reshape(7, 10)
    np.testing.assert_allclose(got, offline_probabilities[:7], rtol=1e-5, atol=1e-7)


def test_grpc_raw_tensor(model, test_images, offline_probabilities):
    """gRPC clients usually send raw bytes (`raw_input_contents`), not typed contents."""
    grpc_request = ModelInferRequest(model_name="fashion-mnist", id="g-1")
    grpc_request.inputs.add(name="image", datatype="UINT8", shape=[3, 28, 28])
    grpc_request.raw_input_contents.append(test_images[:3].tobytes())
    response = model.predict(model.preprocess(InferRequest.from_grpc(grpc_request))).to_grpc()
    assert response.id == "g-1"
    outputs = {output.name: output for output in response.outputs}
    assert list(outputs["label"].shape) == [3]
    names = [output.name for output in response.outputs]
    raw = dict(zip(names, response.raw_output_contents, strict=True))
    labels = np.frombuffer(raw["label"], dtype=np.int64)
    assert labels.tolist() == offline_probabilities[:3].argmax(axis=1).tolist()
    assert list(outputs["probabilities"].shape) == [3, 10]
    probabilities = np.frombuffer(raw["probabilities"], dtype=np.float32).reshape(3, 10)
    np.testing.assert_allclose(probabilities, offline_probabilities[:3], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size must be in 1..65536, got 0"),
        ({"max_batch_size": 65_537}, "max_batch_size must be in 1..65536, got 65537"),
        ({"num_threads": 0}, "num_threads must be >= 1, got 0"),
        ({"device": "gpu"}, "device must be one of auto, cpu, cuda, got 'gpu'"),
    ],
)
def test_config_range_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ServingConfig(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_cuda_without_a_gpu_fails_to_load(trained_model_dir):
    model = FashionMNISTModel("fashion-mnist", ServingConfig(str(trained_model_dir), device="cuda"))
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        with pytest.raises(ValueError, match="--device cuda: no CUDA device is visible"):
            model.load()
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn
    assert not model.ready
