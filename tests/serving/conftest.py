"""Fixtures for the predictor tests: real `python -m serving` processes on the trained model."""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

from components.runtime.local_predictor import running_predictor


@dataclass
class Server:
    """A running predictor: its process, base URL and log file."""

    process: subprocess.Popen
    url: str
    log: Path

    def post(self, path: str, **kwargs) -> requests.Response:
        return requests.post(self.url + path, timeout=30, **kwargs)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def serve(trained_model_dir, tmp_path_factory):
    """Context manager: `python -m serving` on the trained model with extra flags, then stopped."""

    @contextlib.contextmanager
    def running(*flags: str):
        log = tmp_path_factory.mktemp("serving") / "server.log"
        with (
            log.open("w+") as output,
            running_predictor(trained_model_dir, output, flags=flags) as predictor,
        ):
            yield Server(predictor.process, predictor.url, log)

    return running


@pytest.fixture(scope="session")
def test_images(packed_small) -> np.ndarray:
    """The first 32 real test images, uint8 [32, 28, 28]."""
    from trainer.data import load_packed

    return np.array(load_packed(packed_small).test.images[:32])


@pytest.fixture(scope="session")
def offline_probabilities(trained_model_dir, test_images) -> np.ndarray:
    """What the model directory predicts for `test_images` without any server, [32, 10]."""
    import torch

    from trainer.model import load_model_dir, normalize

    net, card = load_model_dir(trained_model_dir)
    with torch.inference_mode():
        inputs = normalize(torch.from_numpy(test_images), card.pixel_mean, card.pixel_std)
        return net(inputs).exp().numpy()


@pytest.fixture(scope="module")
def model(trained_model_dir):
    """A loaded predictor; the process-wide settings that load() changes are restored."""
    import torch
    from threadpoolctl import threadpool_limits

    from serving.predictor import FashionMNISTModel, ServingConfig

    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    tf32 = torch.backends.cudnn.allow_tf32
    blas = threadpool_limits(limits=None)  # changes nothing; restores the BLAS threads after
    model = FashionMNISTModel("fashion-mnist", ServingConfig(str(trained_model_dir)))
    assert not model.ready
    assert model.load()
    assert model.ready
    yield model
    blas.restore_original_limits()
    torch.set_num_threads(threads)
    torch.backends.mkldnn.enabled, torch.backends.cudnn.allow_tf32 = onednn, tf32
