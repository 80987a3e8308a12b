"""Evaluate a model directory on the packed test split."""

from dataclasses import dataclass

import numpy as np

BATCH_SIZE = 1000


@dataclass(frozen=True)
class Evaluation:
    """Test-set results of one model."""

    accuracy: float
    loss: float  # mean negative log-likelihood
    confusion: np.ndarray  # [true class, predicted class] counts
    class_names: list[str]

    @property
    def per_class_accuracy(self) -> np.ndarray:
        """Recall of every class (the diagonal over the row sums)."""
        return np.diag(self.confusion) / np.maximum(self.confusion.sum(axis=1), 1)


def evaluate_model_dir(model_dir: str, dataset_dir: str) -> tuple[Evaluation, dict]:
    """Run the model over the packed test split; return the results and the model card."""
    import torch
    import torch.nn.functional as F

    from trainer.data import load_packed
    from trainer.model import load_model_dir, normalize

    network, card = load_model_dir(model_dir)
    test = load_packed(dataset_dir).test
    classes = len(card.class_names)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    loss_sum = 0.0
    with torch.inference_mode():
        for start in range(0, len(test), BATCH_SIZE):
            images = torch.tensor(test.images[start : start + BATCH_SIZE])
            labels = torch.tensor(test.labels[start : start + BATCH_SIZE], dtype=torch.long)
            log_probs = network(normalize(images, card.pixel_mean, card.pixel_std))
            loss_sum += F.nll_loss(log_probs, labels, reduction="sum").item()
            np.add.at(confusion, (labels.numpy(), log_probs.argmax(1).numpy()), 1)
    count = max(len(test), 1)
    result = Evaluation(
        float(np.trace(confusion)) / count, loss_sum / count, confusion, list(card.class_names)
    )
    return result, card.training
