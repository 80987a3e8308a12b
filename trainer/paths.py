"""Start-up checks of the paths a run reads and writes, so a bad one fails before training."""

from __future__ import annotations

import os
from pathlib import Path

from trainer.config import TrainConfig


class PathError(ValueError):
    """A path flag names something the trainer cannot read from or write to."""


def check_paths(config: TrainConfig) -> None:
    """Check ``--data-dir``, ``--model-dir``, ``--checkpoint-dir`` and ``--log-path``.

    Directories need not exist yet, but the nearest existing one above them must be a
    writable directory; the log file's directory must exist.

    Raises:
        PathError: names the flag, the path, and what is wrong with it.
    """
    if config.data_dir and Path(config.data_dir).exists():
        _require_directory("--data-dir", Path(config.data_dir))
    for flag, directory in (
        ("--model-dir", config.model_dir),
        ("--checkpoint-dir", config.checkpoint_dir),
    ):
        if directory:
            _require_writable_directory(flag, Path(directory))
    if config.log_path:
        log = Path(config.log_path)
        if log.is_dir():
            raise PathError(f"--log-path {log}: is a directory, not a file")
        if not log.parent.is_dir():
            raise PathError(f"--log-path {log}: no directory {log.parent}")
        _require_writable_directory("--log-path", log.parent)


def _require_directory(flag: str, path: Path) -> None:
    if not path.is_dir():
        raise PathError(f"{flag} {path}: is a file, not a directory")


def _require_writable_directory(flag: str, directory: Path) -> None:
    """``directory`` is a writable directory, or can be made in its nearest existing parent."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == directory:
        _require_directory(flag, directory)
    elif not existing.is_dir():
        raise PathError(f"{flag} {directory}: cannot be made, {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PathError(f"{flag} {directory}: {existing} is not writable")
