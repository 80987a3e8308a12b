"""The DDP training loop: shard, train, evaluate over all ranks, checkpoint, save the model."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from trainer import batches, checkpoint
from trainer.config import TrainConfig, config_dict
from trainer.data import CLASS_NAMES, Dataset
from trainer.distributed import (
    Context,
    LaunchError,
    all_reduce_sum,
    barrier,
    broadcast_buffers,
)
from trainer.metrics import format_metric_line
from trainer.model import normalize, save_model_dir, saved_network, training_network
from trainer.model_dir import ModelCard
from trainer.progress import Progress
from trainer.step import (
    GraphedStep,
    TrainStep,
    build_optimizer,
    build_scheduler,
    kernels,
    mixed_precision_dtype,
)

# A uniform guess over the classes costs ln 10 = 2.3 nats; an epoch's mean training loss a
# hundred times that is weights that blew up (a learning rate far too high), not slow learning.
UNIFORM_GUESS_LOSS = math.log(len(CLASS_NAMES))
DIVERGED_LOSS = 100 * UNIFORM_GUESS_LOSS


class Diverged(RuntimeError):
    """The loss became NaN, infinite, or exploded: training cannot produce a model."""


def check_loss(name: str, value: float, epoch: int, lr: float) -> None:
    """Stop a run whose epoch ended with a loss that is not finite, or exploded.

    Raises:
        Diverged: names the epoch, the learning rate and the loss.
    """
    if math.isfinite(value) and value <= DIVERGED_LOSS:
        return
    raise Diverged(
        f"training diverged in epoch {epoch} with --lr {lr:g}: {name} {value:.4g} "
        f"(a uniform guess: {UNIFORM_GUESS_LOSS:.2f}); try a smaller --lr"
    )


class Trainer:
    """Trains the network on this rank's shard and reports on rank 0."""

    def __init__(self, config: TrainConfig, data: Dataset, context: Context):
        self.config, self.context = config, context
        self.stats = (data.manifest["pixel_mean"], data.manifest["pixel_std"])
        self.class_names = data.manifest["class_names"]
        # Both splits live where batches are made: on the GPU, one copy instead of one a step.
        home = context.device if config.device_data else torch.device("cpu")
        train = data.train.head(config.train_limit)
        test = data.test.head(config.test_limit)
        shard = batches.test_shard(len(test), context.rank, context.world_size).numpy()
        self.train_x, self.train_y = _tensors(train.images, train.labels, self.stats, home)
        self.flippable = batches.flippable_examples(self.train_y.cpu(), self.class_names)
        self.test_x, self.test_y = _tensors(
            test.images[shard], test.labels[shard], self.stats, home
        )

        torch.manual_seed(config.seed)
        self.model = _channels_last(training_network(config.batch_norm).to(context.device))
        self.ddp = DistributedDataParallel(self.model) if context.distributed else self.model
        self.optimizer = build_optimizer(config, self.model)
        self.steps_per_epoch = batches.steps_per_epoch(
            len(self.train_y), config.batch_size, context.world_size
        )
        self.scheduler = build_scheduler(config, self.optimizer, self.steps_per_epoch)
        self.sampler = DistributedSampler(
            range(len(self.train_y)), context.world_size, context.rank, seed=config.seed
        )
        self.step = self._build_step()
        self.epoch, self.history = 0, []
        self._resume()

    def _build_step(self) -> TrainStep | GraphedStep:
        dtype = mixed_precision_dtype(self.config.precision, self.context.device)
        split = (self.train_x, self.train_y)
        step = TrainStep(self.ddp, self.optimizer, self.scheduler, split, self.config, dtype)
        if not self.config.cuda_graphs:
            return step
        if self.context.device.type != "cuda" or self.context.distributed:
            raise LaunchError("--cuda-graphs needs a CUDA device and a single process")
        size = batches.local_batch_size(self.config.batch_size, self.context.world_size)
        return GraphedStep(step, size)

    def _resume(self) -> None:
        state = checkpoint.load(self.config.checkpoint_dir)
        if state is None:
            return
        checkpoint.check_compatible(state, config_dict(self.config), self.steps_per_epoch)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # this run's kernels, on this device
            group.update(kernels(self.config, self.context.device), lr=float(group["lr"]))
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.epoch, self.history = state["epoch"], state["history"]
        if self.history:  # where the run stands, for a reader of this log alone (Katib)
            last = self.history[-1]
            self._log(format_metric_line(last["accuracy"], last["loss"]))
        self._log(
            f"resumed from epoch {self.epoch} (its checkpoint); epoch {self.epoch + 1} is next"
        )

    def _log(self, message: str) -> None:
        if self.context.is_main:
            print(message, flush=True)

    def run_epoch(self, epoch: int) -> float:
        """Train one epoch on this rank's shard; return the mean training loss of all ranks.

        Reading the loss is the epoch's one wait for the device; every rank gets the same
        value, so every rank stops together when it diverged.
        """
        self.ddp.train()
        self.sampler.set_epoch(epoch)
        generator = None
        if self.config.augment:
            generator = torch.Generator().manual_seed(
                self.config.seed * 100_003 + epoch * 1_009 + self.context.rank
            )
        order, flips = batches.epoch_plan(
            self.sampler, generator, self.train_x.device, self.flippable
        )
        self.step.loss_sum.zero_()
        progress = Progress(self._log, epoch, len(self.train_y))
        steps = self.train_steps(order, flips, progress)
        progress.flush()
        loss_sum = all_reduce_sum(self.step.loss_sum.detach().double(), self.context).item()
        return loss_sum / max(steps * self.context.world_size, 1)

    def train_steps(self, order: torch.Tensor, flips: torch.Tensor | None, progress) -> int:
        """The step loop; on a GPU nothing in it waits for the device. Returns the steps."""
        size = batches.local_batch_size(self.config.batch_size, self.context.world_size)
        steps = 0
        for steps, (index, flip) in enumerate(batches.batch_slices(order, flips, size), 1):
            self.step(index, flip)
            if steps % self.config.log_interval == 0 and self.context.is_main:
                progress.mark(steps * size * self.context.world_size, steps, self.step.loss_sum)
        return steps

    @torch.inference_mode()
    def evaluate(self) -> tuple[float, float]:
        """Test accuracy and mean NLL loss over the whole test set, summed across ranks.

        Every rank evaluates rank 0's network, the one that is saved: DDP hands rank 0's
        buffers to the others before each training step, not after it.
        """
        broadcast_buffers(self.model, self.context)
        self.model.eval()
        device, size = self.context.device, self.config.test_batch_size
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, count
        for start in range(0, len(self.test_y), size):
            images = self.test_x[start : start + size].to(device, non_blocking=True)
            labels = self.test_y[start : start + size].to(device, non_blocking=True)
            log_probs = self.model(images)
            totals[0] += F.nll_loss(log_probs, labels, reduction="sum")
            totals[1] += (log_probs.argmax(1) == labels).sum()
            totals[2] += len(labels)
        loss_sum, correct, count = all_reduce_sum(totals, self.context).tolist()
        return correct / count, loss_sum / count

    def _save_checkpoint(self) -> None:
        if self.context.is_main and self.config.checkpoint_dir:
            checkpoint.save(
                self.config.checkpoint_dir,
                {
                    "epoch": self.epoch,
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                    "rng": torch.get_rng_state(),
                    "history": self.history,
                    "config": config_dict(self.config),
                    "steps_per_epoch": self.steps_per_epoch,
                },
            )
        barrier(self.context)

    def fit(self) -> Iterator[dict]:
        """Run the remaining epochs, yielding each epoch's metrics as it ends."""
        while self.epoch < self.config.epochs:
            self.epoch += 1
            started = time.perf_counter()
            train_loss = self.run_epoch(self.epoch)
            check_loss("mean training loss", train_loss, self.epoch, self.config.lr)
            accuracy, loss = self.evaluate()
            check_loss("test loss", loss, self.epoch, self.config.lr)
            self.history.append(
                {
                    "epoch": self.epoch,
                    "accuracy": round(accuracy, 6),
                    "loss": round(loss, 6),
                    "train_loss": round(train_loss, 6),
                    "seconds": round(time.perf_counter() - started, 3),
                }
            )
            line = format_metric_line(accuracy, loss)
            self._log(line)
            self._append_log(line)
            self._save_checkpoint()
            yield self.history[-1]

    def train(self) -> dict:
        """Train to the last epoch, save the model, and return the last epoch's metrics."""
        for _ in self.fit():
            pass
        final = self.history[-1] if self.history else {}
        self._save_model(final)
        return final

    def _append_log(self, line: str) -> None:
        if self.context.is_main and self.config.log_path:
            with open(self.config.log_path, "a") as handle:
                handle.write(line + "\n")

    def _save_model(self, final: dict) -> None:
        out = self.config.model_dir
        if not (self.context.is_main and out):
            return
        card = ModelCard(
            architecture="lenet",
            class_names=list(self.class_names),
            pixel_mean=self.stats[0],
            pixel_std=self.stats[1],
            metrics={key: final[key] for key in ("accuracy", "loss") if key in final},
            training={
                "config": config_dict(self.config),
                "history": self.history,
                "world_size": self.context.world_size,
            },
        )
        save_model_dir(saved_network(self.model), out, card)
        self._log(f"saved model to {out}")


def _tensors(images, labels, stats: tuple[float, float], device: torch.device):
    """Normalised channels-last images and int64 labels of a split, on ``device``."""
    x = _channels_last(normalize(torch.tensor(images), *stats))
    return x.to(device), torch.tensor(labels, dtype=torch.long).to(device)


def _channels_last(tensor_or_model):
    """NHWC memory layout: faster convolutions on CPU (oneDNN) and tensor-core GPUs."""
    return tensor_or_model.to(memory_format=torch.channels_last)
