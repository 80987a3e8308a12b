"""Many runs in a row leave nothing behind, and the predictor's memory stays flat.

The ``soak`` tier (``make test-soak``; .ci/run runs it while the cluster tier builds): five
whole ``fmnist run``s back to back on a slice of the real data, as separate processes the
way a user starts them, and 100,000 requests to one real ``python -m serving`` process over
real HTTP. What a run keeps is what docs/pipeline.md says it keeps: its run directory (step
outputs, ``log.txt``, ``metrics.json``, ``report.html``, ``manifests/``) and the ``latest``
link; kfp.local deletes the run's workspace. Nothing else may remain: no process (so no
listening port), no file in the temporary folder, no ``workspace``. The runs get a
temporary folder of their own (``TMPDIR``), and a process is theirs when its environment
names it, even one that left the process tree: CI runs this tier beside the cluster tier's
build, whose temporary files, processes and ports are not theirs.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from components.runtime.local_predictor import running_predictor
from serving.defaults import MODEL_NAME

pytestmark = pytest.mark.soak
# Five: a run that leaves something behind shows it at once (every run is checked), and five
# sizes show whether a run directory grows. Ten took twice the CPU for the same answer.
RUNS = 5
SLICE = ["--train-limit", "2000", "--test-limit", "500", "--epochs", "1", "--workers", "2"]
KEPT = {"outputs", "log.txt", "metrics.json", "report.html", "manifests"}  # docs/pipeline.md
REQUESTS = 100_000
CLIENTS = 8


def processes_under(temporary: Path) -> list[str]:
    """The command lines of the live processes whose ``TMPDIR`` is in ``temporary``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("TMPDIR", "").startswith(str(temporary)):
                found.append(" ".join(process.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_whole_runs_in_a_row_leave_nothing_behind(tmp_path, record_property):
    runs, fmnist = tmp_path / "runs", Path(sys.executable).with_name("fmnist")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with subprocess.Popen(["sleep", "60"], env={"TMPDIR": str(temporary / "x")}) as sleeper:
        assert processes_under(temporary) == ["sleep 60"]  # it sees a process of the runs
        sleeper.kill()
    seconds = []
    for index in range(RUNS):
        started = time.monotonic()
        run = subprocess.run(
            [
                str(fmnist),
                "run",
                *SLICE,
                "--min-accuracy",
                "0.1",
                "--run-dir",
                str(runs / f"r{index}"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TMPDIR": str(temporary)},
        )
        seconds.append(round(time.monotonic() - started, 1))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert processes_under(temporary) == []
        assert set(os.listdir(runs / f"r{index}")) == KEPT
        assert os.listdir(temporary) == [], f"run {index} left these in its TMPDIR"
    assert sorted(os.listdir(runs)) == sorted([f"r{i}" for i in range(RUNS)] + ["latest"])
    sizes = [
        sum(f.stat().st_size for f in (runs / f"r{i}").rglob("*") if f.is_file())
        for i in range(RUNS)
    ]
    assert max(sizes) < 1.2 * min(sizes), sizes  # every run keeps the same, nothing grows
    record_property("run_seconds", seconds)
    record_property("run_dir_megabytes", round(max(sizes) / 1e6, 1))


def _client(port: int, path: str, body: bytes, count: int, failures: list) -> None:
    """``count`` requests over one kept-alive connection (the standard library's client: it
    spends a fraction of what ``requests`` does a call, CPU the predictor shares)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(count):
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                failures.append(answer.status)
    finally:
        connection.close()


def _send(port: int, path: str, body: bytes, total: int) -> list:
    failures: list = []
    threads = [
        threading.Thread(target=_client, args=(port, path, body, total // CLIENTS, failures))
        for _ in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def test_the_predictors_memory_is_flat_over_100000_requests(trained_model_dir, record_property):
    """RSS after 10,000 requests of warm-up, then after 100,000 more: it may not grow by more
    than 16 MiB (allocator noise; a leak of one 3 KiB request body a call would be 300 MiB)."""
    image = [[(x * y) % 256 for x in range(28)] for y in range(28)]
    body = json.dumps({"instances": [image]}).encode()
    path = f"/v1/models/{MODEL_NAME}:predict"
    with running_predictor(trained_model_dir) as predictor:
        server = psutil.Process(predictor.process.pid)
        assert _send(predictor.port, path, body, 10_000) == []
        before = server.memory_info().rss
        started = time.monotonic()
        assert _send(predictor.port, path, body, REQUESTS) == []
        seconds = time.monotonic() - started
        after = server.memory_info().rss
    growth = (after - before) / 2**20
    record_property("rss_mib", [round(before / 2**20, 1), round(after / 2**20, 1)])
    record_property("requests_per_second", round(REQUESTS / seconds))
    assert growth <= 16, f"RSS grew by {growth:.1f} MiB over {REQUESTS} requests"
