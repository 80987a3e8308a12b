"""Train on this machine: ``torchrun --standalone --nproc-per-node N -m trainer`` as a subprocess.

The same trainer flags as the cluster's job, with all ``workers * nproc_per_node``
processes on one node (gloo on CPU; one CUDA GPU each when the job asks for GPUs, which
this machine must have). The trainer's output streams into the step's log; a non-zero
exit or the timeout fails the step with the reason and the trainer's last lines (torchrun's
own report on a failed worker, a traceback, stays in the log: torchrun_log.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from components.runtime.logs import LOG_TAIL_LINES
from components.runtime.torchrun_log import TrainerTail
from components.specs.params import TrainingJob
from components.specs.pods import TrainerFlags, WorkPaths

STOP_GRACE_SECONDS = 40  # torchrun gives its workers 30 s to stop after SIGTERM


class GpusMissing(ValueError):
    """The job asks for more CUDA GPUs than this machine has."""


def missing_gpus(job: TrainingJob) -> str | None:
    """What is missing for the job's GPUs here (one per process), or None when nothing is."""
    if not job.gpus_per_worker:
        return None
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needed = job.workers * job.gpus_per_worker
    if visible >= needed:
        return None
    return (
        f"--gpus-per-worker {job.gpus_per_worker} with --workers {job.workers} needs "
        f"{needed} CUDA GPU(s) on this machine, and torch sees {visible}"
    )


def local_job(job: TrainingJob, cpu_fallback: bool, warn: Callable[[str], None]) -> TrainingJob:
    """The job as this machine can run it: the CPU instead of missing GPUs only if allowed.

    ``warn`` is told when the job falls back to the CPU.

    Raises:
        GpusMissing: the GPUs are not there and ``cpu_fallback`` is off.
    """
    missing = missing_gpus(job)
    if missing is None:
        return job
    if not cpu_fallback:
        raise GpusMissing(f"{missing}; --cpu-fallback trains on the CPU instead")
    warn(f"{missing}: training on the CPU instead (--cpu-fallback)")
    return replace(job, gpus_per_worker=0)


def torchrun_command(flags: TrainerFlags, processes: int) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m trainer <flags>``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        "-m",
        "trainer",
        *flags.args(),
    ]


def local_flags(job: TrainingJob, paths: WorkPaths) -> TrainerFlags:
    """The cluster job's flags, on CPU unless the job asks for GPUs (see ``missing_gpus``)."""
    return replace(TrainerFlags.for_job(job, paths), no_cuda=not job.gpus_per_worker)


def run_local_training(
    job: TrainingJob, dataset_dir: str, model_dir: str, workspace_path: str
) -> None:
    """Train into ``model_dir`` from the packed data in ``dataset_dir``.

    Raises:
        RuntimeError: the job's GPUs are not here, or torchrun exited non-zero or ran past
            ``job.timeout_seconds``.
    """
    missing = missing_gpus(job)
    if missing:
        raise RuntimeError(f"{missing}: nothing was trained")
    paths = WorkPaths(
        Path(dataset_dir), Path(model_dir), WorkPaths.under(workspace_path).checkpoint_dir
    )
    command = torchrun_command(local_flags(job, paths), job.processes)
    print("running", " ".join(command[1:]), flush=True)
    # torchrun keeps its workers' error files in a mkdtemp("torchelastic_") that it never
    # removes (torch.distributed.elastic.multiprocessing DefaultLogsSpecs): a temporary
    # folder of its own, removed when it ends, keeps them out of the machine's.
    with tempfile.TemporaryDirectory(prefix="fmnist-torchrun-") as scratch:
        env = {**os.environ, "TMPDIR": scratch}
        code, tail, timed_out = _run_torchrun(command, job.timeout_seconds, env)
    last = "\n".join(tail.lines)
    if timed_out:
        raise RuntimeError(
            f"torchrun ran past {job.timeout_seconds} s and was stopped. Last lines:\n{last}"
        )
    if code != 0:
        raise RuntimeError(
            f"torchrun exited with code {code}: {tail.reason()}. The trainer's last lines:\n{last}"
        )


def _run_torchrun(
    command: list[str], timeout_seconds: float, env: dict[str, str]
) -> tuple[int, TrainerTail, bool]:
    """Run torchrun, streaming its output: its exit code, its last lines, whether it timed out.

    The last lines stop where torchrun's own report on a failed worker begins.
    """
    tail = TrainerTail(LOG_TAIL_LINES)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
        env=env,
    )
    timed_out = threading.Event()
    timer = threading.Timer(timeout_seconds, _stop, (process, timed_out))
    timer.start()
    try:
        for line in process.stdout:
            print(line, end="", flush=True)
            tail.add(line.rstrip("\n"))
        code = process.wait()
    finally:
        timer.cancel()
        _stop(process)
    return code, tail, timed_out.is_set()


def _stop(process: subprocess.Popen, timed_out: threading.Event | None = None) -> None:
    """Stop torchrun and its workers if still running (noting a timeout when given one).

    torchrun starts each worker in a session of its own, out of reach of a signal to
    torchrun's process group: SIGTERM lets torchrun stop them itself; whatever is left
    after STOP_GRACE_SECONDS is killed.
    """
    if process.poll() is not None:
        return
    if timed_out is not None:
        timed_out.set()
    process.terminate()
    try:
        process.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
