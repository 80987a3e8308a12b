"""Train on this machine: ``torchrun --nproc-per-node N -m trainer`` as a subprocess.

The same trainer arguments as the PyTorchJob, with all ``workers * nproc_per_node``
processes on one node (gloo on CPU). The trainer's output streams into this step's
log; a non-zero exit or the timeout fails the step with the output's tail.
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

from components.launch_pytorchjob import LOG_TAIL_LINES, WorkPaths, trainer_flags
from components.manifests import trainer_args
from components.params import PipelineParams


def torchrun_command(params: PipelineParams, paths: WorkPaths) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m trainer ...``."""
    flags = replace(trainer_flags(params, paths), no_cuda=not params.gpus_per_worker)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={params.processes}",
        "-m",
        "trainer",
        *trainer_args(flags),
    ]


def run_local_training(
    params: PipelineParams, dataset_dir: str, model_dir: str, workspace_path: str
) -> None:
    """Train into ``model_dir`` from the packed data in ``dataset_dir``.

    Raises:
        RuntimeError: torchrun exited non-zero or ran past ``params.timeout_seconds``.
    """
    paths = WorkPaths(
        Path(dataset_dir), Path(model_dir), WorkPaths.under(workspace_path).checkpoints
    )
    command = torchrun_command(params, paths)
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
    timer = threading.Timer(params.timeout_seconds, _kill_group, (process, timed_out))
    timer.start()
    try:
        for line in process.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
        code = process.wait()
    finally:
        timer.cancel()
        _kill_group(process)
    if timed_out.is_set():
        raise RuntimeError(
            f"torchrun ran past {params.timeout_seconds} s and was stopped. "
            "Last lines:\n" + "\n".join(tail)
        )
    if code != 0:
        raise RuntimeError(f"torchrun exited with code {code}. Last lines:\n" + "\n".join(tail))


def _kill_group(process: subprocess.Popen, timed_out: threading.Event | None = None) -> None:
    """Kill torchrun and its workers if still running (noting a timeout when given one)."""
    if process.poll() is None:
        if timed_out is not None:
            timed_out.set()
        os.killpg(process.pid, signal.SIGKILL)
