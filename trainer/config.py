"""Training configuration: one dataclass, the recipes, and the command line that fills it.

Flag names match the reference ``mnist.py`` (``--epochs --batch-size --lr --momentum ...``)
and are the names the pipeline renders into the PyTorchJob's container args.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field, fields

OPTIMIZERS = ("sgd", "adamw")
SCHEDULERS = ("onecycle", "none")
BACKENDS = ("gloo", "nccl")
PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_MODEL_DIR = "model"  # where --save-model without --model-dir saves
CHOICES = {
    "optimizer": OPTIMIZERS,
    "scheduler": SCHEDULERS,
    "backend": BACKENDS,
    "precision": PRECISIONS,
    "device": DEVICES,
}


def _flag(default, help: str):
    """A config field with its ``--help`` text."""
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    """Everything one training run needs; validated on construction."""

    epochs: int = _flag(10, "passes over the training set")
    batch_size: int = _flag(128, "global batch size, split over all processes")
    test_batch_size: int = _flag(
        250, "evaluation batch per rank (on the CPU, 250 keeps a batch's maps in cache)"
    )
    lr: float = _flag(0.004, "(peak) learning rate")
    momentum: float = _flag(0.9, "SGD momentum or AdamW beta1, in [0, 1)")
    optimizer: str = _flag("adamw", f"one of {', '.join(OPTIMIZERS)}")
    scheduler: str = _flag("onecycle", "learning-rate schedule; onecycle steps every batch")
    weight_decay: float = _flag(1e-4, "L2 penalty (decoupled for AdamW)")
    label_smoothing: float = _flag(0.05, "cross-entropy label smoothing while training")
    augment: bool = _flag(True, "random horizontal flips while training (never of shoes)")
    batch_norm: bool = _flag(
        True, "batch norm after conv2 and fc1 while training (folded into them when saved)"
    )
    precision: str = _flag("auto", "autocast; auto: bf16 where the device computes it natively")
    seed: int = _flag(1, "seeds weights, shuffling and augmentation")
    device: str = _flag(
        "auto", "auto: CUDA when a GPU is visible (process i takes GPU i), else the CPU"
    )
    backend: str | None = _flag(None, "process-group backend; None: nccl on CUDA, gloo on CPU")
    device_data: bool = _flag(
        True, "keep both splits on the training device; batches and flips are made there"
    )
    fused_optimizer: bool = _flag(
        True, "the optimizer's fused kernel: one launch a step (CUDA; CPU from torch 2.4)"
    )
    compile: bool = _flag(False, "torch.compile the forward and loss (compiles for ~1 min first)")
    cuda_graphs: bool = _flag(
        False, "replay each full training step as one CUDA graph (one process on CUDA only)"
    )
    log_interval: int = _flag(50, "batches between progress lines")
    log_path: str | None = _flag(None, "also append metric lines to this file")
    data_dir: str | None = _flag(None, "packed dataset or raw IDX directory; None: search")
    model_dir: str | None = _flag(None, "where rank 0 writes model.pt + model.json")
    save_model: bool = _flag(False, "save even without --model-dir (into ./model)")
    checkpoint_dir: str | None = _flag(None, "per-epoch checkpoint.pt for resuming")
    train_limit: int | None = _flag(None, "use only the first N training examples")
    test_limit: int | None = _flag(None, "use only the first N test examples")
    num_threads: int | None = _flag(None, "intra-op CPU threads per process")

    def __post_init__(self):
        if self.save_model and not self.model_dir:
            self.model_dir = DEFAULT_MODEL_DIR
        for name in ("epochs", "batch_size", "test_batch_size", "log_interval"):
            _require(getattr(self, name) >= 1, name, "an integer >= 1")
        for name in ("train_limit", "test_limit", "num_threads"):
            value = getattr(self, name)
            _require(value is None or value >= 1, name, "an integer >= 1")
        _require(math.isfinite(self.lr) and self.lr > 0, "lr", "a finite number > 0")
        _require(0 <= self.momentum < 1, "momentum", "in [0, 1)")
        decay = self.weight_decay
        _require(math.isfinite(decay) and decay >= 0, "weight_decay", "a finite number >= 0")
        _require(0 <= self.label_smoothing < 1, "label_smoothing", "in [0, 1)")
        if self.cuda_graphs:
            _require(self.device != "cpu", "cuda_graphs", "used without --device cpu")
            _require(self.device_data, "cuda_graphs", "used with --device-data")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            _require(
                value in allowed or value is None and name == "backend",
                name,
                f"one of {', '.join(allowed)}",
            )


class ConfigError(ValueError):
    """A flag outside its allowed range; ``name`` is the config field, ``allowed`` the range."""

    def __init__(self, name: str, allowed: str):
        super().__init__(f"--{name.replace('_', '-')} must be {allowed}")
        self.name, self.allowed = name, allowed


def _require(ok: bool, name: str, allowed: str) -> None:
    if not ok:
        raise ConfigError(name, allowed)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit status 2."""

    def error(self, message: str):
        """Print ``<prog>: error: <message>`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# The article's recipe (about 90.4 % after 10 epochs); `--recipe reference` selects it.
RECIPES = {
    "default": {},
    "reference": dict(
        batch_size=32,
        lr=0.01,
        momentum=0.9,
        optimizer="sgd",
        scheduler="none",
        weight_decay=0.0,
        label_smoothing=0.0,
        augment=False,
        batch_norm=False,
        precision="fp32",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line; defaults come from TrainConfig."""
    defaults = TrainConfig()
    parser = OneLineParser(
        prog="python -m trainer",
        description="Train the FashionMNIST CNN, alone, under torchrun, or in a PyTorchJob "
        "or TrainJob pod.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="default",
        help="preset of the flags below; explicit flags override it",
    )
    for spec in fields(TrainConfig):
        flag = "--" + spec.name.replace("_", "-")
        default, help = getattr(defaults, spec.name), spec.metadata["help"]
        if spec.type == "bool":
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=help
            )
        else:
            kind = {"int": int, "float": float}.get(spec.type.split(" ")[0], str)
            choices = CHOICES.get(spec.name)
            parser.add_argument(flag, type=kind, default=default, choices=choices, help=help)
    parser.add_argument(
        "--no-cuda",
        dest="device",
        action="store_const",
        const="cpu",
        default=argparse.SUPPRESS,
        help="same as --device cpu (the reference mnist.py's flag)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """Flags -> TrainConfig; a bad value exits with a message naming the flag."""
    parser = build_parser()
    recipe, _ = parser.parse_known_args(argv)
    parser.set_defaults(**RECIPES[recipe.recipe])
    args = vars(parser.parse_args(argv))
    args.pop("recipe")
    try:
        return TrainConfig(**args)
    except ValueError as exc:
        parser.error(str(exc))


def config_dict(config: TrainConfig) -> dict:
    """The config as plain JSON-able data (for checkpoints and model.json)."""
    return asdict(config)
