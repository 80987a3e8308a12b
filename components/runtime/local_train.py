"""Train on this machine: ``torchrun --standalone --nproc-per-node N -m trainer`` as a subprocess.

The same trainer flags as the cluster's job, with all ``workers * nproc_per_node``
processes on one node (gloo on CPU). The trainer's output streams into the step's log; a
non-zero exit or the timeout fails the step with the output's tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path

from components.runtime.logs import LOG_TAIL_LINES
from components.specs.params import TrainingJob
from components.specs.pods import TrainerFlags, WorkPaths

STOP_GRACE_SECONDS = 40  # torchrun gives its workers 30 s to stop after SIGTERM


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
    """The cluster job's flags, on CPU unless the job asks for GPUs."""
    return replace(TrainerFlags.for_job(job, paths), no_cuda=not job.gpus_per_worker)


def run_local_training(
    job: TrainingJob, dataset_dir: str, model_dir: str, workspace_path: str
) -> None:
    """Train into ``model_dir`` from the packed data in ``dataset_dir``.

    Raises:
        RuntimeError: torchrun exited non-zero or ran past ``job.timeout_seconds``.
    """
    paths = WorkPaths(
        Path(dataset_dir), Path(model_dir), WorkPaths.under(workspace_path).checkpoints
    )
    command = torchrun_command(local_flags(job, paths), job.processes)
    print("running", " ".join(command[1:]), flush=True)
    tail = deque(maxlen=LOG_TAIL_LINES)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    timed_out = threading.Event()
    timer = threading.Timer(job.timeout_seconds, _stop, (process, timed_out))
    timer.start()
    try:
        for line in process.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
        code = process.wait()
    finally:
        timer.cancel()
        _stop(process)
    if timed_out.is_set():
        raise RuntimeError(
            f"torchrun ran past {job.timeout_seconds} s and was stopped. "
            "Last lines:\n" + "\n".join(tail)
        )
    if code != 0:
        raise RuntimeError(f"torchrun exited with code {code}. Last lines:\n" + "\n".join(tail))


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
