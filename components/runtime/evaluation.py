"""Evaluate a model directory on the packed test split; the facts of the run for its report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from components.runtime.commit import source_commit
from components.runtime.gate import Champion, Decision

BATCH_SIZE = 1000
MISTAKES_KEPT = 8  # misclassified test images the report shows, the most confident first


@dataclass(frozen=True)
class Mistake:
    """A misclassified test image."""

    index: int  # in the test split
    true_class: int
    predicted_class: int
    confidence: float  # the predicted class's probability
    image: np.ndarray  # uint8 [28, 28]


@dataclass(frozen=True)
class Evaluation:
    """Test-set results of one model."""

    accuracy: float
    loss: float  # mean negative log-likelihood
    confusion: np.ndarray  # [true class, predicted class] counts
    class_names: list[str]
    mistakes: list[Mistake] = field(default_factory=list)  # the most confident ones

    @property
    def per_class_accuracy(self) -> np.ndarray:
        """Recall of every class (the diagonal over the row sums)."""
        return np.diag(self.confusion) / np.maximum(self.confusion.sum(axis=1), 1)


@dataclass(frozen=True)
class RunFacts:
    """What the report says about the run besides the test results."""

    evaluated_at: str  # UTC, ``2026-12-01 09:53 UTC``
    commit: str | None  # the checkout's git commit, else the image's (runtime/commit.py)
    model_uri: str
    data: dict  # the packed dataset's counts and source
    champion: Champion  # the model serving now, as the step found it
    decision: Decision  # the gate's


def evaluate_model_dir(model_dir: str, dataset_dir: str) -> tuple[Evaluation, dict]:
    """Run the model over the packed test split; return the results and the model card."""
    import torch
    import torch.nn.functional as F

    from trainer.data import load_packed
    from trainer.model import load_model_dir, normalize

    network, card = load_model_dir(model_dir)
    test = load_packed(dataset_dir).test
    labels = np.asarray(test.labels, dtype=np.int64)
    loss_sum = 0.0
    confidences, predictions = [], []  # the predicted class and its probability, per image
    with torch.inference_mode():
        for start in range(0, len(test), BATCH_SIZE):
            images = torch.tensor(test.images[start : start + BATCH_SIZE])
            log_probs = network(normalize(images, card.pixel_mean, card.pixel_std))
            batch_labels = torch.tensor(labels[start : start + BATCH_SIZE])
            loss_sum += F.nll_loss(log_probs, batch_labels, reduction="sum").item()
            confidence, predicted = log_probs.exp().max(1)
            confidences.append(confidence.numpy())
            predictions.append(predicted.numpy())
    confidence = np.concatenate(confidences) if confidences else np.zeros(0, np.float32)
    predicted = np.concatenate(predictions) if predictions else np.zeros(0, np.int64)
    classes = len(card.class_names)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    wrong = np.flatnonzero(predicted != labels)
    shown = wrong[np.lexsort((wrong, -confidence[wrong]))][:MISTAKES_KEPT]  # ties: index order
    mistakes = [
        Mistake(
            int(index),
            int(labels[index]),
            int(predicted[index]),
            float(confidence[index]),
            np.array(test.images[index]),
        )
        for index in shown
    ]
    count = max(len(test), 1)
    result = Evaluation(
        float(np.trace(confusion)) / count,
        loss_sum / count,
        confusion,
        list(card.class_names),
        mistakes,
    )
    return result, card.training


def run_facts(model_uri: str, dataset_dir: str, champion: Champion, decision: Decision) -> RunFacts:
    """The time, the commit, the model's place, the data slice, the champion and the gate."""
    manifest = json.loads((Path(dataset_dir) / "manifest.json").read_text())
    return RunFacts(
        evaluated_at=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        commit=source_commit(),
        model_uri=model_uri,
        data={key: manifest.get(key) for key in ("counts", "complete", "source")},
        champion=champion,
        decision=decision,
    )
