"""The article's training setup, as the baseline the trainer benchmarks compare against.

torchvision's ``FashionMNIST`` dataset with per-sample ``ToTensor`` and a ``DataLoader``
(batch 32, shuffled; on CUDA one worker and pinned memory, as the reference passes),
the same network computed as the article's ``mnist.py`` computes it, SGD lr 0.01
momentum 0.9, one process, each batch copied to the device.
"""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torchvision import datasets, transforms

from trainer.data import RAW_FILES, find_raw_dir
from trainer.model import LeNet

CPU = torch.device("cpu")


def torchvision_root(tmp: Path, data_dir: str | None = None) -> Path:
    """Lay the raw files out the way torchvision expects (ungzipped, under FashionMNIST/raw)."""
    raw = tmp / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    source = find_raw_dir(data_dir)
    for name, _ in RAW_FILES.values():
        with gzip.open(source / name) as src, open(raw / name.removesuffix(".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    return tmp


def loaders(
    root: Path,
    batch_size: int = 32,
    train_limit: int | None = None,
    device: torch.device = CPU,
):
    """The article's train and test loaders."""
    to_tensor = transforms.Compose([transforms.ToTensor()])
    train = datasets.FashionMNIST(root, train=True, transform=to_tensor)
    test = datasets.FashionMNIST(root, train=False, transform=to_tensor)
    if train_limit:
        train = torch.utils.data.Subset(train, range(train_limit))
    extra = {"num_workers": 1, "pin_memory": True} if device.type == "cuda" else {}
    return (
        torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True, **extra),
        torch.utils.data.DataLoader(test, batch_size=1000, shuffle=False, **extra),
    )


class ArticleNet(LeNet):
    """LeNet's layers with the article's forward pass: ReLU, then ``max_pool2d``, in fp32 NCHW.

    The trainer's LeNet computes the same function with cheaper operations; the baseline
    keeps the article's, so a faster LeNet does not speed up the reference too.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities, exactly as the article's ``Net.forward``."""
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(x.view(-1, 4 * 4 * 50)))
        return F.log_softmax(self.fc2(x), dim=1)


class ReferenceRun:
    """The article's model, optimizer and epoch loop."""

    def __init__(self, seed: int = 1, device: torch.device = CPU):
        torch.manual_seed(seed)
        self.device = device
        self.model = ArticleNet().to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def train_epoch(self, train_loader) -> int:
        """One pass over the loader; returns the number of samples seen."""
        self.model.train()
        seen = 0
        for images, labels in train_loader:
            images, labels = images.to(self.device), labels.to(self.device)
            self.optimizer.zero_grad()
            F.nll_loss(self.model(images), labels).backward()
            self.optimizer.step()
            seen += len(labels)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return seen

    @torch.no_grad()
    def evaluate(self, test_loader) -> tuple[float, float]:
        """Test accuracy and mean loss."""
        self.model.eval()
        loss = correct = 0.0
        for images, labels in test_loader:
            images, labels = images.to(self.device), labels.to(self.device)
            out = self.model(images)
            loss += F.nll_loss(out, labels, reduction="sum").item()
            correct += (out.argmax(1) == labels).sum().item()
        n = len(test_loader.dataset)
        return correct / n, loss / n


def timed(fn, *args):
    """(result, seconds) of one call."""
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started
