"""The table `.ci/run` prints at its end: where a CI run's time went.

    python3 tools/ci/phases.py PHASES_FILE TOTAL_SECONDS [BUILD_LOG ...]

PHASES_FILE holds what tools/ci/phase wrote (name, seconds, exit status per line); each
BUILD_LOG is the output of `cluster.py build` or `build-karmada`, whose lines say what each
Go build, image, push and pull took. Standard library only: it runs before the venv exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# What harness/build.py, image_builds.py, registry.py and commands.py print.
BUILD_LINES = [
    (re.compile(r"^built (\S+) in ([\d.]+) s"), "go build {}"),
    (re.compile(r"^image (\S+): built in ([\d.]+) s"), "image {}"),
    (re.compile(r"^pushed (\S+) to \S+ in ([\d.]+) s"), "push {} to the tier's registry"),
    (
        re.compile(r"^pulled (\S+) \((\d+) images\) in ([\d.]+) s"),
        "pull {} into a node ({} images)",
    ),
    (re.compile(r"^control plane built \(([\d.]+) s\)"), "cluster.py build, to the control plane"),
    (re.compile(r"^all built \(([\d.]+) s\)"), "cluster.py build, start to end"),
]


def phases(path: Path) -> list[tuple[str, float, str]]:
    """The lines tools/ci/phase wrote: (name, seconds, "" or "failed (status)")."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        name, seconds, status = line.split("\t")
        rows.append((name, float(seconds), "" if status == "0" else f"failed ({status})"))
    return rows


def build_steps(log: Path) -> list[tuple[str, float, str]]:
    """What one build log says each step took; cached steps are left out."""
    rows = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        for pattern, label in BUILD_LINES:
            found = pattern.match(line)
            if found:
                *names, seconds = found.groups()
                rows.append((label.format(*names), float(seconds), f"({log.name})"))
    return rows


def table(rows: list[tuple[str, float, str]], total: float) -> str:
    """One line per phase: name, minutes and seconds, a note."""
    width = max([len(name) for name, _, _ in rows] + [len("total")])
    lines = ["CI phases (wall time; the build logs' steps ran beside the tests):"]
    for name, seconds, note in [*rows, ("total", total, "")]:
        minutes, rest = divmod(round(seconds), 60)
        lines.append(f"  {name:<{width}}  {minutes:3d} min {rest:2d} s  {note}".rstrip())
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Print the table for a phases file, the run's total seconds and the build logs."""
    phases_file, total, *logs = argv
    rows = phases(Path(phases_file))
    for log in logs:
        rows += build_steps(Path(log))
    print(table(rows, float(total)))


if __name__ == "__main__":
    main(sys.argv[1:])
