"""Training configuration: one dataclass, the recipes, and the command line that fills it.

Flag names match the reference ``mnist.py`` (``--epochs --batch-size --lr --momentum ...``)
and are the names the pipeline renders into the PyTorchJob's container args.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields

OPTIMIZERS = ("sgd", "adamw")
SCHEDULERS = ("onecycle", "none")
BACKENDS = ("gloo", "nccl")
PRECISIONS = ("auto", "fp32", "bf16")
CHOICES = {
    "optimizer": OPTIMIZERS,
    "scheduler": SCHEDULERS,
    "backend": BACKENDS,
    "precision": PRECISIONS,
}


@dataclass
class TrainConfig:
    """Everything one training run needs; validated on construction."""

    epochs: int = 10  # passes over the training set
    batch_size: int = 128  # global batch: split evenly over the ranks
    test_batch_size: int = 1000  # evaluation batch per rank
    lr: float = 0.002  # (peak) learning rate
    momentum: float = 0.9  # SGD momentum, or AdamW's beta1
    optimizer: str = "adamw"  # one of OPTIMIZERS
    scheduler: str = "onecycle"  # one of SCHEDULERS; onecycle steps every batch
    weight_decay: float = 1e-4  # L2 penalty (decoupled for AdamW)
    label_smoothing: float = 0.05  # cross-entropy label smoothing while training
    augment: bool = True  # random horizontal flips while training
    precision: str = "auto"  # one of PRECISIONS; auto: bf16 where the device computes it natively
    seed: int = 1  # seeds weights, shuffling and augmentation
    no_cuda: bool = False  # train on CPU even when CUDA is available
    backend: str | None = None  # process-group backend; None picks from the device
    log_interval: int = 50  # batches between progress lines
    log_path: str | None = None  # also append metric lines to this file
    data_dir: str | None = None  # packed dataset or raw IDX directory (None: search)
    model_dir: str | None = None  # where rank 0 writes model.pt + model.json
    save_model: bool = False  # save even without --model-dir (into ./model)
    checkpoint_dir: str | None = None  # per-epoch checkpoint.pt for resuming
    train_limit: int | None = None  # use only the first N training examples
    test_limit: int | None = None  # use only the first N test examples
    num_threads: int | None = None  # intra-op CPU threads per process

    def __post_init__(self):
        for name in ("epochs", "batch_size", "test_batch_size", "log_interval"):
            _require(getattr(self, name) >= 1, name, "an integer >= 1")
        for name in ("train_limit", "test_limit", "num_threads"):
            value = getattr(self, name)
            _require(value is None or value >= 1, name, "an integer >= 1")
        _require(self.lr > 0, "lr", "a number > 0")
        _require(0 <= self.momentum < 1, "momentum", "in [0, 1)")
        _require(self.weight_decay >= 0, "weight_decay", "a number >= 0")
        _require(0 <= self.label_smoothing < 1, "label_smoothing", "in [0, 1)")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            _require(
                value in allowed or value is None and name == "backend",
                name,
                f"one of {', '.join(allowed)}",
            )

    @property
    def model_output_dir(self) -> str | None:
        """Where the final model goes, if anywhere."""
        return self.model_dir or ("model" if self.save_model else None)


def _require(ok: bool, name: str, allowed: str) -> None:
    if not ok:
        raise ValueError(f"--{name.replace('_', '-')} must be {allowed}")


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
        precision="fp32",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line; defaults come from TrainConfig."""
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train the FashionMNIST CNN, alone, under torchrun, or in a PyTorchJob.",
    )
    parser.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="default",
        help="preset of the flags below; explicit flags override it",
    )
    for field in fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if field.type == "bool" and field.name == "augment":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif field.type == "bool":
            parser.add_argument(flag, action="store_true", default=default)
        else:
            kind = {"int": int, "float": float}.get(field.type.split(" ")[0], str)
            choices = CHOICES.get(field.name)
            parser.add_argument(flag, type=kind, default=default, choices=choices)
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
