"""Run the predictor locally: ``python -m serving`` on a loopback port, checked on test images.

:func:`running_predictor` is the one way this project starts a predictor process (the local
deploy step, ``fmnist serve``, the serving tests and benchmark). The local check sends real
test images: the predictor must answer like the model run in-process (same weights, same
normalisation).
"""

import json
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from components.runtime.ports import free_port
from components.runtime.waiting import wait_until
from components.specs.params import Serving
from serving.defaults import MODEL_NAME

LOOPBACK = "127.0.0.1"  # where a local predictor listens unless told otherwise
CHECK_IMAGES = 100  # test images the local check sends
MIN_AGREEMENT = 0.99  # share of answers that must match the in-process model
READY_TIMEOUT_SECONDS = 120.0  # loading torch and KServe takes ~5 s, longer on a busy machine
READY_POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 10.0  # after SIGTERM, before SIGKILL
# A v1 prediction is a label, a class name and 10 probabilities: about 300 bytes.
ANSWER_BYTES_PER_IMAGE = 4096
LOG_TAIL_CHARACTERS = 3000  # of the predictor's output, in the error when it stops early
REPO = Path(__file__).resolve().parents[2]


class PredictorError(RuntimeError):
    """The predictor exited or did not become ready."""


@dataclass(frozen=True)
class RunningPredictor:
    """A predictor process and the HTTP port it listens on."""

    process: subprocess.Popen
    port: int
    host: str = LOOPBACK

    @property
    def url(self) -> str:
        """Its base URL, ``http://127.0.0.1:<port>`` (or the host it listens on)."""
        host = LOOPBACK if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


@contextmanager
def running_predictor(
    model_dir: str | Path,
    output=None,
    *,
    model_name: str = MODEL_NAME,
    port: int | None = None,
    host: str = LOOPBACK,
    flags: tuple[str, ...] = (),
    timeout_seconds: float = READY_TIMEOUT_SECONDS,
):
    """Run ``python -m serving`` until the block ends; yield it once the model is ready.

    gRPC is off unless ``flags`` turn it on; ``flags`` come last, so they win.

    Args:
        model_dir: The model directory to serve.
        output: A file for the server's stdout and stderr; opened for reading too, its tail
            is in the error if the server stops before it is ready. None: a temporary file.
            ``subprocess.DEVNULL`` or a stream of this process work too (no tail then).
        model_name: The name in the model's URLs.
        port: The HTTP port; None: a free one.
        host: The address it listens on; the default, loopback, keeps it to this machine.
        flags: More ``python -m serving`` flags.
        timeout_seconds: How long the model may take to become ready.

    Raises:
        PredictorError: the server exited or was not ready within ``timeout_seconds``.
    """
    port = port or free_port()
    command = [sys.executable, "-m", "serving", f"--model_name={model_name}",
               f"--model_dir={model_dir}", f"--http_host={host}", f"--http_port={port}",
               "--enable_grpc=false", *flags]  # fmt: skip
    with tempfile.TemporaryFile("w+") if output is None else _kept(output) as log:
        server = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        predictor = RunningPredictor(server, port, host)
        try:
            _wait_until_ready(predictor, log, model_name, timeout_seconds)
            yield predictor
        finally:
            stop(server)


@contextmanager
def _kept(output):
    """``output`` as a context manager that leaves it open."""
    yield output


def stop(server: subprocess.Popen) -> None:
    """Stop the server: SIGTERM, then SIGKILL after STOP_GRACE_SECONDS."""
    if server.poll() is None:
        server.terminate()
    try:
        server.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _wait_until_ready(
    predictor: RunningPredictor, log, model_name: str, timeout_seconds: float
) -> None:
    ready_url = f"{predictor.url}/v2/models/{model_name}/ready"

    def ready() -> bool | None:
        if predictor.process.poll() is not None:
            code, tail = predictor.process.returncode, _tail(log)
            raise PredictorError(f"the predictor exited with code {code}" + (tail and f":\n{tail}"))
        try:
            with urllib.request.urlopen(ready_url, timeout=2) as response:
                return response.status == 200 or None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    try:
        wait_until(
            ready,
            what="the predictor's start",
            timeout_seconds=timeout_seconds,
            describe=lambda: _tail(log),
            poll_seconds=READY_POLL_SECONDS,
        )
    except TimeoutError as error:
        raise PredictorError(str(error)) from None


def _tail(log) -> str:
    """The end of the server's output if it can be read; else nothing."""
    try:
        if not log.readable():  # this process's stderr, say: never seek in it
            return ""
        log.flush()
        log.seek(0)
        text = log.read()
    except (AttributeError, OSError, ValueError):  # DEVNULL, a closed or unseekable file
        return ""
    return text[-LOG_TAIL_CHARACTERS:]


def predict_v1(url: str, model_name: str, images, timeout: float = 60) -> list[int]:
    """Class indices the predictor answers for ``images`` (uint8 [N, 28, 28]) over v1.

    Raises:
        ValueError: the answer is over ANSWER_BYTES_PER_IMAGE an image, or not one label an
            image. urllib's errors (OSError) for a failed request.
    """
    body = json.dumps({"instances": images.tolist()}).encode()
    request = urllib.request.Request(
        f"{url}/v1/models/{model_name}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    limit = ANSWER_BYTES_PER_IMAGE * len(images)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = response.read(limit + 1)
    if len(answer) > limit:
        raise ValueError(f"the answer is over {limit} bytes for {len(images)} images")
    labels = [item["label"] for item in json.loads(answer)["predictions"]]
    if len(labels) != len(images):
        raise ValueError(f"{len(labels)} predictions for {len(images)} images")
    return labels


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
    name, timeout = serving.model_name, serving.serving_timeout_seconds
    with running_predictor(model_dir, model_name=name, timeout_seconds=timeout) as predictor:
        accuracy = check_predictions(predictor.url, name, model_dir, dataset_dir)
    print(
        f"the local predictor answered {CHECK_IMAGES} test images like the model "
        f"({accuracy:.0%} correct) and was stopped",
        flush=True,
    )
    return predictor.url
