"""Check a model locally: ``python -m serving`` on a free loopback port, real test images.

The predictor must answer like the model run in-process (same weights, same
normalisation); it is stopped when the check ends.
"""

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

from components.specs.params import Serving

CHECK_IMAGES = 100  # test images the local check sends
MIN_AGREEMENT = 0.99  # share of answers that must match the in-process model


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def local_predictor(model_dir: str, model_name: str, timeout_seconds: float):
    """Run ``python -m serving`` on a free loopback port until the block ends; yield its URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "serving",
        f"--model_name={model_name}",
        f"--model_dir={model_dir}",
        f"--http_port={port}",
        "--enable_grpc=false",
        "--workers=1",
    ]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_until_ready(server, log, f"{url}/v2/models/{model_name}/ready", timeout_seconds)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_ready(
    server: subprocess.Popen, log, ready_url: str, timeout_seconds: float
) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            raise RuntimeError(
                f"the predictor exited with code {server.returncode}:\n{log.read()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(ready_url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the predictor was not ready within {timeout_seconds:g} s")


def predict_v1(url: str, model_name: str, images) -> list[int]:
    """Class indices the predictor answers for ``images`` (uint8 [N, 28, 28]) over v1."""
    body = json.dumps({"instances": images.tolist()}).encode()
    request = urllib.request.Request(
        f"{url}/v1/models/{model_name}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return [item["label"] for item in json.load(response)["predictions"]]


def check_predictions(url: str, model_name: str, model_dir: str, dataset_dir: str) -> float:
    """Send real test images; the answers must match the model run in-process.

    Returns:
        The predictor's accuracy on those images.

    Raises:
        RuntimeError: fewer than MIN_AGREEMENT of the answers match.
    """
    import torch

    from trainer.data import load_packed
    from trainer.model import load_model_dir, normalize

    test = load_packed(dataset_dir).test.head(CHECK_IMAGES)
    served = predict_v1(url, model_name, test.images)
    network, card = load_model_dir(model_dir)
    with torch.inference_mode():
        expected = (
            network(normalize(torch.tensor(test.images), card.pixel_mean, card.pixel_std))
            .argmax(1)
            .tolist()
        )
    agreement = sum(a == b for a, b in zip(served, expected, strict=True)) / len(expected)
    if agreement < MIN_AGREEMENT:
        raise RuntimeError(
            f"the predictor agrees with the model on only {agreement:.0%} "
            f"of {len(expected)} test images"
        )
    return sum(a == b for a, b in zip(served, test.labels.tolist(), strict=True)) / len(served)


def deploy_local(serving: Serving, model_dir: str, dataset_dir: str) -> str:
    """Start the predictor locally, check it on real test images, stop it; return its URL."""
    with local_predictor(model_dir, serving.model_name, serving.serving_timeout_seconds) as url:
        accuracy = check_predictions(url, serving.model_name, model_dir, dataset_dir)
    print(
        f"local predictor at {url} answered {CHECK_IMAGES} test images like the model "
        f"({accuracy:.0%} correct); stopped",
        flush=True,
    )
    return url
