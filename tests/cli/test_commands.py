"""``fmnist render`` and the usage errors of ``render`` and ``run``, through the real CLI.

Rendered objects are checked against the pinned upstream CRDs (``validate_crd``: Training
Operator v1.9.4, Trainer v2.3.0, KServe v0.20.0; ``validate_crd_at``: older releases).
"""

import pytest
import yaml

from cli.flags import flag
from cli.main import main
from components.specs.params import Serving, TrainingJob

QUEUE = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def fmnist(capsys):
    """Run ``fmnist ARGS...``: (exit code, stdout, stderr)."""

    def call(*argv: str):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


def test_render_pytorchjob_prints_the_job_for_the_flags(fmnist, validate_crd):
    code, out, _ = fmnist(
        "render",
        "pytorchjob",
        "--workers",
        "3",
        "--gpus-per-worker",
        "1",
        "--gpu-resource",
        "nvidia.com/mig-1g.10gb",
        "--namespace",
        "team-a",
        "--epochs",
        "4",
        "--priority-class",
        "high",
        "--job-name",
        "review",
    )
    assert code == 0
    (job,) = yaml.safe_load_all(out)
    validate_crd(job)
    assert job["metadata"] == {
        "name": "review",
        "namespace": "team-a",
        "labels": {QUEUE: "fmnist-mig", "kueue.x-k8s.io/priority-class": "high"},
    }
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    container = worker["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert "--epochs=4" in container["args"]
    assert container["volumeMounts"] == [
        {"name": "kfp-workspace", "mountPath": "/kfp-workspace"},
        {"name": "dshm", "mountPath": "/dev/shm"},  # a GPU node gets a memory-backed /dev/shm
    ]
    assert "&id" not in out and "*id" not in out  # no YAML anchors for kubectl users


def test_render_trainjob_with_gpus_is_valid_and_queued_to_the_gpu_queue(fmnist, validate_crd):
    code, out, _ = fmnist("render", "trainjob", "--gpus-per-worker", "1")
    assert code == 0
    trainjob = yaml.safe_load(out)
    validate_crd(trainjob)  # Trainer v2.3.0, strict
    assert trainjob["metadata"]["labels"] == {QUEUE: "fmnist-gpu"}
    assert trainjob["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    assert "runtimePatches" in trainjob["spec"] and "podTemplateOverrides" not in trainjob["spec"]


def test_render_trainjob_for_trainer_v21(fmnist, validate_crd_at):
    argv = ["render", "trainjob", "--trainer-version", "v2.1", "--trainjob-runtime", "r21"]
    code, out, _ = fmnist(*argv)
    assert code == 0
    trainjob = yaml.safe_load(out)
    validate_crd_at("trainer", "v2.1.0")(trainjob)
    assert trainjob["metadata"]["labels"] == {QUEUE: "fmnist-cpu"}
    assert trainjob["spec"]["runtimeRef"]["name"] == "r21"
    assert "podTemplateOverrides" in trainjob["spec"] and "runtimePatches" not in trainjob["spec"]


def test_render_inferenceservice(fmnist, validate_crd):
    code, out, _ = fmnist(
        "render",
        "inferenceservice",
        "--model-name",
        "fm",
        "--deployment-mode",
        "Knative",
        "--serving-min-replicas",
        "0",
    )
    assert code == 0
    isvc = yaml.safe_load(out)
    validate_crd(isvc)
    assert isvc["metadata"]["name"] == "fm" and "namespace" not in isvc["metadata"]
    assert isvc["spec"]["predictor"]["minReplicas"] == 0
    assert isvc["spec"]["predictor"]["containers"][0]["env"] == [
        {"name": "STORAGE_URI", "value": "pvc://fmnist-models/fm/RUN-ID"}
    ]


@pytest.mark.parametrize(
    ("kind", "own", "other", "left_out"),
    [
        ("pytorchjob", TrainingJob, Serving, {"job_api", "trainjob_runtime"}),
        ("trainjob", TrainingJob, Serving, {"job_api"}),
        ("inferenceservice", Serving, TrainingJob, {"min_accuracy", "min_improvement"}),
    ],
)
def test_each_kind_takes_only_the_flags_of_what_shapes_it(capsys, kind, own, other, left_out):
    with pytest.raises(SystemExit) as exited:
        main(["render", kind, "--help"])
    assert exited.value.code == 0
    listed = {word.rstrip(",") for word in capsys.readouterr().out.split() if word.startswith("--")}
    assert {flag(name) for name in own.help() if name not in left_out} <= listed
    assert {flag(name) for name in left_out} & listed == set()
    assert {flag(name) for name in other.help()} & listed == set()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("render", "pytorchjob", "--workers", "0"), "--workers must be an integer >= 1, got 0"),
        (("render", "pytorchjob", "--gpu-resource", "gpus"), "--gpu-resource must be an extended"),
        (("render", "trainjob", "--shm-size", "big"), "--shm-size must be a Kubernetes quantity"),
        (
            ("render", "pytorchjob", "--gpus-per-worker", "2"),
            "--nproc-per-node must be equal to gpus_per_worker (2)",
        ),
        (("render", "inferenceservice", "--serving-max-replicas", "0"), "--serving-max-replicas"),
        (("run", "--job-api", "tfjob"), "--job-api must be one of auto, pytorchjob, trainjob"),
    ],
)
def test_bad_values_are_one_usage_error_line(fmnist, argv, message):
    code, out, err = fmnist(*argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"fmnist {argv[0]}: error: ") and message in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "--backend", "local"),  # gone: target is a pipeline parameter, run is local
        ("run", "--namespace", "team-a"),  # gone: everything runs in the run's namespace
        ("render", "inferenceservice", "--min-accuracy", "0.5"),
        ("render", "pytorchjob", "--model-name", "fm"),
    ],
)
def test_flags_a_command_does_not_take_are_argparse_errors(fmnist, argv):
    with pytest.raises(SystemExit) as exited:
        fmnist(*argv)
    assert exited.value.code == 2


def test_image_variables_are_read_when_the_command_runs(fmnist, monkeypatch):
    monkeypatch.setenv("FMNIST_TRAINER_IMAGE", "registry.local/trainer:9")
    monkeypatch.setenv("FMNIST_TRAINER_CPU_IMAGE", "registry.local/trainer:9-cpu")
    monkeypatch.setenv("FMNIST_SERVING_IMAGE", "registry.local/serving:9")
    _, out, _ = fmnist("render", "pytorchjob")
    (image,) = {c["image"] for c in containers(yaml.safe_load(out))}
    assert image == "registry.local/trainer:9-cpu"
    _, out, _ = fmnist("render", "pytorchjob", "--gpus-per-worker", "1")
    (image,) = {c["image"] for c in containers(yaml.safe_load(out))}
    assert image == "registry.local/trainer:9"
    _, out, _ = fmnist("render", "inferenceservice")
    assert yaml.safe_load(out)["spec"]["predictor"]["containers"][0]["image"] == (
        "registry.local/serving:9"
    )
    _, out, _ = fmnist("render", "pytorchjob", "--trainer-cpu-image", "mine:1")
    assert {c["image"] for c in containers(yaml.safe_load(out))} == {"mine:1"}


def containers(job: dict) -> list[dict]:
    return [
        c
        for spec in job["spec"]["pytorchReplicaSpecs"].values()
        for c in spec["template"]["spec"]["containers"]
    ]


def test_apply_says_where_it_connects_and_a_refusal_names_the_host(tmp_path, monkeypatch, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: me, namespace: team-a}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main(["sweep", "--apply"]) == 2
    out, err = capsys.readouterr()
    assert out == "connecting to the Kubernetes API at https://127.0.0.1:9\n"
    assert err.startswith(
        "fmnist sweep: error: cannot reach the Kubernetes API at https://127.0.0.1:9"
    )
    assert err.count("\n") == 1 and "Connection refused" in err


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["render", "pytorchjob", "--job-name", "j" * 40, "--namespace", "n" * 63], "j" * 40),
        (["render", "experiment", "--name", "e" * 40, "--namespace", "team-a"], "e" * 40),
    ],
)
def test_names_at_their_limits_are_rendered(capsys, argv, name):
    assert main(argv) == 0
    assert yaml.safe_load(capsys.readouterr().out)["metadata"]["name"] == name
