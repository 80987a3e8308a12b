"""``fmnist submit`` against a Kubeflow Pipelines API.

No Kubeflow server runs here, so these tests run the real ``kfp.Client`` against a local
HTTP server (the ``kfp_server`` fixture) that implements the KFP v2beta1 REST endpoints
the client calls, and assert the exact request bodies it receives.
"""

import pytest
import yaml

from pipelines.cli import main


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The fashion-mnist pipeline, compiled once."""
    from components.images import Images
    from pipelines.commands.compile import compile_pipeline

    return compile_pipeline("fashion-mnist", tmp_path_factory.mktemp("pkg"), Images.defaults())


def posts(server, path_end: str) -> list:
    return [entry for entry in server.log if entry[0] == "POST" and entry[1].endswith(path_end)]


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
        "backend=local",
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
        "runtime_config": {"parameters": {"epochs": 3, "lr": 0.02, "backend": "local"}},
    }
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
    assert second["runtime_config"] == {"parameters": {}}


def test_namespace_and_token_reach_the_server(kfp_server, package):
    argv = [
        "submit",
        "--host",
        kfp_server.url,
        "--package",
        str(package),
        "--namespace",
        "team-a",
        "--token",
        "secret",
    ]
    assert main(argv) == 0
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
    (upload,) = posts(kfp_server, "/pipelines/upload")
    spec = next(yaml.safe_load_all(upload[3]["uploadfile"]))
    assert spec["pipelineInfo"]["name"] == "fashion-mnist-tune"
    (run,) = posts(kfp_server, "/runs")
    assert run[3]["runtime_config"]["parameters"] == {
        "algorithm": "grid",
        "lr_step": 0.02,
        "max_trials": 4,
    }


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("epoch=3", "unknown pipeline parameter 'epoch'"),
        ("epochs=three", "--param epochs: 'three' is not a NUMBER_INTEGER"),
        ("epochs", "--param takes NAME=VALUE"),
    ],
)
def test_bad_params_fail_before_anything_is_uploaded(kfp_server, package, capsys, param, message):
    argv = ["submit", "--host", kfp_server.url, "--package", str(package), "--param", param]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert kfp_server.log == []


def test_unreachable_or_malformed_host_is_a_clear_error(package, capsys):
    assert main(["submit", "--host", "http://127.0.0.1:9", "--package", str(package)]) == 2
    assert "cannot reach Kubeflow Pipelines at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["submit", "--host", "localhost:8080", "--package", str(package)]) == 2
    assert "--host must be a URL" in capsys.readouterr().err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    assert "examples:" in capsys.readouterr().out
