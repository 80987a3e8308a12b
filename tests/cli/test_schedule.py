"""``fmnist schedule``: recurring runs through the KFP client, and its flag checks.

No Kubeflow server runs here, so these tests run the real ``kfp.Client`` against a local
HTTP server (the ``kfp_server`` fixture) that implements the KFP v2beta1 REST endpoints
the client calls, and assert the exact request bodies it receives. Bad hosts and
parameters: test_submit.py checks those for both commands.
"""

import pytest
import yaml

from cli.commands.schedule import parse_cron, parse_interval, parse_time
from cli.errors import UsageError
from cli.main import main


@pytest.fixture
def package(packages):
    """The fashion-mnist pipeline, workspace variant (what the fake server's 2.17 runs)."""
    return packages[("fashion-mnist", "workspace")]


def created(server) -> list[dict]:
    return [
        body
        for method, path, _, body in server.log
        if method == "POST" and path.endswith("/recurringruns")
    ]


def version_reference(server) -> dict:
    version = server.state["versions"][-1]
    return {
        "pipeline_id": version["pipeline_id"],
        "pipeline_version_id": version["pipeline_version_id"],
    }


def test_cron_schedule_sends_the_exact_recurring_run(kfp_server, package, capsys):
    argv = [
        "schedule",
        "--host",
        kfp_server.url,
        "--package",
        str(package),
        "--cron",
        "0 0 2 * * *",
        "--max-concurrency",
        "2",
        "--no-catchup",
        "--start-time",
        "2036-01-01T01:00:00+01:00",
        "--end-time",
        "2036-02-01T00:00:00Z",
        "--param",
        "epochs=4",
        "--param",
        "min_accuracy=0.9",
        "--name",
        "nightly",
        "--experiment",
        "retrain",
    ]
    assert main(argv) == 0
    (body,) = created(kfp_server)
    assert body == {
        "display_name": "nightly",
        "experiment_id": kfp_server.state["experiments"][0]["experiment_id"],
        "mode": "ENABLE",
        "max_concurrency": 2,
        "no_catchup": True,
        "trigger": {
            "cron_schedule": {
                "cron": "0 0 2 * * *",
                "start_time": "2036-01-01T00:00:00Z",
                "end_time": "2036-02-01T00:00:00Z",
            }
        },
        "pipeline_version_reference": version_reference(kfp_server),
        "runtime_config": {"parameters": {"epochs": 4, "min_accuracy": 0.9}},
    }
    rid = next(iter(kfp_server.state["recurring"]))
    out = capsys.readouterr().out
    assert f"recurring run {rid} (cron '0 0 2 * * *'" in out
    assert f"{kfp_server.url}/#/recurringrun/details/{rid}" in out


def test_interval_schedule_with_catchup(kfp_server, package):
    argv = [
        "schedule",
        "--host",
        kfp_server.url,
        "--package",
        str(package),
        "--interval",
        "6h",
        "--catchup",
    ]
    assert main(argv) == 0
    (body,) = created(kfp_server)
    assert body["trigger"] == {"periodic_schedule": {"interval_second": 21600}}
    assert (body["max_concurrency"], body["no_catchup"]) == (1, False)
    assert body["display_name"] == "fashion-mnist schedule"
    assert body["pipeline_version_reference"] == version_reference(kfp_server)


def test_schedule_uploads_the_variant_the_server_runs(kfp_server):
    kfp_server.tag_name = "2.14.0"
    argv = ["schedule", "--host", kfp_server.url, "--interval", "1d", "--param", "epochs=2"]
    assert main([*argv, "--workspace-storage-class", "nfs"]) == 0
    (upload,) = [e for e in kfp_server.log if e[:2] == ("POST", "/apis/v2beta1/pipelines/upload")]
    spec, platform = yaml.safe_load_all(upload[3]["uploadfile"])
    assert "createpvc" in spec["root"]["dag"]["tasks"]  # the pvc variant, for KFP < 2.15
    assert "pipelineConfig" not in platform["platforms"]["kubernetes"]
    (body,) = created(kfp_server)
    assert body["runtime_config"] == {"parameters": {"epochs": 2}}


def test_list_disable_delete(kfp_server, package, capsys):
    common = ["schedule", "--host", kfp_server.url]
    assert main([*common, "--package", str(package), "--cron", "@daily", "--name", "a"]) == 0
    assert main([*common, "--package", str(package), "--interval", "90m", "--name", "b"]) == 0
    first, second = kfp_server.state["recurring"]
    capsys.readouterr()
    assert main([*common, "--list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split()[:3] == ["ID", "STATUS", "TRIGGER"]
    assert listing[1].split()[:4] == [first, "ENABLE", "cron", "@daily"]
    assert listing[2].split()[:5] == [second, "ENABLE", "every", "5400", "s"]
    assert main([*common, "--disable", first]) == 0
    assert ("POST", f"/apis/v2beta1/recurringruns/{first}:disable") in [
        entry[:2] for entry in kfp_server.log
    ]
    assert main([*common, "--delete", second]) == 0
    assert ("DELETE", f"/apis/v2beta1/recurringruns/{second}") in [
        entry[:2] for entry in kfp_server.log
    ]
    assert list(kfp_server.state["recurring"]) == [first]
    assert main([*common, "--delete", "nope"]) == 2
    assert "404" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cron", "0 2 * * *"], "did you mean '0 0 2 * * *'?"),
        (["--cron", "0 61 2 * * *"], "the minute field '61' must use 0-59"),
        (["--cron", "0 0 2 * * 1 2"], "must have 6 fields"),
        (["--interval", "soon"], "--interval 'soon' must be seconds or like 90s"),
        (["--cron", "@daily", "--max-concurrency", "11"], "--max-concurrency must be 1..10"),
        (["--cron", "@daily", "--start-time", "2026-01-01T00:00:00"], "with a zone"),
        (
            [
                "--cron",
                "@daily",
                "--start-time",
                "2036-02-01T00:00:00Z",
                "--end-time",
                "2036-01-01T00:00:00Z",
            ],
            "must be after --start-time",
        ),
        ([], "give --cron or --interval"),
    ],
)
def test_bad_schedules_fail_before_anything_is_sent(kfp_server, package, capsys, flags, message):
    argv = ["schedule", "--host", kfp_server.url, "--package", str(package), *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert kfp_server.log == []


def test_cron_and_interval_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["schedule", "--host", "http://x", "--cron", "@daily", "--interval", "60"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    "cron",
    [
        "0 0 2 * * *",
        "*/30 * * * * ?",
        "0 15 10 ? * MON-FRI",
        "0 0 0 1 JAN,jul *",
        "0 0 9-17/2 * * 1-5",
        "@hourly",
        "@every 1h30m",
    ],
)
def test_valid_crons_pass_unchanged(cron):
    assert parse_cron(cron) == cron


def test_intervals_and_times():
    assert [parse_interval(text) for text in ("3600", "90s", "30m", "1h30m", "1d")] == [
        3600,
        90,
        1800,
        5400,
        86400,
    ]
    assert parse_time("2026-03-01T12:30:00-02:00", "--start-time") == "2026-03-01T14:30:00Z"
    with pytest.raises(UsageError):
        parse_interval("0")


def test_dry_run_prints_the_schedule_and_sends_nothing(kfp_server, package, capsys):
    argv = ["schedule", "--host", kfp_server.url, "--package", str(package), "--dry-run"]
    argv += ["--interval", "6h", "--max-concurrency", "2", "--catchup", "--name", "every-6h"]
    argv += ["--start-time", "2036-01-01T00:00:00Z", "--end-time", "2036-06-30T00:00:00Z"]
    assert main([*argv, "--param", "epochs=4"]) == 0
    assert kfp_server.log == []
    assert capsys.readouterr().out.splitlines() == [
        f"dry run: nothing is sent to {kfp_server.url}",
        "pipeline fashion-mnist: fashion-mnist.yaml (workspace variant)",
        "version: fashion-mnist-<UTC timestamp>-<4 hex digits>",
        "experiment: fmnist",
        "parameters: epochs=4",
        "recurring run: every-6h, every 21600 s from 2036-01-01T00:00:00Z until "
        "2036-06-30T00:00:00Z, at most 2 at once, catch-up",
    ]


def test_a_dry_run_schedule_needs_no_host(package, monkeypatch, capsys):
    monkeypatch.delenv("KF_PIPELINES_ENDPOINT", raising=False)
    argv = ["schedule", "--package", str(package), "--dry-run", "--cron", "@daily"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dry run: nothing is sent (no --host given)"
    assert (
        lines[-1]
        == "recurring run: fashion-mnist schedule, cron '@daily', at most 1 at once, no catch-up"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cron", "*/0 * * * * *"], "the second field '*/0' must have a step of at least 1"),
        (["--cron", "0 0 1-5/0 * * *"], "the hour field '1-5/0' must have a step of at least 1"),
        (["--cron", "@daily", "--end-time", "2020-01-01T00:00:00Z"], "is in the past"),
        (["--cron", "@daily", "--param", "epochs=-3"], "--param epochs must be an integer >= 1"),
        (["--cron", "@daily", "--name", " "], "--name must not be empty"),
    ],
)
def test_bad_schedules_are_refused_in_a_dry_run_too(kfp_server, package, capsys, flags, message):
    argv = ["schedule", "--host", kfp_server.url, "--package", str(package), "--dry-run", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert kfp_server.log == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--list", "--cron", "0 0 2 * * *"], "--list takes no --cron (those create a schedule)"),
        (["--disable", "x", "--param", "epochs=2"], "--disable takes no --param"),
        (["--delete", "x", "--no-catchup", "--dry-run"], "--delete takes no --dry-run"),
    ],
)
def test_managing_flags_refuse_the_flags_of_a_new_schedule(kfp_server, capsys, flags, message):
    assert main(["schedule", "--host", kfp_server.url, *flags]) == 2
    assert message in capsys.readouterr().err
    assert kfp_server.log == []
