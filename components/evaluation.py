"""Evaluate a model directory on the packed test split; the Markdown report of the results."""

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


def markdown_report(result: Evaluation, training: dict) -> str:
    """Per-class accuracy, the most confused pairs, and the training curve, in Markdown."""
    lines = [
        "# FashionMNIST model evaluation",
        "",
        f"Test accuracy **{result.accuracy:.2%}**, loss {result.loss:.4f}, on "
        f"{int(result.confusion.sum()):,} images.",
        "",
        "## Per-class accuracy",
        "",
        "| class | accuracy | most often mistaken for |",
        "|---|---:|---|",
    ]
    off_diagonal = result.confusion - np.diag(np.diag(result.confusion))
    for index, name in enumerate(result.class_names):
        worst = int(off_diagonal[index].argmax())
        mistaken = (
            f"{result.class_names[worst]} ({off_diagonal[index, worst]})"
            if off_diagonal[index, worst]
            else "-"
        )
        lines.append(f"| {name} | {result.per_class_accuracy[index]:.2%} | {mistaken} |")
    lines += ["", "## Training curve", ""] + _curve(training.get("history", []))
    return "\n".join(lines) + "\n"


def _curve(history: list[dict]) -> list[str]:
    if not history:
        return ["(no training history in model.json)"]
    lines = ["| epoch | train loss | test loss | test accuracy | |", "|---:|---:|---:|---:|---|"]
    for entry in history:
        bar = "█" * round(entry["accuracy"] * 20)
        lines.append(
            f"| {entry['epoch']} | {entry.get('train_loss', float('nan')):.4f} | "
            f"{entry['loss']:.4f} | {entry['accuracy']:.2%} | {bar} |"
        )
    return lines
