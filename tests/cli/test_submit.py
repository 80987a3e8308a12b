"""``fmnist submit`` against a Kubeflow Pipelines API.

No Kubeflow server runs here, so these tests run the real ``kfp.Client`` against a local
HTTP server (the ``kfp_server`` fixture) that implements the KFP v2beta1 REST endpoints
the client calls, and assert the exact request bodies it receives. The server's release,
which picks the compiled variant, is what its healthz reports as ``tag_name``
(kubeflow/pipelines 2.15.0 ``backend/src/apiserver/main.go``).
"""

import http.server
import threading

import pytest
import yaml

from cli.commands import submit
from cli.main import main
from components.specs.params import Serving, TrainingJob
from components.specs.sweep import Sweep


@pytest.fixture
def package(packages):
    """The fashion-mnist pipeline, workspace variant (what 2.17 runs)."""
    return packages[("fashion-mnist", "workspace")]


def posts(server, path_end: str) -> list:
    return [entry for entry in server.log if entry[0] == "POST" and entry[1].endswith(path_end)]


def uploaded_spec(server) -> tuple[dict, dict]:
    (upload,) = posts(server, "/pipelines/upload")
    spec, platform = yaml.safe_load_all(upload[3]["uploadfile"])
    return spec, platform["platforms"]["kubernetes"]


def declared(package) -> dict:
    """The pipeline parameters a compiled package declares."""
    spec = next(yaml.safe_load_all(package.read_text()))  # then the platform spec
    return spec["root"]["inputDefinitions"]["parameters"]


def test_first_submit_uploads_the_pipeline_and_starts_a_run(kfp_server, package, capsys):
    argv = [
        "submit",
        "--host",
        kfp_server.url,
        "--package",
        str(package),
        "--param",
        "epochs=3",
        "--param",
        "lr=0.02",
        "--param",
        "target=cluster",
        "--experiment",
        "nightly",
        "--run-name",
        "first",
    ]
    assert main(argv) == 0
    (upload,) = posts(kfp_server, "/pipelines/upload")
    assert upload[2] == {"name": "fashion-mnist"}
    assert upload[3] == {"uploadfile": package.read_bytes()}
    (experiment,) = posts(kfp_server, "/experiments")
    assert experiment[3] == {"display_name": "nightly", "namespace": ""}
    (run,) = posts(kfp_server, "/runs")
    pipeline = next(iter(kfp_server.state["pipelines"].values()))
    version = kfp_server.state["versions"][0]
    assert run[3] == {
        "experiment_id": kfp_server.state["experiments"][0]["experiment_id"],
        "display_name": "first",
        "pipeline_version_reference": {
            "pipeline_id": pipeline["pipeline_id"],
            "pipeline_version_id": version["pipeline_version_id"],
        },
        "runtime_config": {"parameters": run[3]["runtime_config"]["parameters"]},
    }
    sent = run[3]["runtime_config"]["parameters"]
    assert set(sent) == set(declared(package))  # every one, so the run's details show them
    assert (sent["epochs"], sent["lr"], sent["target"]) == (3, 0.02, "cluster")
    assert (sent["batch_size"], sent["min_accuracy"]) == (
        TrainingJob().batch_size,
        Serving().min_accuracy,
    )
    run_id = kfp_server.state["runs"][0]["run_id"]
    assert f"{kfp_server.url}/#/runs/details/{run_id}" in capsys.readouterr().out


def test_next_submit_adds_a_version_and_reuses_the_experiment(kfp_server, package):
    common = ["submit", "--host", kfp_server.url, "--package", str(package)]
    assert main([*common, "--version", "v1"]) == 0
    assert main([*common, "--version", "v2", "--no-cache"]) == 0
    (new_version,) = posts(kfp_server, "/pipelines/upload_version")
    pipeline_id = next(iter(kfp_server.state["pipelines"]))
    assert new_version[2] == {"name": "v2", "pipelineid": pipeline_id}
    assert len(kfp_server.state["experiments"]) == 1  # found by name the second time
    second = posts(kfp_server, "/runs")[1][3]
    assert (
        second["pipeline_version_reference"]["pipeline_version_id"]
        == (kfp_server.state["versions"][-1]["pipeline_version_id"])
    )
    defaults = {name: value["defaultValue"] for name, value in declared(package).items()}
    assert second["runtime_config"] == {"parameters": defaults}


def test_namespace_and_token_reach_the_server(kfp_server, package):
    argv = ["submit", "--host", kfp_server.url, "--package", str(package)]
    assert main([*argv, "--namespace", "team-a", "--token", "secret"]) == 0
    assert set(kfp_server.authorizations) == {"Bearer secret"}  # healthz and every API call
    (experiment,) = posts(kfp_server, "/experiments")
    assert experiment[3] == {"display_name": "fmnist", "namespace": "team-a"}
    listed = [entry for entry in kfp_server.log if entry[1].endswith("/experiments")][0]
    assert listed[2]["namespace"] == "team-a"


def test_submit_compiles_the_named_pipeline(kfp_server):
    argv = [
        "submit",
        "--host",
        kfp_server.url,
        "--pipeline",
        "fashion-mnist-tune",
        "--param",
        "algorithm=grid",
        "--param",
        "lr_step=0.02",
        "--param",
        "max_trials=4",
    ]
    assert main(argv) == 0
    spec, _ = uploaded_spec(kfp_server)
    assert spec["pipelineInfo"]["name"] == "fashion-mnist-tune"
    (run,) = posts(kfp_server, "/runs")
    sent = run[3]["runtime_config"]["parameters"]
    assert (sent["algorithm"], sent["lr_step"], sent["max_trials"]) == ("grid", 0.02, 4)
    assert (sent["epochs_max"], sent["median_stop"]) == (Sweep().epochs_max, False)
    # Declared optional with no default: KFP's driver refuses null, so they stay unsent
    # (docs/runs.md names them).
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    optional = {name for name, value in parameters.items() if "defaultValue" not in value}
    assert optional == {
        "epochs_step",
        "goal",
        "lr_step",
        "max_failed_trials",
        "max_trials",
        "momentum_max",
        "momentum_min",
        "momentum_step",
        "parallel_trials",
        "seed",
    }
    assert set(sent) == set(parameters) - optional | {
        "lr_step",
        "max_trials",
    }


@pytest.mark.parametrize(
    ("tag", "flags", "workspace"),
    [
        ("2.5.0", ["--workspace-storage-class", "fast"], None),
        ("2.14.1", ["--workspace-storage-class", "fast"], None),
        ("2.15.0", ["--workspace-storage-class", "fast"], {"storageClassName": "fast"}),
        ("2.16.0", ["--workspace-storage-class", "fast"], {"storageClassName": "fast"}),
        ("2.17.0", [], {}),
        ("v2.18.0-rc.1", [], {}),
        ("unknown", ["--kfp-version", "2.14.0", "--workspace-storage-class", "f"], None),
    ],
)
def test_submit_compiles_the_variant_the_server_runs(kfp_server, tag, flags, workspace):
    kfp_server.tag_name = tag
    assert main(["submit", "--host", kfp_server.url, *flags]) == 0
    spec, kubernetes = uploaded_spec(kfp_server)
    if workspace is None:  # the pvc variant: a PVC of the run's own
        assert "pipelineConfig" not in kubernetes
        assert "createpvc" in spec["root"]["dag"]["tasks"]
        return
    patch = kubernetes["pipelineConfig"]["workspace"]["kubernetes"]["pvcSpecPatch"]
    assert patch == {"accessModes": ["ReadWriteMany"], **workspace}
    assert "createpvc" not in spec["root"]["dag"]["tasks"]


def only_healthz(server) -> bool:
    return [entry[:2] for entry in server.log] == [("GET", "/apis/v2beta1/healthz")]


def one_error_line(err: str, command: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fmnist {command}: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("tag", "flags", "message"),
    [
        ("2.15.0", [], "Kubeflow Pipelines 2.15 refuses a run workspace without a storage class"),
        ("2.16.0", [], "pass --workspace-storage-class NAME"),
        ("2.1.0", [], "Kubeflow Pipelines 2.1 is too old"),
        ("2.14.0", [], "the pvc variant (Kubeflow Pipelines 2.2-2.14) needs"),
        ("unknown", [], "the server does not report its version (tag_name 'unknown')"),
        ("2.14.0", ["--package", "WORKSPACE"], "is the workspace variant, but Kubeflow Pipelines"),
    ],
)
def test_a_server_that_cannot_run_the_pipeline_gets_nothing(
    kfp_server, package, capsys, tag, flags, message
):
    kfp_server.tag_name = tag
    flags = [str(package) if flag == "WORKSPACE" else flag for flag in flags]
    assert main(["submit", "--host", kfp_server.url, *flags]) == 2
    assert message in one_error_line(capsys.readouterr().err, "submit")
    assert only_healthz(kfp_server)


# --- bad input: one line, exit 2, nothing sent ------------------------------------------

SCHEDULE = ["--cron", "0 0 2 * * *"]
COMMANDS = [("submit", []), ("schedule", SCHEDULE)]


@pytest.mark.parametrize(("command", "extra"), COMMANDS)
@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("epoch=3", "unknown pipeline parameter 'epoch'"),
        ("namespace=team-a", "unknown pipeline parameter 'namespace'"),  # gone from the pipeline
        ("epochs=three", "--param epochs: 'three' is not an integer"),
        ("lr=fast", "--param lr: 'fast' is not a number"),
        ("epochs", "--param takes NAME=VALUE"),
    ],
)
def test_bad_params_fail_before_anything_is_sent(
    kfp_server, package, capsys, command, extra, param, message
):
    argv = [command, "--host", kfp_server.url, "--package", str(package), "--param", param]
    assert main([*argv, *extra]) == 2
    assert message in one_error_line(capsys.readouterr().err, command)
    assert kfp_server.log == []


class NotKFP(http.server.BaseHTTPRequestHandler):
    """A web server that is not the KFP API: every GET gets an HTML page."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b"<!doctype html><html><body>Central Dashboard</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def html_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotKFP)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("command", "extra"), COMMANDS)
def test_unreachable_malformed_or_foreign_hosts_are_one_clear_line(
    package, html_server, capsys, command, extra
):
    cases = [
        ("http://127.0.0.1:9", "cannot reach Kubeflow Pipelines at http://127.0.0.1:9"),
        ("localhost:8080", "--host must be a URL such as http://localhost:8080"),
        (html_server, f"{html_server} does not answer like a Kubeflow Pipelines API server"),
    ]
    for host, message in cases:
        assert main([command, "--host", host, "--package", str(package), *extra]) == 2
        assert message in one_error_line(capsys.readouterr().err, command)


# --- --wait ------------------------------------------------------------------------------


def wait_for(server, package, capsys) -> tuple[int, list[str]]:
    """``fmnist submit --wait``: (exit code, the lines about the run after its URL)."""
    code = main(["submit", "--host", server.url, "--package", str(package), "--wait"])
    run_id = server.state["runs"][0]["run_id"]
    out = capsys.readouterr().out
    return code, [line for line in out.splitlines() if line.startswith(f"run {run_id}: ")][1:]


def test_wait_prints_each_state_once_and_succeeds_with_the_run(
    kfp_server, package, capsys, monkeypatch
):
    """kfp.Client.wait_for_run_completion polls every 5 s; one 1-s chunk ends after one poll."""
    monkeypatch.setattr(submit, "WAIT_CHUNK_SECONDS", 1)
    kfp_server.run_states = ["RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"]
    code, lines = wait_for(kfp_server, package, capsys)
    run_id = kfp_server.state["runs"][0]["run_id"]
    assert (code, lines) == (0, [f"run {run_id}: RUNNING", f"run {run_id}: SUCCEEDED"])


def test_wait_fails_with_a_failed_run(kfp_server, package, capsys):
    kfp_server.run_states = ["FAILED"]
    code, lines = wait_for(kfp_server, package, capsys)
    run_id = kfp_server.state["runs"][0]["run_id"]
    assert (code, lines) == (1, [f"run {run_id}: FAILED"])


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "--wait" in out


# --- --dry-run: everything checked, the plan printed, nothing sent --------------------------


def test_dry_run_prints_the_plan_and_sends_nothing(kfp_server, capsys):
    argv = ["submit", "--host", kfp_server.url, "--dry-run", "--param", "epochs=3"]
    argv += ["--param", "lr=0.02", "--experiment", "nightly", "--wait", "--timeout", "600"]
    assert main(argv) == 0
    assert kfp_server.log == []
    assert capsys.readouterr().out.splitlines() == [
        f"dry run: nothing is sent to {kfp_server.url}",
        "pipeline fashion-mnist: fashion-mnist.yaml (workspace variant)",
        "version: fashion-mnist-<UTC timestamp>-<4 hex digits>",
        "experiment: nightly",
        "parameters: epochs=3, lr=0.02",
        "(the server's release picks the variant: --kfp-version names it here)",
        "run: fashion-mnist <UTC timestamp>, followed for up to 600 s",
    ]


def test_dry_run_needs_no_host(monkeypatch, capsys):
    """A dry run contacts nothing, so it takes no --host (like kubectl's client dry run)."""
    monkeypatch.delenv("KF_PIPELINES_ENDPOINT", raising=False)
    assert main(["submit", "--dry-run", "--param", "epochs=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dry run: nothing is sent (no --host given)"
    assert lines[1:5] == [
        "pipeline fashion-mnist: fashion-mnist.yaml (workspace variant)",
        "version: fashion-mnist-<UTC timestamp>-<4 hex digits>",
        "experiment: fmnist",
        "parameters: epochs=3",
    ]


def test_without_dry_run_a_missing_host_is_named_before_anything_is_compiled(monkeypatch, capsys):
    monkeypatch.delenv("KF_PIPELINES_ENDPOINT", raising=False)
    monkeypatch.setattr("cli.upload.plan_from_args", lambda *a: pytest.fail("compiled"))
    assert main(["submit", "--param", "epochs=3"]) == 2
    err = one_error_line(capsys.readouterr().err, "submit")
    assert "--host is required to reach Kubeflow Pipelines (or set $KF_PIPELINES_ENDPOINT)" in err


def test_the_endpoint_variable_stands_for_host(kfp_server, monkeypatch, capsys):
    monkeypatch.setenv("KF_PIPELINES_ENDPOINT", kfp_server.url)
    assert main(["submit", "--dry-run"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[0] == f"dry run: nothing is sent to {kfp_server.url}"
    )


def test_dry_run_compiles_for_the_stated_release(kfp_server, capsys):
    argv = ["submit", "--host", kfp_server.url, "--dry-run", "--kfp-version", "2.5.0"]
    argv += ["--workspace-storage-class", "nfs", "--pipeline", "fashion-mnist-tune"]
    argv += ["--pipeline-name", "tune", "--version", "v7", "--run-name", "try"]
    assert main(argv) == 0
    assert kfp_server.log == []
    assert capsys.readouterr().out.splitlines()[1:] == [
        "pipeline tune: fashion-mnist-tune-pvc.yaml (pvc variant)",
        "version: v7",
        "experiment: fmnist",
        "parameters: the defaults",
        "run: try",
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kfp-version", "2.14.0"], "is the workspace variant, but Kubeflow Pipelines 2.14"),
        (["--param", "target=local"], "--param target=local cannot run on a cluster"),
        (["--param", "serving_min_replicas=0"], "--param serving_min_replicas must be"),
    ],
)
def test_dry_run_checks_the_package_against_the_stated_release(
    kfp_server, package, capsys, flags, message
):
    argv = ["submit", "--host", kfp_server.url, "--dry-run", "--package", str(package), *flags]
    assert main(argv) == 2
    assert message in one_error_line(capsys.readouterr().err, "submit")
    assert kfp_server.log == []


def test_the_tune_pipelines_sweep_is_checked_before_upload(kfp_server, capsys):
    argv = ["submit", "--host", kfp_server.url, "--pipeline", "fashion-mnist-tune"]
    assert main([*argv, "--param", "lr_min=0.1", "--param", "lr_max=0.01"]) == 2
    err = one_error_line(capsys.readouterr().err, "submit")
    assert "--param lr_min / --param lr_max must be lr_min <= lr_max, got (0.1, 0.01)" in err
    assert kfp_server.log == []
