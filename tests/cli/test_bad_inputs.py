"""Every command, given bad input: exit 2, one line on stderr naming what is wrong, no traceback.

``BAD_INPUTS`` is a plain table of ``(argv, fragment of the message)``, grouped by command.
An argv starts with the program: ``fmnist ...`` runs ``cli.main.main`` in this process;
``python -m ...`` runs a subprocess (the trainer, the predictor). Leading ``NAME=VALUE``
items set environment variables, as in a shell. ``{name}`` in an item is replaced by one of
the files and addresses of ``placeholders`` (a regular file, a junk YAML, kubeconfigs, a
host where nothing listens). Nothing here reaches a server: a value is checked before
anything is contacted, so the dead host only answers a command that checks too late.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys

import pytest

from cli.main import main
from components.runtime.ports import free_port

ENV_SETTING = re.compile(r"^[A-Z_]+=")
DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port
KFP = ["--host", DEAD]
SUBMIT = ["fmnist", "submit", *KFP, "--dry-run"]
SCHEDULE = ["fmnist", "schedule", *KFP, "--dry-run", "--cron", "0 0 2 * * *"]
RENDER_JOB = ["fmnist", "render", "pytorchjob"]

# The default tier has no CUDA GPU (make test-gpu is the tier that does).
NO_GPUS = (
    "--gpus-per-worker 1 with --workers 2 needs 2 CUDA GPU(s) on this machine, and torch sees 0; "
    "--cpu-fallback trains on the CPU instead"
)

BAD_INPUTS = [
    # --- fmnist submit (part A) --------------------------------------------------------------
    ([*SUBMIT, "--param", "epochs=-1"], "--param epochs must be an integer >= 1, got -1"),
    ([*SUBMIT, "--param", "lr=0"], "--param lr must be a finite number > 0, got 0.0"),
    ([*SUBMIT, "--param", "job_api=tfjob"], "--param job_api must be one of auto, pytorchjob"),
    ([*SUBMIT, "--param", "target=local"], "--param target=local cannot run on a cluster"),
    ([*SUBMIT, "--param", "model_name=Bad_Name"], "--param model_name must be a lowercase DNS"),
    ([*SUBMIT, "--param", "cpu=lots"], "--param cpu must be a Kubernetes quantity"),
    ([*SUBMIT, "--param", "serving_cpu=1 core"], "--param serving_cpu must be a Kubernetes"),
    ([*SUBMIT, "--param", "epoch=3"], "unknown pipeline parameter 'epoch'"),
    ([*SUBMIT, "--param", "epochs=three"], "--param epochs: 'three' is not an integer"),
    ([*SUBMIT, "--param", "epochs"], "--param takes NAME=VALUE"),
    (
        [*SUBMIT, "--param", "model_registry_secret=Bad_Name"],
        "--param model_registry_secret must be a Secret name",
    ),
    (
        [*SUBMIT, "--pipeline", "fashion-mnist-tune", "--param", "lr_min=0.1"],
        "--param lr_min / --param lr_max must be lr_min <= lr_max",
    ),
    (
        [*SUBMIT, "--pipeline", "fashion-mnist-tune", "--param", "algorithm=grid"],
        "--param lr_step must be set for the grid algorithm",
    ),
    ([*SUBMIT, "--timeout", "-5"], "--timeout must be a number of seconds > 0, got -5"),
    ([*SUBMIT, "--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
    ([*SUBMIT, "--experiment", ""], "--experiment must not be empty"),
    ([*SUBMIT, "--run-name", " "], "--run-name must not be empty"),
    ([*SUBMIT, "--pipeline-name", "p" * 300], "--pipeline-name must be 1 to 191 characters"),
    ([*SUBMIT, "--version", ""], "--version must not be empty"),
    ([*SUBMIT, "--package", "{junk_yaml}"], "is not a compiled pipeline"),
    ([*SUBMIT, "--package", "{pod_yaml}"], "is not a compiled pipeline (no pipelineInfo.name"),
    ([*SUBMIT, "--package", "{missing}"], "--package {missing}: no such file"),
    ([*SUBMIT, "--kfp-version", "banana"], "--kfp-version must be a release such as 2.15.0"),
    ([*SUBMIT, "--kfp-version", "2.1"], "Kubeflow Pipelines 2.1 is too old"),
    ([*SUBMIT, "--workspace-size", "0"], "--workspace-size must be a Kubernetes quantity > 0"),
    ([*SUBMIT, "--param", "trainer_image=bad image!!"], "--param trainer_image must be an image"),
    (
        ["fmnist", "submit", "--dry-run", "--param", "epochs=-1"],
        "--param epochs must be an integer >= 1",
    ),
    (["fmnist", "submit", "--dry-run", "--param", "epoch=3"], "unknown pipeline parameter 'epoch'"),
    (
        ["KF_PIPELINES_ENDPOINT=", "fmnist", "submit", "--param", "epochs=3"],
        "--host is required to reach Kubeflow Pipelines (or set $KF_PIPELINES_ENDPOINT)",
    ),
    (["fmnist", "submit", "--host", "localhost:8080"], "--host must be a URL such as http://"),
    (["fmnist", "submit", *KFP], "cannot reach Kubeflow Pipelines at http://127.0.0.1:9"),
    # --- fmnist schedule (part A) ------------------------------------------------------------
    ([*SCHEDULE, "--param", "epochs=-3"], "--param epochs must be an integer >= 1, got -3"),
    (
        [*SCHEDULE, "--pipeline", "fashion-mnist-tune", "--param", "lr_min=1"],
        "--param lr_min / --param lr_max must be lr_min <= lr_max",
    ),
    (
        ["fmnist", "schedule", "--dry-run", "--cron", "0 0 2 * * *", "--param", "epochs=0"],
        "--param epochs must be an integer >= 1, got 0",
    ),
    (["fmnist", "schedule", "--dry-run", "--cron", "0 2 * * *"], "has 5 fields, but KFP's cron"),
    (
        ["KF_PIPELINES_ENDPOINT=", "fmnist", "schedule", "--list"],
        "--host is required to reach Kubeflow Pipelines",
    ),
    (
        ["fmnist", "schedule", *KFP, "--dry-run", "--cron", "*/0 * * * * *"],
        "--cron: the second field '*/0' must have a step of at least 1",
    ),
    (
        ["fmnist", "schedule", *KFP, "--dry-run", "--cron", "0 */0 * * * *"],
        "--cron: the minute field '*/0' must have a step of at least 1",
    ),
    (["fmnist", "schedule", *KFP, "--dry-run", "--cron", "0 0 2 * *"], "has 5 fields"),
    (
        [*SCHEDULE, "--end-time", "2020-01-01T00:00:00Z"],
        "--end-time 2020-01-01T00:00:00Z is in the past",
    ),
    ([*SCHEDULE, "--start-time", "tomorrow"], "--start-time 'tomorrow' must be an RFC 3339"),
    ([*SCHEDULE, "--max-concurrency", "0"], "--max-concurrency must be 1..10"),
    ([*SCHEDULE, "--name", ""], "--name must not be empty"),
    (["fmnist", "schedule", *KFP, "--dry-run"], "give --cron or --interval"),
    (
        ["fmnist", "schedule", *KFP, "--list", "--cron", "0 0 2 * * *"],
        "--list takes no --cron",
    ),
    (
        ["fmnist", "schedule", *KFP, "--delete", "x", "--param", "epochs=2"],
        "--delete takes no --param",
    ),
    (["fmnist", "schedule", *KFP, "--dry-run", "--interval", "0"], "--interval must be at least"),
    # --- fmnist render (part A) --------------------------------------------------------------
    ([*RENDER_JOB, "--job-name", "My_Job"], "--job-name must be a lowercase DNS"),
    ([*RENDER_JOB, "--job-name", "j" * 80], "--job-name must be a lowercase DNS"),
    ([*RENDER_JOB, "--namespace", "Team_A"], "--namespace must be a lowercase DNS label"),
    ([*RENDER_JOB, "--trainer-image", "bad image!!"], "--trainer-image must be an image"),
    ([*RENDER_JOB, "--cpu", "lots"], "--cpu must be a Kubernetes quantity"),
    ([*RENDER_JOB, "--memory", "0"], "--memory must be a Kubernetes quantity > 0"),
    ([*RENDER_JOB, "--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    ([*RENDER_JOB, "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["fmnist", "render", "trainjob", "--job-name", "a.b"], "--job-name must be a lowercase DNS"),
    (
        ["fmnist", "render", "inferenceservice", "--namespace", "Team_A"],
        "--namespace must be a lowercase DNS label",
    ),
    (
        ["fmnist", "render", "inferenceservice", "--serving-image", "bad image!!"],
        "--serving-image must be an image reference",
    ),
    (
        ["fmnist", "render", "inferenceservice", "--model-registry-insecure", "yes"],
        "argument --model-registry-insecure: must be true or false, got 'yes'",
    ),
    (
        ["fmnist", "render", "inferenceservice", "--serving-gpus", "1"],
        "--serving-gpus must be 0 with the default serving image",  # CPU torch only
    ),
    (
        ["fmnist", "render", "experiment", "--name", "Bad_Name"],
        "--name must be a lowercase DNS label of at most 40 characters",
    ),
    (
        ["fmnist", "render", "experiment", "--algorithm", "sobol", "--seed", "1"],
        "--seed must be unset with algorithm sobol (it takes no random_state)",
    ),
    (
        ["fmnist", "render", "experiment", "--lr-min", "0.1", "--lr-max", "0.01"],
        "--lr-min / --lr-max must be lr_min <= lr_max",
    ),
    (
        [
            "fmnist",
            "render",
            "experiment",
            "--algorithm",
            "grid",
            "--lr-min",
            "0.00001",
            "--lr-max",
            "1",
            "--lr-step",
            "0.0000001",
        ],
        "must be a grid of at most 10000 points (the steps make 69999307)",
    ),
    (
        ["fmnist", "render", "karmada", "--cluster", "a", "--namespace", "Team_A"],
        "--namespace must be a lowercase DNS label",
    ),
    # --- fmnist compile (part A) -------------------------------------------------------------
    (["fmnist", "compile", "--out-dir", "{file}"], "--out-dir {file} is not a directory"),
    (["fmnist", "compile", "--workspace-size", "0"], "--workspace-size must be a Kubernetes"),
    (
        ["fmnist", "compile", "--workspace-storage-class", "Fast_SSD"],
        "--workspace-storage-class must be empty or a lowercase DNS subdomain",
    ),
    (["fmnist", "compile", "--trainer-image", "bad image!!"], "--trainer-image must be an image"),
    (["fmnist", "compile", "nope"], "unknown pipeline(s) nope"),
    # --- fmnist sweep --render / --apply (part A) ----------------------------------------------
    (
        ["fmnist", "sweep", "--render", "--algorithm", "sobol", "--seed", "1"],
        "--seed must be unset with algorithm sobol (it takes no random_state)",
    ),
    (["fmnist", "sweep", "--render", "--namespace", "Team_A"], "--namespace must be a lowercase"),
    (
        ["fmnist", "sweep", "--render", "--workspace-pvc", "Bad_PVC"],
        "--workspace-pvc must be a lowercase DNS subdomain",
    ),
    (
        ["KUBECONFIG={junk_yaml}", "fmnist", "sweep", "--apply"],
        "the kubeconfig {junk_yaml} is not valid",
    ),
    (
        ["KUBECONFIG={kubeconfig_refused}", "fmnist", "sweep", "--apply"],
        "cannot reach the Kubernetes API at https://127.0.0.1:9",
    ),
    # --- fmnist run, fmnist sweep --local, fmnist serve: the run/serve and trainer/sweep ------
    # --- engineers add their rows here --------------------------------------------------------
    (["fmnist", "run", "--run-dir", "{file}"], "--run-dir {file} is a file, not a directory"),
    (["fmnist", "run", "--data-dir", "{missing}"], "--data-dir {missing}: no such directory"),
    (["fmnist", "run", "--data-dir", "{empty_dir}"], "FashionMNIST raw files missing"),
    (
        ["fmnist", "run", "--data-dir", "{corrupt_data}"],
        "{corrupt_data}/train-images-idx3-ubyte.gz: not a readable gzip file",
    ),
    (["fmnist", "serve", "{missing}"], "{missing}: no such run or model directory"),
    (["fmnist", "serve", "{file}"], "{file} is not a directory"),
    (["fmnist", "serve", "{empty_dir}"], "neither a model directory (model.pt, model.json)"),
    (  # a free port: `fmnist serve` checks its port first, and 8080 is often taken
        ["fmnist", "serve", "{broken_model}", "--port", "{free_port}"],
        "{broken_model}/model.json: malformed model card",
    ),
    (["fmnist", "serve", "{broken_model}", "--port", "0"], "--port must be 1..65535, got 0"),
    (["fmnist", "serve", "{broken_model}", "--port", "http"], "argument --port: invalid int"),
    (["fmnist", "run", "--gpus-per-worker", "1", "--run-dir", "{missing}"], NO_GPUS),
    (["fmnist", "sweep", "--local", "--gpus-per-worker", "1", "--out-dir", "{missing}"], NO_GPUS),
    (["fmnist", "sweep", "--local", "--out-dir", "{file}"], "--out-dir {file} is a file, not a"),
    (
        ["fmnist", "sweep", "--local", "--algorithm", "random", "--resume"],
        "--resume with --algorithm random needs the earlier sweep's --seed",
    ),
    (["fmnist", "sweep", "--local", "--lr-max", "inf"], "--lr-min / --lr-max must be"),
    (["fmnist", "sweep", "--render", "--resume"], "--resume is for --local only"),
    (["fmnist", "sweep", "--apply", "--cpu-fallback"], "--cpu-fallback is for --local only"),
    # --- python -m cli: the command as a module (once a traceback: its UsageError was loaded
    # twice, as __main__'s and as the commands imported it) --------------------------------
    (
        ["python", "-m", "cli", "render", "experiment", "--lr-min", "0.1", "--lr-max", "0.01"],
        "fmnist render: error: --lr-min / --lr-max must be lr_min <= lr_max",
    ),
    # --- python -m trainer: the trainer/sweep engineer's rows ---------------------------------
    (["python", "-m", "trainer", "--lr", "inf"], "--lr must be a finite number > 0"),
    (["python", "-m", "trainer", "--lr", "nan"], "--lr must be a finite number > 0"),
    (["python", "-m", "trainer", "--weight-decay", "inf"], "--weight-decay must be a finite"),
    (["python", "-m", "trainer", "--epochs", "0"], "--epochs must be an integer >= 1"),
    (["python", "-m", "trainer", "--optimizer", "adam"], "argument --optimizer: invalid choice"),
    (["python", "-m", "trainer", "--model-dir", "{file}"], "--model-dir {file}: is a file, not"),
    (["python", "-m", "trainer", "--model-dir", "{file}/m"], "cannot be made, {file} is a file"),
    (["python", "-m", "trainer", "--checkpoint-dir", "{file}"], "--checkpoint-dir {file}: is a"),
    (["python", "-m", "trainer", "--log-path", "{file}/m.log"], "no directory {file}"),
    (["python", "-m", "trainer", "--data-dir", "{file}"], "--data-dir {file}: is a file, not"),
    (["python", "-m", "trainer", "--data-dir", "{corrupt_data}"], "not a readable gzip file"),
    # --- python -m serving: the run/serve engineer's rows -------------------------------------
    (
        ["python", "-m", "serving", "--enable_grpc", "banana"],
        "argument --enable_grpc: expected true or false, got 'banana'",
    ),
    (["python", "-m", "serving", "--http_port", "http"], "argument --http_port: invalid int"),
    (["python", "-m", "serving", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["python", "-m", "serving", "--max_batch_size", "0"], "max_batch_size must be in 1..65536"),
    (["python", "-m", "serving", "--model_dir", "{file}"], "{file}: no model.pt"),
    (["python", "-m", "serving", "--model_dir", "{missing}"], "{missing}: no model.pt"),
]


@pytest.fixture
def placeholders(tmp_path) -> dict[str, str]:
    """What ``{name}`` stands for in a row."""
    junk = tmp_path / "junk.yaml"
    junk.write_text("this: [is not\n  a pipeline\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    regular = tmp_path / "a-file"
    regular.write_text("not a directory\n")
    refused = tmp_path / "kubeconfig-refused"
    refused.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: me}}]\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt-data"
    corrupt.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):  # fmt: skip
        (corrupt / f"{name}.gz").write_bytes(b"not gzip")
    broken_model = tmp_path / "broken-model"
    broken_model.mkdir()
    (broken_model / "model.pt").write_bytes(b"PK not a zip")
    (broken_model / "model.json").write_text('{"architecture": ')
    return {
        "empty_dir": str(empty),
        "corrupt_data": str(corrupt),
        "broken_model": str(broken_model),
        "junk_yaml": str(junk),
        "pod_yaml": str(pod),
        "file": str(regular),
        "missing": str(tmp_path / "missing.yaml"),
        "kubeconfig_refused": str(refused),
        "free_port": str(free_port()),
    }


def _run(argv: list[str], env: dict[str, str], capsys, monkeypatch) -> tuple[int, str]:
    """(exit code, stderr) of one row."""
    if argv[0] == "fmnist":
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        try:
            code = main(argv[1:])
        except SystemExit as exc:  # argparse
            code = exc.code
        return code, capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("argv", "fragment"), BAD_INPUTS, ids=[" ".join(argv)[:90] for argv, _ in BAD_INPUTS]
)
def test_bad_input_is_one_line_and_exit_2(argv, fragment, placeholders, capsys, monkeypatch):
    argv = [item.format(**placeholders) for item in argv]
    fragment = fragment.format(**placeholders)
    settings = list(itertools.takewhile(ENV_SETTING.match, argv))
    env = dict(item.split("=", 1) for item in settings)
    argv = argv[len(settings) :]
    code, err = _run(argv, env, capsys, monkeypatch)
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert (code, len(lines)) == (2, 1), err
    assert fragment in lines[0], err
