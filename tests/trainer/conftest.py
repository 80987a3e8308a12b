"""Trainer test helpers: an evaluation of a saved model that shares no code with training."""

from __future__ import annotations

import pytest


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
