"""Summarise a ``gpu_suite.sh`` run: the figures against the issue's targets, as Markdown.

    python benchmarks/gpu_summary.py WORK_DIR OUT_DIR > summary.md

Reads what the suite's steps wrote into WORK_DIR (benchmark JSON, step exit codes, the
trained models' cards) and OUT_DIR (pytest.xml, nvidia-smi samples); writes
OUT_DIR/results.json with every number and prints the summary.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from trainer.model_dir import CARD_FILE

EPOCH = 60_000
TARGETS = {"ratio": 50.0, "epoch_s": 0.3, "target_training_s": 3.0, "best_accuracy": 0.925}


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tests(out: Path) -> dict | None:
    """Counts from pytest's JUnit XML."""
    try:
        suite = ET.parse(out / "pytest.xml").getroot().find("testsuite")
    except (OSError, ET.ParseError):
        return None
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def utilisation(csv: Path) -> dict | None:
    """Mean and peak GPU utilisation over the samples from the first busy one to the last."""
    try:
        rows = [line.split(",") for line in csv.read_text().splitlines() if line.count(",") == 2]
        busy = [float(util) for _, util, _ in rows]
    except (OSError, ValueError):
        return None
    active = [i for i, value in enumerate(busy) if value > 0]
    if not active:
        return {"samples": len(busy), "mean_percent": 0.0, "peak_percent": 0.0}
    window = busy[active[0] : active[-1] + 1]
    return {
        "samples": len(window),
        "mean_percent": sum(window) / len(window),
        "peak_percent": max(window),
    }


def epochs(card_path: Path) -> list[dict] | None:
    card = _load(card_path)
    return card["training"]["history"] if card else None


def collect(work: Path, out: Path) -> dict:
    """Every number the suite produced, in one dictionary."""
    steps = {}
    for line in (
        (work / "steps.txt").read_text().splitlines() if (work / "steps.txt").exists() else []
    ):
        name, code, seconds = line.split()
        steps[name] = {"exit": code.split("=")[1], "seconds": int(seconds.split("=")[1])}
    serving = {path.stem: _load(path) for path in sorted(work.glob("serving-*.json"))}
    return {
        "gpu": (work / "gpu.txt").read_text() if (work / "gpu.txt").exists() else None,
        "steps": steps,
        "tests": tests(out),
        "throughput": _load(work / "throughput.json"),
        "compile": _load(work / "compile.json"),
        "accuracy": _load(work / "accuracy.json"),
        "utilisation": {
            name: utilisation(out / f"smi-{name}.csv") for name in ("default", "graphs")
        },
        "trainer_epochs": {
            "default": epochs(work / "model" / CARD_FILE),
            "graphs": epochs(work / "model-graphs" / CARD_FILE),
        },
        "serving": serving,
    }


def _verdict(value, target, higher_is_better=True) -> str:
    if value is None:
        return "not measured"
    met = value >= target if higher_is_better else value <= target
    return "**met**" if met else "**missed**"


def throughput_lines(results: dict) -> list[str]:
    lines = ["| variant | samples/s | s per 60k epoch | ratio |", "|---|---:|---:|---:|"]
    for source in ("throughput", "compile"):
        for name, row in ((results.get(source) or {}).get("variants") or {}).items():
            rate = row["samples_per_s"]
            if source == "compile" and name != "ours-compile":
                continue
            shown = f"{rate:,.0f} | {EPOCH / rate:.3f}" if rate else "failed | -"
            ratio = f"{row['ratio']:.1f}x" if row.get("ratio") else "-"
            lines.append(f"| {name} | {shown} | {ratio} |")
    return lines


def accuracy_lines(results: dict) -> list[str]:
    lines = [
        "| run | 0.9039 at epoch | total s | training s | best in 10 epochs | set-up s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in (results.get("accuracy") or {}).get("results", []):
        total, training = row["target_s"], row["target_training_s"]
        lines.append(
            f"| {row['name']} | {row['target_epoch'] or '-'} | "
            f"{'-' if total is None else f'{total:.2f}'} | "
            f"{'-' if training is None else f'{training:.2f}'} | "
            f"{row['best_accuracy']:.4f} | {row['setup_s']:.2f} |"
        )
    return lines


def serving_lines(results: dict) -> list[str]:
    lines = [
        "| device | images/request | p50 ms c=1 | p99 ms c=1 | req/s c=8 | images/s c=8 "
        "| forward ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in filter(None, results["serving"].values()):
        one, eight = run["runs"].get("1"), run["runs"].get("8")
        lines.append(
            f"| {run['args']['device']} | {run['args']['images']} | {one['p50_ms']:.2f} | "
            f"{one['p99_ms']:.2f} | {eight['req_per_s']:.0f} | "
            f"{eight['req_per_s'] * run['args']['images']:.0f} | {run['forward_ms']:.3f} |"
        )
    return lines


def target_lines(results: dict) -> list[str]:
    variants = (results.get("throughput") or {}).get("variants") or {}
    ours = {name: row for name, row in variants.items() if name != "baseline"}
    ratio = max((row["ratio"] for row in ours.values() if row["ratio"]), default=None)
    rate = max((row["samples_per_s"] for row in ours.values() if row["samples_per_s"]), default=0)
    epoch = EPOCH / rate if rate else None
    runs = (results.get("accuracy") or {}).get("results", [])[1:]  # [0] is the reference
    fastest = min((r["target_training_s"] for r in runs if r["target_training_s"]), default=None)
    best = max((r["best_accuracy"] for r in runs), default=None)
    util = results["utilisation"].get("default") or {}
    default_ratio = (ours.get("ours") or {}).get("ratio") or 0
    return [
        f"- throughput >= 50x the reference: best {ratio or 0:.1f}x (default recipe "
        f"{default_ratio:.1f}x): {_verdict(ratio, TARGETS['ratio'])}",
        f"- a 60k-sample epoch <= 0.3 s: best {epoch or 0:.3f} s: "
        f"{_verdict(epoch, TARGETS['epoch_s'], higher_is_better=False)}",
        f"- 0.9039 within <= 3 s of training: fastest {fastest or 0:.2f} s: "
        f"{_verdict(fastest, TARGETS['target_training_s'], higher_is_better=False)}",
        f"- best accuracy in 10 epochs >= 0.925: {best or 0:.4f}: "
        f"{_verdict(best, TARGETS['best_accuracy'])}",
        f"- GPU utilisation while `python -m trainer` trains (nvidia-smi, 50 ms samples): "
        f"mean {util.get('mean_percent', 0):.0f} %, peak {util.get('peak_percent', 0):.0f} %",
    ]


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    results = collect(work, out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("# GPU suite\n\n```\n" + (results["gpu"] or "no GPU information").strip() + "\n```\n")
    steps = results["steps"].items()
    print(f"Tests: {results['tests']}\n\nSteps (exit code, seconds): ")
    print(", ".join(f"{name} {step['exit']} ({step['seconds']} s)" for name, step in steps))
    for title, lines in (
        ("Targets", target_lines(results)),
        ("Training throughput", throughput_lines(results)),
        ("Time to 0.9039", accuracy_lines(results)),
        ("Serving", serving_lines(results)),
    ):
        print(f"\n## {title}\n\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
