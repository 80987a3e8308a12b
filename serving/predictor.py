"""The KServe predictor: a ``kserve.Model`` that serves a FashionMNIST model directory.

KServe calls ``preprocess`` (decode and check the request, see :mod:`serving.codec`),
then ``predict`` (one forward pass for the whole batch, then the protocol's response).
v1 requests arrive as parsed JSON, v2 and gRPC requests as an ``InferRequest``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from kserve import Model
from kserve.protocol.infer_type import InferRequest, InferResponse
from threadpoolctl import threadpool_limits

from serving.batching import SharedForwardPass
from serving.codec import IMAGE_SIZE, PIXELS, decode_v1, decode_v2, encode_v1, encode_v2
from serving.defaults import MAX_BATCH_SIZE, NUM_THREADS
from serving.loader import load_served_model
from serving.network import MatrixLeNet, ServingLeNet, serving_network
from trainer.config import DEVICES
from trainer.model import select_device
from trainer.model_dir import SERVED

MAX_BATCH_SIZE_LIMIT = 65_536
# The most images a shared forward pass takes on the CPU: per image, a pass of 16-64 costs
# a third of a lone image's, while at 256 the maps outgrow the cache (docs/serving.md).
CPU_PASS_IMAGES = 64
# Passes of at most this many images run as numpy matrix products on the CPU: 0.71x and
# 0.87x torch's time for 1 and 2 images, 1.14x for 4 (serving.network.MatrixLeNet).
MATRIX_PASS_IMAGES = 2


@dataclass
class ServingConfig:
    """How the predictor loads and runs the model."""

    model_dir: str = SERVED
    """The model directory (trainer/model_dir.py); KServe mounts STORAGE_URI here."""
    max_batch_size: int = MAX_BATCH_SIZE
    """Most images one request may carry; a larger request gets a 400."""
    num_threads: int = NUM_THREADS
    """torch intra-op threads; 1 is fastest for small batches and leaves cores to the server."""
    device: str = "auto"
    """``auto`` (CUDA when a GPU is visible, else the CPU), ``cpu`` or ``cuda``."""

    def __post_init__(self):
        if not 1 <= self.max_batch_size <= MAX_BATCH_SIZE_LIMIT:
            raise ValueError(
                f"max_batch_size must be in 1..{MAX_BATCH_SIZE_LIMIT}, got {self.max_batch_size}"
            )
        if self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")


@dataclass(frozen=True)
class Batch:
    """A decoded request: the images and, for v2, the request to answer."""

    images: np.ndarray
    """float32 [N, 28, 28], pixel values 0-255."""
    request: InferRequest | None
    """The v2 request (its id and requested outputs shape the answer); None for v1."""


class FashionMNISTModel(Model):
    """Serves one model directory over KServe's v1 and v2 protocols."""

    def __init__(self, name: str, config: ServingConfig):
        super().__init__(name)
        self.config = config
        self.net: torch.nn.Module | None = None
        self.matrix_net: MatrixLeNet | None = None  # small passes on the CPU
        self.device = torch.device("cpu")
        self.class_names: list[str] = []
        self.shared_forward_pass: SharedForwardPass | None = None  # set by load()

    def load(self) -> bool:
        """Load the network; the model is ready only after this returns.

        Also sets torch's and numpy's BLAS's process-wide thread counts and turns oneDNN and
        TF32 off: the predictor owns its server process. The network runs in its serving
        form (:mod:`serving.network`: the same function on pixels 0-255, cheaper), on the
        CPU as numpy matrix products for passes of one or two images. One warm-up
        pass runs first, so that a GPU's one-time set-up does not land on the first request.

        Raises:
            ModelDirError: the model directory cannot be loaded (a missing file, a malformed
                card, truncated or corrupt weights); one line.
            ValueError: ``cuda`` was asked for and no GPU is visible.
        """
        torch.set_num_threads(self.config.num_threads)
        # oneDNN's convolutions cost ~1.5x PyTorch's own for this small network at batch
        # sizes up to ~64 (batch 1: 0.50 vs 0.30 ms) and break even at 256.
        torch.backends.mkldnn.enabled = False
        # Full fp32 convolutions on a GPU too (cuDNN would use TF32): the same answers as
        # on the CPU, and this network is too small for TF32 to be faster.
        torch.backends.cudnn.allow_tf32 = False
        self.device = select_device(self.config.device)
        net, card = load_served_model(self.config.model_dir, self.device)
        self.net = serving_network(net, card.pixel_mean, card.pixel_std)
        if isinstance(self.net, ServingLeNet) and self.device.type == "cpu":
            threadpool_limits(self.config.num_threads, user_api="blas")
            self.matrix_net = MatrixLeNet(self.net)
        self.class_names = list(card.class_names)
        # The REST shortcut's requests share forward passes; KServe's own path runs one each.
        pass_images = self.config.max_batch_size
        if self.device.type == "cpu":
            pass_images = min(pass_images, CPU_PASS_IMAGES)
        self.shared_forward_pass = SharedForwardPass(self.probabilities, pass_images, self.name)
        self.probabilities(np.zeros((1, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32))
        self.ready = True
        return self.ready

    def validate(self, payload: Batch) -> Batch:
        """Return the payload: ``preprocess`` has already checked the whole request."""
        return payload

    def preprocess(self, payload: dict | bytes | InferRequest, headers=None) -> Batch:
        """Decode a v1 body or a v2 request; a bad request raises ``InvalidInput`` (400)."""
        if isinstance(payload, InferRequest):
            return Batch(decode_v2(payload, self.config.max_batch_size), payload)
        return Batch(decode_v1(payload, self.config.max_batch_size), None)

    def predict(self, payload: Batch, headers=None) -> dict | InferResponse:
        """Classify the batch in one forward pass and answer in the request's protocol."""
        probabilities = self.probabilities(payload.images)
        if payload.request is None:
            return encode_v1(probabilities, self.class_names)
        return encode_v2(probabilities, payload.request, self.name)

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """Class probabilities float32 [N, 10] for pixel values 0-255 [N, 28, 28]."""
        if len(images) <= MATRIX_PASS_IMAGES and self.matrix_net is not None:
            return self.matrix_net(images)
        with torch.inference_mode():
            # The network normalises the pixels itself (serving.network).
            inputs = torch.from_numpy(images).to(self.device).reshape(-1, 1, IMAGE_SIZE, IMAGE_SIZE)
            return self.net(inputs).exp().cpu().numpy()

    def get_input_types(self) -> list[dict]:
        """v2 metadata: one image tensor, flat FP32 pixel values 0-255.

        The most general of the accepted forms; UINT8 and the shapes [N, 28, 28] and
        [N, 1, 28, 28] are accepted too (metadata can name only one).
        """
        return [{"name": "image", "datatype": "FP32", "shape": [-1, PIXELS]}]

    def get_output_types(self) -> list[dict]:
        """v2 metadata: the class index and the class probabilities."""
        return [
            {"name": "label", "datatype": "INT64", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, len(self.class_names)]},
        ]
