"""Per-epoch checkpoints, written atomically by rank 0 and read by every rank on restart."""

from __future__ import annotations

import os
from pathlib import Path

import torch

CHECKPOINT_FILE = "checkpoint.pt"


def save(directory: str | Path, state: dict) -> Path:
    """Write ``checkpoint.pt`` via a temporary file and a rename, so it is never half-written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    target = out / CHECKPOINT_FILE
    tmp = out / f".{CHECKPOINT_FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, target)
    return target


def load(directory: str | Path | None) -> dict | None:
    """The last checkpoint in ``directory``, or None when there is none yet."""
    if not directory:
        return None
    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
