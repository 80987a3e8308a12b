"""One training step (optimizer, schedule, precision), and ways to launch it cheaply on a GPU.

:class:`TrainStep` makes the batch from indices into the resident split, runs forward,
loss, backward and the optimizer, and adds the loss to a running sum on the device: no
value comes back to the host. :class:`GraphedStep` records that whole step as one CUDA
graph after a few eager steps and replays it for every full batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.batches import gather
from trainer.config import TrainConfig

# Eager steps before the capture: they run real batches (allocating the optimizer state
# and, with --compile, compiling) on a side stream, as CUDA graph capture requires.
GRAPH_WARMUP_STEPS = 3
# Share of the one-cycle schedule spent raising the learning rate; it then falls linearly.
# With flips that leave shoes alone, 0.1 and a linear fall gave 0.9255-0.9266 best test
# accuracy on seeds 1-3 where 0.2 and torch's cosine gave 0.9217-0.9256 (docs/benchmarks.md).
WARMUP_FRACTION = 0.1
# AdamW's beta2 (beta1 is --momentum): 0.99 averages the squared gradients over ~100 steps
# rather than torch's ~1,000; over 3 seeds it ended 10 epochs 0.0006 higher on average,
# within the spread between seeds (docs/benchmarks.md, "Accuracy of the default recipe").
ADAMW_BETA2 = 0.99
# AdamW's and SGD's fused kernels run on the CPU from torch 2.4.
FUSED_ON_CPU = torch.__version__ >= "2.4"


class TrainStep:
    """Forward, loss, backward and optimizer step for the batch at some indices."""

    def __init__(self, model, optimizer, scheduler, split, config: TrainConfig, autocast_dtype):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.images, self.labels = split
        self.device = next(model.parameters()).device
        self.autocast_dtype, self.label_smoothing = autocast_dtype, config.label_smoothing
        self.loss_sum = torch.zeros((), device=self.device)  # read only when reported
        self.loss = torch.compile(self._loss) if config.compile else self._loss

    def _loss(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # No autocast cache: a CUDA graph must not capture cast weights from an earlier step.
        with torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype,
            enabled=self.autocast_dtype is not None,
            cache_enabled=False,
        ):
            log_probs = self.model(images)
        return F.cross_entropy(log_probs.float(), labels, label_smoothing=self.label_smoothing)

    def update(self, index: torch.Tensor, flips: torch.Tensor | None) -> None:
        """Train on one batch; its loss is added to ``loss_sum``."""
        images = gather(self.images, index, flips).to(self.device, non_blocking=True)
        labels = self.labels[index].to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(images, labels)
        loss.backward()
        self.optimizer.step()
        self.loss_sum += loss.detach()

    def advance(self) -> None:
        """Move the learning-rate schedule one step (on the host, outside any graph)."""
        if self.scheduler is not None:
            self.scheduler.step()

    def __call__(self, index: torch.Tensor, flips: torch.Tensor | None) -> None:
        """One whole step: train on the batch, then advance the schedule."""
        self.update(index, flips)
        self.advance()


class GraphedStep:
    """A :class:`TrainStep` replayed as one CUDA graph for every batch of ``batch_size``.

    The learning rate lives in a device tensor the graph reads; after each host-side
    schedule step it is written there. A smaller last batch runs eagerly.
    """

    def __init__(self, step: TrainStep, batch_size: int):
        self.step, self.batch_size = step, batch_size
        self.loss_sum = step.loss_sum
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = 0
        self.lrs: list[torch.Tensor] = []

    def __call__(self, index: torch.Tensor, flips: torch.Tensor | None) -> None:
        """One whole step: replayed, or eager while warming up and for a smaller batch."""
        if len(index) != self.batch_size:
            self.step.update(index, flips)
        elif self.graph is not None:
            self.index.copy_(index)
            if flips is not None:
                self.flips.copy_(flips)
            self.graph.replay()
        elif self.warm < GRAPH_WARMUP_STEPS:
            self._side_stream_update(index, flips)
            self.warm += 1
        else:
            self._capture(index, flips)
            self.graph.replay()
        self.step.advance()
        self._write_lrs()

    def _side_stream_update(self, index, flips) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.step.update(index, flips)
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self, index: torch.Tensor, flips: torch.Tensor | None) -> None:
        self.index = index.clone()
        self.flips = None if flips is None else flips.clone()
        groups = self.step.optimizer.param_groups
        self.lrs = [_device_lr(group, self.step.device) for group in groups]
        self.step.optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step.update(self.index, self.flips)

    def _write_lrs(self) -> None:
        # Newer schedulers fill a tensor lr in place; older ones replace it with a float.
        if self.graph is None:
            return
        for group, lr in zip(self.step.optimizer.param_groups, self.lrs, strict=True):
            if group["lr"] is not lr:
                lr.fill_(float(group["lr"]))
                group["lr"] = lr


def _device_lr(group: dict, device: torch.device) -> torch.Tensor:
    """Make the group's learning rate a device tensor the captured optimizer step reads."""
    lr = group["lr"]
    if not (isinstance(lr, torch.Tensor) and lr.device == device):
        group["lr"] = torch.tensor(float(lr), device=device)
    if "capturable" in group:
        group["capturable"] = True
    return group["lr"]


def build_optimizer(config: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW or SGD over the model's parameters, in the implementation :func:`kernels` picks."""
    if config.optimizer == "adamw":
        return torch.optim.AdamW(
            model.parameters(),
            lr=config.lr,
            betas=(config.momentum, ADAMW_BETA2),
            weight_decay=config.weight_decay,
            **kernels(config, next(model.parameters()).device),
        )
    return torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        **kernels(config, next(model.parameters()).device),
    )


def kernels(config: TrainConfig, device: torch.device) -> dict:
    """Optimizer implementation flags: fused where torch has the kernel (graphs need it)."""
    graphs = config.cuda_graphs and device.type == "cuda"
    fused = (config.fused_optimizer or graphs) and (device.type == "cuda" or FUSED_ON_CPU)
    flags = {"fused": fused or None, "foreach": None}
    if config.optimizer == "adamw":
        flags["capturable"] = graphs
    return flags


def build_scheduler(config: TrainConfig, optimizer: torch.optim.Optimizer, steps_per_epoch: int):
    """One-cycle over the whole run (up, then linearly down), stepped every batch; or None."""
    if config.scheduler == "none":
        return None
    # Momentum (AdamW's beta1) stays what --momentum says rather than cycling.
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer,
        max_lr=config.lr,
        epochs=config.epochs,
        steps_per_epoch=steps_per_epoch,
        cycle_momentum=False,
        pct_start=WARMUP_FRACTION,
        anneal_strategy="linear",
    )


def mixed_precision_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for training (None: plain fp32); ``auto`` uses native bf16 only."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        native = (
            torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )
    return torch.bfloat16 if native else None
