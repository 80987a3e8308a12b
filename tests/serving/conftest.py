"""Fixtures for the predictor tests: real `python -m serving` processes on the trained model."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "fashion-mnist"
READY_TIMEOUT_S = 90


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model_dir: Path, log: Path, *extra: str) -> Server:
    """Start `python -m serving` on free loopback ports and wait until it is ready."""
    port = free_port()
    command = [
        sys.executable, "-m", "serving", "--model_name", MODEL_NAME,
        "--model_dir", str(model_dir), "--http_port", str(port),
        "--grpc_port", str(free_port()), *extra,
    ]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            if server.get("/v2/health/ready").status_code == 200:
                return server
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(f"server not ready after {READY_TIMEOUT_S} s:\n{server.log_tail()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def serve(trained_model_dir, tmp_path_factory):
    """Context manager: `python -m serving` on the trained model with extra flags, then stopped."""

    @contextlib.contextmanager
    def running(*flags: str):
        log = tmp_path_factory.mktemp("serving") / "server.log"
        server = start_server(trained_model_dir, log, *flags)
        try:
            yield server
        finally:
            stop_server(server)

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
