"""The mutation check: one-line breaking changes that the tests must catch (issue 24).

Each mutant names a file, a line's old text, its new text and the tests that must fail
with it. The check copies this checkout (``git ls-files``: tracked files and new files git
does not ignore) to a scratch directory, runs those tests there once unchanged (they must
pass), then for each mutant applies the change, runs its tests with a short per-test
timeout, and restores the file. The working tree is never touched.

Results: ``caught`` (a test failed; the table names the first), ``SURVIVED`` (every test
passed: a test is missing or blind), ``STALE`` (the old text is not in the file exactly
once: the code moved on and the list needs updating, which is a failure of the list, not
of the tests), ``TIMEOUT`` (the run took longer than ``--run-timeout``). Anything but
``caught`` fails the check.

Usage: ``python tools/mutants.py [--list] [--keep] [NAME ...]`` (default: every mutant);
``make mutants``. The tests read the real data from ``$FASHION_MNIST_DIR``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_TIMEOUT = 120  # seconds per test (pytest-timeout), as the default tier
RUN_TIMEOUT = 600  # seconds per mutant run


@dataclass(frozen=True)
class Mutant:
    """One breaking change: ``old`` (a line's text, found exactly once) becomes ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids or files that must fail

    def apply(self, root: Path) -> str | None:
        """Write the change under ``root``; return the original text, or None if stale."""
        target = root / self.path
        text = target.read_text() if target.is_file() else ""
        if text.count(self.old) != 1:
            return None
        target.write_text(text.replace(self.old, self.new))
        return text


KSERVE = "tests/components/test_kserve.py"
BUILDERS = "tests/components/test_builders.py"
PREDICTOR = "tests/serving/test_predictor.py"
MUTANTS = [
    # The deploy step's waits (components/runtime/kserve.py).
    Mutant(
        "knative-partial-traffic",
        "components/runtime/kserve.py",
        "and traffic == 100",
        "and traffic > 0",
        (f"{KSERVE}::test_a_knative_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-old-replica-ignored",
        "components/runtime/kserve.py",
        "and (status.replicas or 0) == desired",
        "and True",
        (f"{KSERVE}::test_a_standard_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-availability-ignored",
        "components/runtime/kserve.py",
        "and (status.available_replicas or 0) == desired",
        "and True",
        (f"{KSERVE}::test_a_standard_rollout_is_not_done_while",),
    ),
    Mutant(
        "standard-generation-ignored",
        "components/runtime/kserve.py",
        "(status.observed_generation or 0) >= (deployment.metadata.generation or 0)",
        "True",
        (f"{KSERVE}::test_a_redeploy_waits_for_the_new_model_not_the_old_ready",),
    ),
    Mutant(
        "crash-loop-unseen",
        "components/runtime/kserve.py",
        "if status.name == PREDICTOR_CONTAINER and reason:",
        "if False:",
        (f"{KSERVE}::test_a_new_predictor_that_crash_loops_fails_the_step_with_its_log",),
    ),
    Mutant(
        "storage-uri-without-slash",
        "components/specs/inferenceservice.py",
        'return f"pvc://{pvc}/{path}"',
        'return f"pvc://{pvc}{path}"',
        (
            f"{KSERVE}::test_first_deploy_writes_the_mode_this_kserve_knows_and_waits_for_the_rollout",
        ),
    ),
    # GPU resource names on every object.
    Mutant(
        "trainjob-ignores-mig",
        "components/specs/trainjob.py",
        '"resourcesPerNode": job_resources(job),',
        '"resourcesPerNode": job_resources(type(job)(**{**job.to_dict(), '
        '"gpu_resource": "nvidia.com/gpu"})),',
        (
            f"{BUILDERS}::test_trainjob_v2_3_variants_are_valid_restricted_and_sized",
            f"{BUILDERS}::test_trainjob_v2_1_variants_are_valid_for_kubeflow_1_11",
        ),
    ),
    Mutant(
        "katib-trainjob-trials-ignore-mig",
        "components/specs/trainjob.py",
        '"resourcesPerNode": job_resources(job),',
        '"resourcesPerNode": job_resources(type(job)(**{**job.to_dict(), '
        '"gpu_resource": "nvidia.com/gpu"})),',
        ("tests/components/test_katib.py::test_trials_ask_for_the_gpu_resource_of_the_job",),
    ),
    Mutant(
        "pytorchjob-ignores-gpu-resource",
        "components/specs/pods.py",
        "return resources(job.cpu, job.memory, job.gpus_per_worker, job.gpu_resource)",
        "return resources(job.cpu, job.memory, job.gpus_per_worker)",
        (f"{BUILDERS}::test_pytorchjob_variants_are_valid_restricted_and_sized",),
    ),
    Mutant(
        "isvc-drops-serving-gpu-resource",
        "components/specs/inferenceservice.py",
        "SERVING_CPU, SERVING_MEMORY, serving.serving_gpus, serving.serving_gpu_resource",
        "SERVING_CPU, SERVING_MEMORY, serving.serving_gpus",
        (f"{BUILDERS}::test_the_predictor_asks_for_the_serving_gpu_resource",),
    ),
    # The predictor's outputs.
    Mutant(
        "v1-probabilities-reversed",
        "serving/codec.py",
        "for label, row in zip(labels, probabilities.tolist(), strict=True)",
        "for label, row in zip(labels, probabilities[:, ::-1].tolist(), strict=True)",
        (f"{PREDICTOR}::test_v1_batch_is_one_forward_pass",),
    ),
    Mutant(
        "v2-probabilities-reversed",
        "serving/codec.py",
        "data=probabilities.ravel().tolist()",
        "data=probabilities[:, ::-1].ravel().tolist()",
        (f"{PREDICTOR}::test_v2_batch_is_one_forward_pass",),
    ),
    Mutant(
        "log-probabilities-served",
        "serving/predictor.py",
        "return self.net(inputs).exp().cpu().numpy()",
        "return self.net(inputs).cpu().numpy()",
        (f"{PREDICTOR}::test_grpc_raw_tensor",),
    ),
    # The accuracy gate.
    Mutant(
        "gate-strictly-above",
        "pipelines/evaluate_and_deploy.py",
        "with dsl.If(accuracy >= min_accuracy,",
        "with dsl.If(accuracy > min_accuracy,",
        ("tests/pipelines/test_gate.py::test_the_gate_deploys_a_model_that_reaches_min_accuracy",),
    ),
    # The training job and the launcher.
    Mutant(
        "launcher-success-on-failed",
        "components/runtime/launcher.py",
        'raise JobFailed(f"{self.what} failed.\\n{self.describe()}")',
        "return job",
        (
            "tests/components/test_launcher.py"
            "::test_a_failed_job_fails_the_step_with_its_conditions_and_log_tail",
        ),
    ),
    Mutant(
        "queue-label-off-the-job",
        "components/specs/pytorchjob.py",
        "metadata=V1ObjectMeta(name=name, namespace=namespace, labels=kueue_labels(job)),",
        "metadata=V1ObjectMeta(name=name, namespace=namespace),",
        (f"{BUILDERS}::test_pytorchjob_single_node_exact_object",),
    ),
    Mutant(
        "capabilities-kept",
        "components/specs/pods.py",
        '"capabilities": {"drop": ["ALL"]},',
        '"capabilities": {},',
        ("tests/cli/test_sweep.py::test_apply_stages_the_data_with_a_restricted_pod_first",),
    ),
    Mutant(
        "objective-minimized",
        "components/specs/katib_experiment.py",
        '"type": "maximize",',
        '"type": "minimize",',
        (
            "tests/components/test_katib_experiment.py"
            "::test_default_sweep_is_the_documented_experiment",
        ),
    ),
    Mutant(
        "schema-lookup-unclear",
        "components/runtime/discovery.py",
        'raise ClusterMismatch(f"the API server publishes no schema for {resource.kind}")',
        "return {}",
        ("tests/components/test_discovery.py::test_a_missing_schema_is_a_clear_error",),
    ),
    Mutant(
        "local-sweep-one-too-many",
        "components/runtime/local_sweep.py",
        "while pending and len(running) < config.parallel_trials:",
        "while pending and len(running) <= config.parallel_trials:",
        (
            "tests/pipelines/test_local_sweep.py"
            "::test_runs_every_trial_with_bounded_parallelism_and_ranks_them",
        ),
    ),
    # The trainer.
    Mutant(
        "no-all-reduce",
        "trainer/distributed.py",
        "        dist.all_reduce(values)",
        "        pass",
        ("tests/trainer/test_train.py::test_two_ranks_evaluate_like_one",),
    ),
    Mutant(
        "resume-without-optimizer-state",
        "trainer/train.py",
        'self.optimizer.load_state_dict(state["optimizer"])',
        "pass",
        ("tests/trainer/test_train.py::test_killed_run_resumes_from_last_epoch",),
    ),
    Mutant(
        "every-rank-its-own-shuffle",
        "trainer/train.py",
        "context.world_size, context.rank, seed=config.seed",
        "context.world_size, context.rank, seed=config.seed + context.rank",
        ("tests/trainer/test_batches.py::test_shards_of_all_ranks_cover_the_data_once_per_epoch",),
    ),
    Mutant(
        "same-shuffle-every-epoch",
        "trainer/train.py",
        "self.sampler.set_epoch(epoch)",
        "self.sampler.set_epoch(0)",
        ("tests/trainer/test_batches.py::test_shards_of_all_ranks_cover_the_data_once_per_epoch",),
    ),
    Mutant(
        "metric-line-3-decimals",
        "trainer/metrics.py",
        'f"{{metricName: loss, metricValue: {loss:.4f}}}"',
        'f"{{metricName: loss, metricValue: {loss:.3f}}}"',
        ("tests/trainer/test_metrics.py",),
    ),
    Mutant(
        "metric-time-without-fraction",
        "trainer/metrics.py",
        'f"{stamp:%Y-%m-%dT%H:%M:%S.%f}Z "',
        'f"{stamp:%Y-%m-%dT%H:%M:%S}Z "',
        (
            "tests/trainer/test_metrics.py::test_a_metric_line_without_a_time_given_carries_the_clocks",
        ),
    ),
    Mutant(
        "raw-checksum-skipped",
        "trainer/data.py",
        "if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:",
        "if False:",
        ("tests/trainer/test_data.py::test_wrong_content_fails_the_checksum",),
    ),
    Mutant(
        "packed-checksum-skipped",
        "trainer/data.py",
        'if verify and _sha256_file(path) != manifest["files"].get(path.name):',
        "if False:",
        ("tests/trainer/test_data.py::test_tampered_packed_array_is_rejected",),
    ),
    Mutant(
        "bf16-where-emulated",
        "trainer/step.py",
        "return torch.bfloat16 if native else None",
        "return torch.bfloat16",
        ("tests/trainer/test_train.py::test_mixed_precision_choice",),
    ),
    Mutant(
        "flag-without-help",
        "trainer/config.py",
        "parser.add_argument(flag, type=kind, default=default, choices=choices, help=help)",
        "parser.add_argument(flag, type=kind, default=default, choices=choices)",
        ("tests/trainer/test_config.py::test_every_flag_is_documented_in_help",),
    ),
    Mutant(
        "trainer-default-epochs-drift",
        "trainer/config.py",
        'epochs: int = _flag(10, "passes over the training set")',
        'epochs: int = _flag(12, "passes over the training set")',
        (
            "tests/components/test_params.py::test_training_defaults_follow_the_trainer",
            "tests/pipelines/test_parameters.py::test_training_defaults_come_from_the_trainer_config",
        ),
    ),
]


def copy_checkout(destination: Path) -> None:
    """Copy the files git knows or would add (not ignored ones) into ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted in the working tree stays listed
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def test_env(root: Path) -> dict[str, str]:
    """The environment for runs in ``root``: its packages first (before the editable install)."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def check_imports(root: Path) -> None:
    """Fail unless the scratch copy's packages are the ones imported there."""
    packages = "trainer, components, serving, pipelines, cli"
    script = f"import {packages}; print(*(m.__file__ for m in ({packages})))"
    found = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env=test_env(root),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = [path for path in found if not Path(path).is_relative_to(root)]
    if outside:
        sys.exit(f"mutants: the scratch copy imports packages from elsewhere: {outside}")


def run_tests(root: Path, tests: tuple[str, ...], run_timeout: float) -> tuple[str, str, float]:
    """Run ``tests`` in ``root``: (outcome, the first failure's summary line or '', seconds)."""
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider"]
    command += ["-o", f"timeout={TEST_TIMEOUT}"]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=root,
            env=test_env(root),
            capture_output=True,
            text=True,
            timeout=run_timeout,
        )
    except subprocess.TimeoutExpired:
        return "TIMEOUT", "", time.monotonic() - started
    seconds = time.monotonic() - started
    if done.returncode == 0:
        return "passed", "", seconds
    failed = re.search(r"^(?:FAILED|ERROR) .*$", done.stdout, re.MULTILINE)
    if done.returncode in (1, 2) and failed:  # 1: a test failed; 2: interrupted by -x
        return "failed", failed.group(0), seconds
    return "error", (done.stdout + done.stderr).strip().splitlines()[-1:][0], seconds


def failed_test(summary: str) -> str:
    """The test id of a ``FAILED <id> - <message>`` line."""
    return re.sub(r"^(?:FAILED|ERROR) ", "", summary).split(" - ", 1)[0]


def main(argv: list[str] | None = None) -> int:
    """Run the mutants named (all by default); 0 when every one is caught."""
    parser = argparse.ArgumentParser(prog="tools/mutants.py", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT, help="seconds per run")
    args = parser.parse_args(argv)
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(unknown)}; see --list")
    chosen = [known[name] for name in args.names] or MUTANTS
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:36} {mutant.path}: {mutant.old!r} -> {mutant.new!r}")
        return 0

    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="fmnist-mutants-"))
    try:
        copy_checkout(root)
        check_imports(root)
        baseline = tuple(dict.fromkeys(test for mutant in chosen for test in mutant.tests))
        outcome, failing, seconds = run_tests(root, baseline, args.run_timeout * 2)
        print(
            f"baseline: the {len(baseline)} test selections unchanged: {outcome} ({seconds:.0f} s)"
        )
        if outcome != "passed":
            print(f"mutants: the tests fail without any mutation ({failing}); fix that first")
            return 1
        rows = [run_mutant(root, mutant, args.run_timeout) for mutant in chosen]
    finally:
        if args.keep:
            print(f"scratch copy kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)
    bad = [row for row in rows if row[1] != "caught"]
    total = time.monotonic() - started
    print(f"{len(rows) - len(bad)} of {len(rows)} mutants caught; total {total:.0f} s")
    return 1 if bad else 0


def run_mutant(root: Path, mutant: Mutant, run_timeout: float) -> tuple[str, str, float, str]:
    """(name, result, seconds, detail) of one mutant; the file is restored afterwards."""
    original = mutant.apply(root)
    if original is None:
        target = root / mutant.path
        found = target.read_text().count(mutant.old) if target.is_file() else 0
        return mutant.name, "STALE", 0.0, f"{mutant.path}: old text found {found} times, not once"
    try:
        outcome, failing, seconds = run_tests(root, mutant.tests, run_timeout)
    finally:
        (root / mutant.path).write_text(original)
    result = {"failed": "caught", "passed": "SURVIVED"}.get(outcome, outcome.upper())
    detail = ", ".join(mutant.tests) if outcome == "passed" else failed_test(failing)
    print(f"  {mutant.name}: {result} ({seconds:.0f} s)", flush=True)
    return mutant.name, result, seconds, detail


def print_table(rows: list[tuple[str, str, float, str]]) -> None:
    """One line per mutant: name, result, seconds, the test that failed (or why not)."""
    width = max(len(row[0]) for row in rows)
    print(f"\n{'mutant':{width}}  result    seconds  caught by / detail")
    for name, result, seconds, detail in rows:
        print(f"{name:{width}}  {result:8}  {seconds:7.1f}  {detail}")


if __name__ == "__main__":
    sys.exit(main())
