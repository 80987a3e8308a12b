"""Trainer test helpers: an evaluation of a saved model that shares no code with training,
and the trainer started in two processes the way a PyTorchJob starts its pods."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.runtime.ports import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pytorchjob_ranks():
    """``(args, timeout) -> [CompletedProcess of rank 0, of rank 1]``.

    ``python -m trainer ARGS`` in two processes, each with the env a PyTorchJob pod gets
    (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) and no torchrun to stop a rank left behind.
    """

    def run(args: list[str], timeout: float) -> list[subprocess.CompletedProcess]:
        port = str(free_port())
        command = [sys.executable, "-m", "trainer", *args]
        procs = [
            subprocess.Popen(
                command,
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={
                    **os.environ,
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "WORLD_SIZE": "2",
                    "RANK": str(rank),
                },
            )
            for rank in range(2)
        ]
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
        return [
            subprocess.CompletedProcess(command, proc.returncode, out, err)
            for proc, (out, err) in zip(procs, outputs, strict=True)
        ]

    return run


@pytest.fixture(scope="session")
def evaluate_saved():
    """``(model_dir, packed_dir, test_limit) -> (accuracy, mean NLL)`` in this one process."""
    import torch
    import torch.nn.functional as F

    from trainer.data import load_packed
    from trainer.model import load_model_dir, normalize

    def evaluate(model_dir, packed_dir, test_limit: int) -> tuple[float, float]:
        net, card = load_model_dir(model_dir)
        test = load_packed(packed_dir).test.head(test_limit)
        labels = torch.tensor(test.labels)
        with torch.inference_mode():
            images = normalize(torch.tensor(test.images), card.pixel_mean, card.pixel_std)
            log_probs = net(images).double()
        accuracy = (log_probs.argmax(1) == labels).double().mean().item()
        return accuracy, F.nll_loss(log_probs, labels).item()

    return evaluate
