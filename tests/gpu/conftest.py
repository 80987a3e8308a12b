"""Fixtures of the ``gpu`` tier: the real data and the trainer as a command.

``make test-gpu`` runs this folder alone (``--confcutdir tests/gpu``), so it needs only
torch, torchvision, numpy and pytest, plus KServe for the predictor's tests: the GPU
machine's image lacks the cluster tier's packages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


# Every test module here carries these marks.
GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]


@pytest.fixture(scope="session")
def dataset():
    """The whole real dataset, found as the trainer finds it ($FASHION_MNIST_DIR first)."""
    from trainer.data import find_raw_dir, load

    return load(find_raw_dir(download=False))


@pytest.fixture(scope="session")
def packed_small(tmp_path_factory) -> Path:
    """A packed slice of the real data: the first 4,000 train and 1,000 test images."""
    from trainer.data import find_raw_dir, pack

    out = tmp_path_factory.mktemp("packed-small")
    pack(out, find_raw_dir(download=False), train_limit=4000, test_limit=1000)
    return out


@pytest.fixture(scope="session")
def run_trainer():
    """``(*args, torchrun=0) -> CompletedProcess`` of ``python -m trainer`` (or torchrun)."""

    def run(*args: str, torchrun: int = 0) -> subprocess.CompletedProcess:
        launcher = ["-m", "trainer"]
        if torchrun:
            launcher = ["-m", "torch.distributed.run", "--standalone"]
            launcher += ["--nproc-per-node", str(torchrun), "-m", "trainer"]
        return subprocess.run(
            [sys.executable, *launcher, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )

    return run
