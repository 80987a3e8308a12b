"""``fmnist sweep``: --render and ``fmnist render experiment``, --apply against a fake cluster
(the ``fake_k8s`` fixture at the kubernetes client boundary), flag errors, and a real
2x2 grid run with --local (components/runtime/local_sweep.py) on a slice of FashionMNIST.
"""

import json
import re

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from pss import violations

from cli.main import main
from cli.staging import KATIB_INJECTION_LABEL, run_staging_pod
from components.runtime.kube import KubeClient
from components.specs.params import DataSlice
from components.specs.staging_pod import staging_pod

GRID = [
    "--algorithm",
    "grid",
    "--lr-min",
    "0.01",
    "--lr-max",
    "0.05",
    "--lr-step",
    "0.04",
    "--epochs-min",
    "1",
    "--epochs-max",
    "2",
    "--parallel-trials",
    "2",
]


def ok(kind: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def test_render_prints_a_valid_experiment_without_yaml_anchors(capsys, validate_katib_experiment):
    argv = [
        "sweep",
        "--render",
        *GRID,
        "--name",
        "lr-epochs",
        "--namespace",
        "team-a",
        "--workspace-pvc",
        "fmnist-data",
        "--seed",
        "1",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert not re.search(r"[&*]id\d+", text)
    experiment = yaml.safe_load(text)
    trial = validate_katib_experiment(experiment)
    assert experiment["metadata"] == {"name": "lr-epochs", "namespace": "team-a"}
    assert experiment["spec"]["maxTrialCount"] == 4  # the whole grid by default
    pod = trial["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "fmnist-data"}}
    ]
    assert pod["containers"][0]["args"][0] == "--data-dir=/kfp-workspace/train/data"


def test_render_with_trainjob_trials(capsys, validate_katib_experiment):
    argv = ["sweep", "--render", *GRID, "--job-api", "trainjob", "--gpus-per-worker", "1"]
    assert main(argv) == 0
    experiment = yaml.safe_load(capsys.readouterr().out)
    trial = validate_katib_experiment(experiment)  # the TrainJob against Trainer v2.3.0
    assert (trial["apiVersion"], trial["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert trial["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "fmnist-gpu"}
    template = experiment["spec"]["trialTemplate"]
    assert template["primaryContainerName"] == "node"
    assert "--lr=${trialParameters.learningRate}" in trial_args(experiment)


def test_render_with_median_stop(capsys, validate_katib_experiment):
    argv = ["sweep", "--render", *GRID, "--median-stop", "true", "--median-stop-epochs", "1"]
    assert main(argv) == 0
    experiment = yaml.safe_load(capsys.readouterr().out)
    validate_katib_experiment(experiment)
    assert experiment["spec"]["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": "3"},
            {"name": "start_step", "value": "1"},
        ],
    }


def trial_args(experiment: dict) -> list[str]:
    spec = experiment["spec"]["trialTemplate"]["trialSpec"]["spec"]
    if "trainer" in spec:
        return spec["trainer"]["args"]
    return spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]


def test_render_experiment_is_the_same_builder(capsys, validate_katib_experiment):
    assert main(["sweep", "--render", *GRID, "--name", "x"]) == 0
    from_sweep = yaml.safe_load(capsys.readouterr().out)
    assert main(["render", "experiment", *GRID, "--name", "x"]) == 0
    from_render = yaml.safe_load(capsys.readouterr().out)
    validate_katib_experiment(from_render)
    claim = {"claimName": "RUN-NAME-kfp-workspace"}  # the run's workspace, at run time
    replaced = json.loads(
        json.dumps(from_sweep).replace('{"claimName": "fmnist-workspace"}', json.dumps(claim))
    )
    assert from_render == replaced


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--render", "--algorithm", "grid"], "--lr-step must be set for the grid algorithm"),
        (["--render", "--lr-min", "0.2", "--lr-max", "0.1"], "--lr-min / --lr-max must be"),
        (["--render", *GRID, "--max-trials", "9"], "--max-trials must be <= the grid's 4 points"),
        (["--render", "--parallel-trials", "0"], "--parallel-trials must be 1..max_trials"),
        (["--render", "--momentum-min", "0.5"], "--momentum-min / --momentum-max must be both"),
        (["--render", "--workers", "0"], "--workers must be an integer >= 1"),
        (["--render", "--name", "Sweep_1"], "--name must be a lowercase DNS label"),
        (["--local", "--algorithm", "tpe"], "a local sweep runs grid or random; tpe needs Katib"),
        (
            ["--render", *GRID, "--median-stop", "true"],
            "--median-stop-epochs must be < epochs_max (2), or no trial can stop before its end",
        ),
    ],
)
def test_bad_flags_are_usage_errors(capsys, argv, message):
    assert main(["sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fmnist sweep: error: ") and message in err


def test_an_unknown_algorithm_names_katibs(capsys):
    assert main(["sweep", "--render", "--algorithm", "hyperopt"]) == 2
    assert capsys.readouterr().err == (
        "fmnist sweep: error: --algorithm must be one of random, grid, bayesianoptimization, "
        "tpe, multivariate-tpe, cmaes, sobol, got 'hyperopt'\n"
    )


def test_a_missing_mode_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["sweep", "--algorithm", "grid"])
    assert exited.value.code == 2
    assert "one of the arguments --render --apply --local is required" in capsys.readouterr().err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "fmnist sweep --local --algorithm grid" in out


def test_apply_without_credentials_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(
        kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing")
    )
    assert main(["sweep", "--apply", *GRID]) == 2
    assert "fmnist sweep: error: no Kubernetes credentials" in capsys.readouterr().err


@pytest.fixture
def ready_namespace(fake_k8s):
    """Namespace team-a as k8s/kueue, k8s/storage and docs/sweeps.md prepare it."""
    fake_k8s.custom.objects[("localqueues", "team-a", "fmnist-cpu")] = {
        "metadata": {"name": "fmnist-cpu", "namespace": "team-a"}
    }
    fake_k8s.core.pvcs.add(("team-a", "fmnist-workspace"))
    fake_k8s.core.namespace_labels["team-a"] = {KATIB_INJECTION_LABEL: "enabled"}
    return fake_k8s


@pytest.fixture
def katib_run(ready_namespace):
    """Katib's side of a 2-trial Experiment that succeeds."""
    fake_k8s = ready_namespace
    trial = {
        "metadata": {"name": "lr-epochs-abc"},
        "spec": {
            "parameterAssignments": [
                {"name": "lr", "value": "0.05"},
                {"name": "epochs", "value": "2"},
            ]
        },
        "status": {
            "conditions": [ok("Succeeded")],
            "observation": {
                "metrics": [
                    {"name": "accuracy", "latest": "0.8312"},
                    {"name": "loss", "latest": "0.47"},
                ]
            },
        },
    }
    running = {"conditions": [ok("Running", "ExperimentRunning", "Experiment is running")]}
    done = {
        "conditions": [ok("Succeeded", "ExperimentMaxTrialsReached", "max trials")],
        "currentOptimalTrial": {
            "bestTrialName": "lr-epochs-abc",
            "parameterAssignments": trial["spec"]["parameterAssignments"],
            "observation": trial["status"]["observation"],
        },
    }
    fake_k8s.custom.statuses["experiments"] = [running, running, done]
    fake_k8s.custom.listings["trials"] = [[], [trial]]
    return fake_k8s


def test_apply_creates_follows_and_prints_the_best(katib_run, capsys, validate_katib_experiment):
    argv = [
        "sweep",
        "--apply",
        *GRID,
        "--name",
        "lr-epochs",
        "--namespace",
        "team-a",
        "--poll-seconds",
        "0.01",
    ]
    assert main(argv) == 0
    (experiment,) = katib_run.custom.created("experiments")
    validate_katib_experiment(experiment)
    metadata = experiment["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("lr-epochs", "team-a")
    assert set(metadata["annotations"]) == {"fmnist-pipeline/spec-hash"}  # adopted on a rerun
    out = capsys.readouterr().out
    assert "Running=True (ExperimentRunning: Experiment is running)" in out
    assert re.search(r"lr-epochs-abc\s+0.05\s+2\s+0.8312\s+0.4700\s+Succeeded", out)
    assert out.rstrip().endswith("best trial: lr-epochs-abc, accuracy 0.8312: --lr 0.05 --epochs 2")


def test_apply_stages_the_data_with_a_restricted_pod_first(katib_run, capsys):
    argv = ["sweep", "--apply", *GRID, "--namespace", "team-a", "--poll-seconds", "0.01"]
    assert main([*argv, "--train-limit", "2000"]) == 0
    (pod,) = katib_run.core.created_pods
    assert katib_run.core.deleted_pods == [("team-a", pod["metadata"]["name"])]
    spec = pod["spec"]
    assert violations(spec) == []  # the restricted profile, as tests/pss.py writes it out
    assert spec["securityContext"] == {
        "fsGroup": 10001,  # the images' user (images/*.Dockerfile) owns what it writes
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 10001,
    }
    assert container["command"][-3:] == ["/kfp-workspace/train/data", "2000", "10000"]
    assert spec["volumes"] == [
        {"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "fmnist-workspace"}}
    ]
    calls = katib_run.custom.verbs()
    assert calls.index(("get", "localqueues")) < calls.index(("create", "experiments"))


def test_run_staging_pod_runs_the_staging_pod_and_deletes_it(fake_k8s, capsys):
    """One name for one thing: ``run_staging_pod`` runs what ``staging_pod`` builds."""
    data = DataSlice(train_limit=100, test_limit=50)
    run_staging_pod(KubeClient.connect(), "team-a", "ws", "trainer:1", data)
    (pod,) = fake_k8s.core.created_pods
    name = pod["metadata"]["name"]
    assert pod == staging_pod(name, "team-a", "ws", "trainer:1", data)
    assert fake_k8s.core.deleted_pods == [("team-a", name)]
    assert f"staging the data on PVC ws with pod team-a/{name}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("queue", "the Kueue LocalQueue fmnist-cpu (k8s/kueue, with this namespace)"),
        ("pvc", "the PVC fmnist-workspace (k8s/storage, with this namespace)"),
        ("label", f"the label {KATIB_INJECTION_LABEL}=enabled"),
    ],
)
def test_apply_refuses_a_namespace_that_is_not_ready(ready_namespace, capsys, missing, message):
    if missing == "queue":
        ready_namespace.custom.objects.clear()
    elif missing == "pvc":
        ready_namespace.core.pvcs.clear()
    else:
        ready_namespace.core.namespace_labels.clear()
    assert main(["sweep", "--apply", *GRID, "--namespace", "team-a"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fmnist sweep: error: namespace team-a is not ready") and message in err
    assert ready_namespace.core.created_pods == []
    assert ready_namespace.custom.created("experiments") == []


def test_apply_reports_a_failed_experiment(katib_run, capsys):
    failed = {"conditions": [ok("Failed", "ExperimentFailed", "max failed count has reached")]}
    katib_run.custom.statuses["experiments"] = [failed]
    argv = ["sweep", "--apply", *GRID, "--namespace", "team-a", "--poll-seconds", "0.01"]
    assert main(argv) == 1
    assert "max failed count has reached" in capsys.readouterr().err


def test_apply_without_katib_says_so(ready_namespace, capsys):
    ready_namespace.fail("create", "experiments", ApiException(status=404, reason="Not Found"))
    assert main(["sweep", "--apply", *GRID, "--namespace", "team-a"]) == 2
    assert "404 Not Found (is Katib installed?)" in capsys.readouterr().err


def test_apply_refused_by_katibs_webhook_is_one_line(ready_namespace, capsys):
    """Katib v0.19.0's Experiment webhook denies a namespace without its injection label
    (pkg/webhook/v1beta1/experiment/validator: a 400 with the reason in the Status body)."""
    body = json.dumps({"kind": "Status", "code": 400, "message": "the namespace lacks label"})
    denial = ApiException(status=400, reason="Bad Request")
    denial.body = body
    ready_namespace.fail("create", "experiments", denial)
    assert main(["sweep", "--apply", *GRID, "--namespace", "team-a"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("was refused: the namespace lacks label"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_local_grid_on_real_data_ranks_the_trials(packed_small, tmp_path, capsys):
    """A 2x2 grid (lr 0.01/0.05 x 1/2 epochs) on 2,000 real images, two trials at a time."""
    argv = [
        "sweep",
        "--local",
        *GRID,
        "--workers",
        "1",
        "--data-dir",
        str(packed_small),
        "--train-limit",
        "2000",
        "--test-limit",
        "500",
        "--out-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^(trial-\d)\s+(\S+)\s+(\d)\s+(\d\.\d{4})\s+(\d\.\d{4})\s+(\w+)", out, re.M)
    final = rows[-4:]  # the ranked table at the end
    assert sorted((float(lr), int(epochs)) for _, lr, epochs, *_ in final) == [
        (0.01, 1),
        (0.01, 2),
        (0.05, 1),
        (0.05, 2),
    ]
    assert {status for *_, status in final} == {"Succeeded"}
    # What Katib's reading of stdout gave must be what each trainer saved, best first.
    saved = {
        name: json.loads((tmp_path / name / "model" / "model.json").read_text())["metrics"]
        for name, *_ in final
    }
    for name, _, _, accuracy, loss, _ in final:
        assert (float(accuracy), float(loss)) == (
            round(saved[name]["accuracy"], 4),
            round(saved[name]["loss"], 4),
        )
    ranked = [float(accuracy) for _, _, _, accuracy, _, _ in final]
    assert ranked == sorted(ranked, reverse=True)
    best = final[0]
    assert f"best trial: {best[0]}, accuracy {best[3]}: --lr {best[1]} --epochs {best[2]}" in out
    assert f"its model: {tmp_path / best[0] / 'model'}" in out


def test_apply_without_the_right_to_read_namespaces_skips_only_the_label_check(
    ready_namespace, capsys, monkeypatch
):
    """Kubeflow profile users may not read Namespace objects (cluster-scoped)."""

    def forbidden(name):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(ready_namespace.core, "read_namespace", forbidden)
    ready_namespace.fail("create", "experiments", ApiException(status=404, reason="Not Found"))
    assert main(["sweep", "--apply", *GRID, "--namespace", "team-a"]) == 2
    out, err = capsys.readouterr()
    assert "cannot read namespace team-a (403); not checking its Katib label" in out
    assert "is Katib installed?" in err  # it went on: staged the data, tried the Experiment


TINY_LOCAL = [
    "sweep",
    "--local",
    "--algorithm",
    "grid",
    "--epochs-min",
    "1",
    "--epochs-max",
    "1",
    "--workers",
    "1",
    "--train-limit",
    "512",
    "--test-limit",
    "200",
    "--parallel-trials",
    "2",
]


def best_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("best trial: "))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_local_sweep_reruns_afresh_and_resumes_when_asked(packed_small, tmp_path, capsys):
    """The same sweep twice, then with --resume: each ends with the same best trial."""
    grid = ["--lr-min", "0.002", "--lr-max", "0.004", "--lr-step", "0.002"]
    argv = [*TINY_LOCAL, *grid, "--data-dir", str(packed_small), "--out-dir", str(tmp_path)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0  # once "no trial reported accuracy": each trial resumed, silent
    second = capsys.readouterr().out
    assert f"{tmp_path}: removing (--resume continues them) the 2 trial(s)" in second
    assert "resumed from epoch" not in (tmp_path / "trial-1" / "log.txt").read_text()
    assert best_line(second) == best_line(first)
    assert main([*argv, "--resume"]) == 0
    third = capsys.readouterr().out
    assert f"{tmp_path}: resuming the 2 trial(s) of an earlier sweep" in third
    log = (tmp_path / "trial-1" / "log.txt").read_text()
    assert "resumed from epoch 1" in log and "epoch 1 [" not in log
    assert best_line(third) == best_line(first)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_diverged_trial_fails_with_its_reason_and_is_not_the_best(packed_small, tmp_path, capsys):
    """lr 0.002 learns; lr 1000 blows the loss up in epoch 1 (it once 'succeeded' at 10 %)."""
    grid = ["--lr-min", "0.002", "--lr-max", "1000.002", "--lr-step", "1000"]
    argv = [*TINY_LOCAL, *grid, "--data-dir", str(packed_small), "--out-dir", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^trial-2 Failed in \d+ s: lr=1000 epochs=1: trainer: error: training diverged in "
        r"epoch 1 with --lr 1000: mean training loss \S+ \(a uniform guess: 2.30\)",
        out,
        re.M,
    ), out
    assert re.search(r"^trial-2\s+1000\s+1\s+-\s+-\s+Failed", out, re.M)  # in the table
    assert best_line(out).startswith("best trial: trial-1, accuracy ")
    assert "ChildFailedError" in (tmp_path / "trial-2" / "log.txt").read_text()  # all of it


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--gpus-per-worker", "1"],
            "--gpus-per-worker 1 with --workers 2 needs 2 CUDA GPU(s) on this machine, and torch "
            "sees 0; --cpu-fallback trains on the CPU instead",
        ),
        (
            ["--algorithm", "random", "--resume"],
            "--resume with --algorithm random needs the earlier sweep's --seed",
        ),
        (["--out-dir", "{file}"], "--out-dir {file} is a file, not a directory"),
        (
            ["--median-stop", "true", "--median-stop-epochs", "1"],
            "--median-stop is Katib's early stopping: for --render and --apply",
        ),
    ],
)
def test_local_flags_that_cannot_run_here_stop_before_anything_runs(
    tmp_path, capsys, flags, message
):
    """The default tier has no CUDA: a GPU asked for is refused, not silently the CPU."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    flags = [flag.format(file=a_file) for flag in flags]
    out_dir = ["--out-dir", str(tmp_path / "out")] if "--out-dir" not in flags else []
    assert main(["sweep", "--local", *GRID, *out_dir, *flags]) == 2
    assert capsys.readouterr().err == f"fmnist sweep: error: {message.format(file=a_file)}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cpu_fallback_says_so_and_trains_on_the_cpu(packed_small, tmp_path, capsys):
    grid = ["--lr-min", "0.002", "--lr-max", "0.002", "--lr-step", "0.002"]
    argv = [*TINY_LOCAL, *grid, "--parallel-trials", "1", "--data-dir", str(packed_small)]
    argv += ["--out-dir", str(tmp_path), "--gpus-per-worker", "1", "--cpu-fallback"]
    assert main(argv) == 0
    assert capsys.readouterr().err == (
        "fmnist sweep: --gpus-per-worker 1 with --workers 1 needs 1 CUDA GPU(s) on this "
        "machine, and torch sees 0: training on the CPU instead (--cpu-fallback)\n"
    )
    log = (tmp_path / "trial-1" / "log.txt").read_text()
    assert "training on 1 process(es), device cpu" in log


@pytest.mark.parametrize("flag", ["--resume", "--cpu-fallback"])
def test_local_only_flags_are_refused_elsewhere(capsys, flag):
    assert main(["sweep", "--render", *GRID, flag]) == 2
    assert capsys.readouterr().err == f"fmnist sweep: error: {flag} is for --local only\n"
