"""The model directory: what it holds and where it lives. Every other module asks here.

It holds two files: ``WEIGHTS_FILE``, the network's ``state_dict`` (loadable with
``torch.load(weights_only=True)``), and ``CARD_FILE``, the ``ModelCard`` that says how to
rebuild and feed it. From the trainer to the predictor it lives, in turn:

1. in the run's workspace, at ``in_workspace(workspace)``: the training job's rank 0
   writes it there (``--model-dir``);
2. in the train step's KFP ``Model`` artifact, copied from there;
3. on the model volume, at ``store_path(model_name, run_id)`` under the model PVC, which
   the deploy and register steps mount at ``MODEL_STORE`` and KServe reads as
   ``pvc_uri(pvc, store_path)`` (its ``STORAGE_URI``);
4. in the predictor's pod, at ``SERVED``, where KServe mounts that URI.

No imports beyond the standard library: the compiler and the CLI ask here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

WEIGHTS_FILE = "model.pt"
CARD_FILE = "model.json"
FILES = (WEIGHTS_FILE, CARD_FILE)
MODEL_STORE = "/mnt/model-store"  # the deploy and register steps' mount of the model PVC
SERVED = "/mnt/models"  # KServe mounts (or downloads) STORAGE_URI here
TRAINING_FOLDER = "train"  # the training job's folder in the run's workspace


@dataclass
class ModelCard:
    """What ``CARD_FILE`` records next to the weights."""

    architecture: str
    class_names: list[str]
    pixel_mean: float
    pixel_std: float
    metrics: dict[str, float] = field(default_factory=dict)
    training: dict = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def in_workspace(workspace: str | Path) -> Path:
    """Where the training job writes the model directory in the run's workspace."""
    return Path(workspace) / TRAINING_FOLDER / "model"


def store_path(model_name: str, run_id: str) -> str:
    """The model directory's path on the model volume: one per model and run."""
    return f"{model_name}/{run_id}"


def pvc_uri(pvc: str, path: str) -> str:
    """``pvc://<pvc>/<path>``: what KServe mounts at ``SERVED``."""
    return f"pvc://{pvc}/{path}"


def is_model_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a file of a model directory."""
    return any((Path(path) / name).exists() for name in FILES)
