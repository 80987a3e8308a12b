"""The network, input normalisation, and saving and loading a model directory.

What a model directory holds and where it lives: ``trainer/model_dir.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from trainer.data import CLASS_NAMES, IMAGE_SIZE
from trainer.model_dir import CARD_FILE, FILES, WEIGHTS_FILE, ModelCard


class LeNet(nn.Module):
    """The reference network: two 5x5 conv + max-pool blocks, then two linear layers."""

    def __init__(self, num_classes: int = len(CLASS_NAMES)):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, 1)
        self.conv2 = nn.Conv2d(20, 50, 5, 1)
        self.fc1 = nn.Linear(4 * 4 * 50, 500)
        self.fc2 = nn.Linear(500, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [N, classes] for normalised images [N, 1, 28, 28].

        ReLU commutes with max-pooling, so it runs on the pooled quarter of the values: the
        article's ``max_pool2d(relu(conv(x)))``, values and gradients, for less work.
        """
        x = _pool(self.conv1(x)).relu()
        x = _pool(self.conv2(x)).relu()
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)`` for even heights and widths (LeNet's maps are 24 and 8 wide).

    The larger of each pair of rows, then of each pair of columns: the same values, at
    about half the cost of torch's CPU max-pool on these small maps. Its backward pass
    (``MaximumBackward``, which splits ties) costs more than max-pool's, so training keeps
    ``max_pool2d`` (docs/benchmarks.md, "Cheaper forward pass").
    """
    x = torch.maximum(x[:, :, 0::2], x[:, :, 1::2])
    return torch.maximum(x[:, :, :, 0::2], x[:, :, :, 1::2])


def _pool(x: torch.Tensor) -> torch.Tensor:
    """2x2 max-pooling: :func:`pool_2x2` where no gradient is recorded (evaluation)."""
    return F.max_pool2d(x, 2) if torch.is_grad_enabled() else pool_2x2(x)


class BatchNormLeNet(LeNet):
    """LeNet as the default recipe trains it: batch norm after conv2 and fc1.

    Normalising those layers' outputs lets a larger step size train the same network to a
    higher accuracy in the same epochs. conv1 gets no norm: over its 24x24 maps, torch's
    CPU batch norm costs as much as the rest of a training step, for no accuracy
    (docs/benchmarks.md). Once trained, each norm is a fixed affine map per channel, so
    :meth:`folded` writes it into the layer before it: what is saved and served is a plain
    :class:`LeNet`, at no cost per prediction.
    """

    def __init__(self, num_classes: int = len(CLASS_NAMES)):
        super().__init__(num_classes)
        self.conv2_norm = nn.BatchNorm2d(self.conv2.out_channels)
        self.fc1_norm = nn.BatchNorm1d(self.fc1.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [N, classes]; each norm comes before the pooling and ReLU."""
        x = _pool(self.conv1(x)).relu()
        x = _pool(_normalize(self.conv2_norm, self.conv2(x))).relu()
        x = F.relu(_normalize(self.fc1_norm, self.fc1(x.flatten(1))))
        return F.log_softmax(self.fc2(x), dim=1)

    @torch.no_grad()
    def folded(self) -> LeNet:
        """The plain LeNet that computes what this network computes in eval mode."""
        net = LeNet(self.fc2.out_features).to(self.fc2.weight.device)
        net.load_state_dict(self.state_dict(), strict=False)  # the layers; norms follow
        for name, norm in (("conv2", self.conv2_norm), ("fc1", self.fc1_norm)):
            layer, target = getattr(self, name), getattr(net, name)
            scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
            per_output = scale.reshape(-1, *[1] * (layer.weight.dim() - 1))
            target.weight.copy_(layer.weight * per_output)
            target.bias.copy_((layer.bias - norm.running_mean) * scale + norm.bias)
        return net.eval()


def _normalize(norm: nn.BatchNorm1d | nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)``, but for a training batch of a single example.

    One example (an epoch's last batch, at some sizes) has no spread to normalise by: it
    uses the running statistics and leaves them as they are.
    """
    if not (norm.training and len(x) == 1):
        return norm(x)
    return F.batch_norm(
        x, norm.running_mean, norm.running_var, norm.weight, norm.bias, False, 0.0, norm.eps
    )


def training_network(batch_norm: bool) -> LeNet:
    """The network the trainer optimises: LeNet, with batch norm (folded when saved) or not."""
    return BatchNormLeNet() if batch_norm else LeNet()


def saved_network(net: nn.Module) -> LeNet:
    """The plain LeNet to save for a trained network (its norms folded into its layers)."""
    return net.folded() if isinstance(net, BatchNormLeNet) else net


ARCHITECTURES = {"lenet": LeNet}


def build_model(architecture: str = "lenet", num_classes: int = len(CLASS_NAMES)) -> nn.Module:
    """A fresh network of the named architecture."""
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"unknown architecture {architecture!r}; choose one of {sorted(ARCHITECTURES)}"
        )
    return ARCHITECTURES[architecture](num_classes)


def select_device(name: str = "auto", index: int = 0) -> torch.device:
    """``auto``: CUDA when visible, else the CPU; on CUDA, GPU ``index`` modulo the GPUs seen.

    Raises:
        ValueError: ``cuda`` was asked for and no CUDA device is visible.
    """
    if name == "cpu" or name == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA device is visible to torch {torch.__version__}")
    return torch.device("cuda", index % torch.cuda.device_count())


def normalize(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """Pixels 0-255 ([N, 28, 28] or [N, 1, 28, 28], any dtype) to the network's input."""
    images = images.reshape(-1, 1, IMAGE_SIZE, IMAGE_SIZE).to(torch.float32)
    return (images / 255.0 - mean) / std


def save_model_dir(model: nn.Module, directory: str | Path, card: ModelCard) -> Path:
    """Write the weights and the card into ``directory`` (each file atomically)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    card.versions = {"torch": torch.__version__, **card.versions}
    state = {key: value.detach().cpu() for key, value in model.state_dict().items()}
    _atomic_write(out / WEIGHTS_FILE, lambda path: torch.save(state, path))
    _atomic_write(
        out / CARD_FILE,
        lambda path: Path(path).write_text(json.dumps(asdict(card), indent=2) + "\n"),
    )
    return out


def load_model_dir(
    directory: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, ModelCard]:
    """Rebuild the network from a model directory, in eval mode on ``device``.

    Raises:
        FileNotFoundError: a file of the model directory is missing.
        ValueError: the card is malformed or does not fit the weights.
    """
    directory = Path(directory)
    for name in FILES:
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory}: no {name}; not a model directory")
    try:
        card = ModelCard(**json.loads((directory / CARD_FILE).read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{directory / CARD_FILE}: malformed model card ({exc})") from exc
    model = build_model(card.architecture, len(card.class_names))
    state = torch.load(directory / WEIGHTS_FILE, map_location=device, weights_only=True)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(
            f"{directory / WEIGHTS_FILE}: weights do not fit {card.architecture!r}: {exc}"
        ) from exc
    return model.to(device).eval(), card


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
