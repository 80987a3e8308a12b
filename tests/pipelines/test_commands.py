"""``fmnist render`` and ``fmnist compile`` through the real command line."""

import pytest
import yaml

from components.images import COMPONENTS_IMAGE
from pipelines import cli


@pytest.fixture
def fmnist(monkeypatch, capsys):
    """Run ``fmnist ARGS...``: (exit code, stdout, stderr)."""
    monkeypatch.setattr(cli, "COMMANDS", ("run", "compile", "render"))

    def call(*argv: str):
        code = cli.main(list(argv))
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
        "labels": {"kueue.x-k8s.io/queue-name": "fmnist", "kueue.x-k8s.io/priority-class": "high"},
    }
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    container = worker["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == 1
    assert "--epochs=4" in container["args"]
    assert container["volumeMounts"] == [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}]
    assert "&id" not in out and "*id" not in out  # no YAML anchors for kubectl users


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
    ("argv", "message"),
    [
        (("render", "pytorchjob", "--workers", "0"), "--workers must be an integer >= 1, got 0"),
        (("render", "pytorchjob", "--gpu-resource", "gpus"), "--gpu-resource must be an extended"),
        (("render", "inferenceservice", "--min-accuracy", "2"), "--min-accuracy must be in [0, 1]"),
        (("run", "--backend", "local"), None),  # the run command has no --backend
        (("compile", "nope"), "unknown pipeline(s) nope"),
        (
            ("compile", "--out-dir", "/nonexistent", "--trainer-image", " "),
            "image references must not be empty",
        ),
    ],
)
def test_bad_input_is_a_usage_error(fmnist, argv, message):
    if message is None:
        with pytest.raises(SystemExit) as exit_info:
            fmnist(*argv)
        assert exit_info.value.code == 2
        return
    code, out, err = fmnist(*argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"fmnist {argv[0]}: error: ") and message in err


def test_compile_writes_every_pipeline_with_the_images_given(fmnist, tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_SERVING_IMAGE", "registry.local/serving:env")
    code, out, _ = fmnist(
        "compile",
        "--out-dir",
        str(tmp_path),
        "--trainer-image",
        "registry.local/trainer:7",
        "--components-image",
        "registry.local/components:7",
    )
    assert code == 0
    path = tmp_path / "fashion-mnist.yaml"
    assert str(path) in out.splitlines()
    spec, platform = yaml.safe_load_all(path.read_text())
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["trainer_image"]["defaultValue"] == "registry.local/trainer:7"
    assert parameters["serving_image"]["defaultValue"] == "registry.local/serving:env"
    images = {
        executor["container"]["image"] for executor in spec["deploymentSpec"]["executors"].values()
    }
    assert images == {"registry.local/components:7"} != {COMPONENTS_IMAGE}
    assert platform["platforms"]["kubernetes"]["pipelineConfig"]["workspace"]["size"] == "5Gi"
