"""Where a CI run's time went: tools/ci/phase notes each phase, tools/ci/phases.py prints the
table .ci/run ends with, from those notes and the tier's build logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "ci"))
import phases  # noqa: E402

# Lines as harness/build.py, image_builds.py, registry.py and commands.py print them.
BUILD_LOG = """\
building kubernetes (k8s.io/kubernetes v1.36.3)
image localhost/fmnist-tier/debian:bookworm: building
image localhost/fmnist-tier/debian:bookworm: built in 418.2 s (0.20 GB)
image localhost/fmnist-tier/python:3.11-bookworm: cached (0.35 GB)
built kubernetes in 711.0 s
pushed ours to 10.96.0.5:5000 in 164.3 s
pulled ours (4 images) in 45.4 s
control plane built (1890.4 s)
all built (2171.7 s); binaries in build/cluster/bin
"""


def test_the_phase_wrapper_notes_name_seconds_and_status_and_keeps_the_status(tmp_path):
    notes = tmp_path / "phases.tsv"
    env = {**os.environ, "FMNIST_PHASES": str(notes)}
    phase = str(REPO / "tools" / "ci" / "phase")
    failed = subprocess.run([phase, "soak tier", "bash", "-c", "exit 3"], env=env)
    passed = subprocess.run([phase, "lint", "true"], env=env)
    assert (failed.returncode, passed.returncode) == (3, 0)
    rows = [line.split("\t") for line in notes.read_text().splitlines()]
    assert [(name, status) for name, _, status in rows] == [("soak tier", "3"), ("lint", "0")]
    assert all(int(seconds) <= 1 for _, seconds, _ in rows)  # bash's SECONDS may tick over


def test_without_a_notes_file_the_wrapper_only_runs_the_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FMNIST_PHASES"}
    done = subprocess.run(
        [str(REPO / "tools" / "ci" / "phase"), "x", "touch", "ran"], cwd=tmp_path, env=env
    )
    assert done.returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["ran"]


def test_the_build_logs_steps_become_rows_and_cached_ones_are_left_out(tmp_path):
    log = tmp_path / "cluster-build.log"
    log.write_text(BUILD_LOG)
    assert phases.build_steps(log) == [
        ("image localhost/fmnist-tier/debian:bookworm", 418.2, "(cluster-build.log)"),
        ("go build kubernetes", 711.0, "(cluster-build.log)"),
        ("push ours to the tier's registry", 164.3, "(cluster-build.log)"),
        ("pull ours into a node (4 images)", 45.4, "(cluster-build.log)"),
        ("cluster.py build, to the control plane", 1890.4, "(cluster-build.log)"),
        ("cluster.py build, start to end", 2171.7, "(cluster-build.log)"),
    ]
    assert phases.build_steps(tmp_path / "no-karmada-build.log") == []


def test_the_table_has_a_line_per_phase_a_failure_and_the_total(tmp_path):
    notes = tmp_path / "phases.tsv"
    notes.write_text("venv\t212\t0\ndefault tier (make test)\t670\t2\n")
    table = phases.table(phases.phases(notes), 3542)
    assert table.splitlines()[1:] == [
        "  venv                        3 min 32 s",
        "  default tier (make test)   11 min 10 s  failed (2)",
        "  total                      59 min  2 s",
    ]
