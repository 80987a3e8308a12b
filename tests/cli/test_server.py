"""How ``fmnist submit`` and ``fmnist schedule`` reach the KFP API: the token.

The token can come from ``--token-file`` or ``$FMNIST_KFP_TOKEN``, where ``ps`` does not
show it; it is never printed, not in an error and not in a warning. The real
``kfp.Client`` talks to the local ``kfp_server`` fixture (tests/conftest.py).
"""

import http.server
import threading
import time

import pytest

from cli import server
from cli.main import main

TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.c2lnbmF0dXJl"


@pytest.fixture
def package(packages):
    """The fashion-mnist pipeline, workspace variant (what 2.17 runs)."""
    return packages[("fashion-mnist", "workspace")]


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch):
    monkeypatch.delenv("FMNIST_KFP_TOKEN", raising=False)


def one_error_line(err: str, command: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fmnist {command}: error: "), err
    return lines[0]


def test_the_token_from_a_file_or_the_environment_reaches_the_server(
    kfp_server, package, tmp_path, monkeypatch
):
    argv = ["submit", "--host", kfp_server.url, "--package", str(package)]
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")  # `kubectl create token` ends it with a newline
    assert main([*argv, "--token-file", str(token_file)]) == 0
    assert set(kfp_server.authorizations) == {f"Bearer {TOKEN}"}
    kfp_server.authorizations.clear()
    monkeypatch.setenv("FMNIST_KFP_TOKEN", "from-env")
    assert main(["schedule", "--host", kfp_server.url, "--list"]) == 0
    assert set(kfp_server.authorizations) == {"Bearer from-env"}


def test_a_flag_overrides_the_environment(kfp_server, package, monkeypatch):
    monkeypatch.setenv("FMNIST_KFP_TOKEN", "from-env")
    assert main(["schedule", "--host", kfp_server.url, "--list", "--token", "from-flag"]) == 0
    assert set(kfp_server.authorizations) == {"Bearer from-flag"}


def test_token_and_token_file_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["submit", "--dry-run", "--token", "t", "--token-file", str(tmp_path)])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def bad_token_files(tmp_path) -> list[tuple[str, str]]:
    """(path, what the one error line says) for token files that give no token."""
    (tmp_path / "large").write_bytes(b"a" * (16 * 1024 + 1))
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "two-lines").write_text(f"{TOKEN}\nsecond-line\n")
    (tmp_path / "binary").write_bytes(TOKEN.encode() + b"\x00\xff")
    return [
        (tmp_path / "missing", "cannot read --token-file {}: No such file or directory"),
        (tmp_path, "cannot read --token-file {}: Is a directory"),
        (tmp_path / "large", "--token-file {} is over 16384 bytes: not a bearer token"),
        (tmp_path / "empty", "--token-file {} gives an empty token"),
        (tmp_path / "two-lines", "the token from --token-file {} holds spaces, control or"),
        (tmp_path / "binary", "the token from --token-file {} holds spaces, control or"),
    ]


@pytest.mark.parametrize(("command", "extra"), [("submit", []), ("schedule", ["--interval", "1h"])])
def test_a_token_file_that_gives_no_token_is_one_line(
    kfp_server, package, tmp_path, capsys, command, extra
):
    for path, message in bad_token_files(tmp_path):
        argv = [command, "--host", kfp_server.url, "--package", str(package), *extra]
        assert main([*argv, "--token-file", str(path)]) == 2
        err = capsys.readouterr().err
        assert message.format(path) in one_error_line(err, command)
        assert TOKEN not in err
    assert kfp_server.log == []


def test_a_dry_run_reads_the_token_file_too(package, tmp_path, capsys):
    argv = ["submit", "--dry-run", "--package", str(package)]
    assert main([*argv, "--token-file", str(tmp_path / "missing")]) == 2
    assert "cannot read --token-file" in one_error_line(capsys.readouterr().err, "submit")


def test_a_token_with_a_line_break_is_refused_without_showing_it(
    kfp_server, package, capsys, monkeypatch
):
    """Sent, it would be refused by http.client in an error that quotes the header value."""
    monkeypatch.setenv("FMNIST_KFP_TOKEN", f"{TOKEN}\r\nX-Injected: 1")
    assert main(["submit", "--host", kfp_server.url, "--package", str(package)]) == 2
    err = capsys.readouterr().err
    assert "the token from $FMNIST_KFP_TOKEN holds spaces" in one_error_line(err, "submit")
    assert TOKEN not in err
    assert kfp_server.log == []


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("http://kfp.example.com:8080", True),
        ("http://10.0.0.7/pipeline", True),
        ("https://kfp.example.com", False),
        ("http://127.0.0.1:8080", False),
        ("http://localhost:8080/pipeline", False),
        ("http://[::1]:8080", False),
    ],
)
def test_a_token_over_plain_http_to_another_host_is_warned_of(
    package, capsys, monkeypatch, host, warned
):
    monkeypatch.setenv("FMNIST_KFP_TOKEN", TOKEN)
    assert main(["submit", "--dry-run", "--host", host, "--package", str(package)]) == 0
    err = capsys.readouterr().err
    if warned:
        hostname = host.split("//")[1].split(":")[0].split("/")[0]
        assert err.splitlines() == [
            f"fmnist: warning: a token over plain http to {hostname} can be read by anyone "
            "on the way; use https"
        ]
    else:
        assert err == ""


def test_no_warning_without_a_token(package, capsys):
    host = "http://kfp.example.com"
    assert main(["submit", "--dry-run", "--host", host, "--package", str(package)]) == 0
    assert capsys.readouterr().err == ""


class Refusing(http.server.BaseHTTPRequestHandler):
    """A KFP API behind a gateway that refuses every request, quoting nothing."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def refusing_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_token_appears_in_no_error(kfp_server, refusing_server, package, tmp_path, capsys):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    cases = [  # (host, extra flags, what the error says)
        (refusing_server, [], f"Kubeflow Pipelines at {refusing_server} answered 401"),
        ("http://127.0.0.1:9", [], "cannot reach Kubeflow Pipelines at http://127.0.0.1:9"),
        (kfp_server.url, ["--disable", "no-such-id"], "refused: 404 Not Found"),
    ]
    for host, extra, message in cases:
        command = "schedule" if extra else "submit"
        argv = [command, "--host", host, "--token-file", str(token_file), *extra]
        if not extra:
            argv += ["--package", str(package)]
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert message in one_error_line(err, command)
        assert TOKEN not in out + err


# --- timeouts: a server that stops answering ends the command, in one line ---------------


def test_a_silent_host_fails_the_healthz_check_within_its_bound(
    silent_server, package, capsys, monkeypatch
):
    monkeypatch.setattr(server, "HEALTHZ_SECONDS", 0.5)
    start = time.monotonic()
    assert main(["submit", "--host", silent_server, "--package", str(package)]) == 2
    assert time.monotonic() - start < 5
    err = one_error_line(capsys.readouterr().err, "submit")
    assert f"cannot reach Kubeflow Pipelines at {silent_server}: timed out" in err


@pytest.mark.parametrize(
    ("command", "extra", "stalled"),
    [
        ("submit", ["--package"], "list_pipelines"),  # the upload's first call
        ("submit", ["--package"], "create_run"),
        ("schedule", ["--list"], "list_recurring"),
        ("submit", ["--package"], "healthz"),  # kfp.Client asks it again, when it is made
    ],
)
def test_a_server_that_stops_answering_fails_the_command_within_its_bound(
    kfp_server, package, capsys, monkeypatch, command, extra, stalled
):
    """kfp-server-api 2.17.3 ``kfp_server_api/rest.py`` sets no timeout on a request unless
    the call passes one, and kfp 2.17.3 ``kfp/client/client.py`` passes none; the client
    asks healthz when it is made unless a namespace is set (``Client.__init__``)."""
    answered = threading.Event()  # held until the test is over, or 20 s at most
    monkeypatch.setattr(server, "CALL_SECONDS", 0.5)
    fake_kfp = kfp_server.RequestHandlerClass  # FakeKFP of tests/conftest.py
    # The stalled answer, once released, finds the client gone: no traceback from the server.
    kfp_server.handle_error = lambda request, client_address: None
    if stalled == "healthz":  # let the command's own check through, stall the client's
        first = fake_kfp.healthz
        calls = []

        def healthz(handler):
            calls.append(1)
            if len(calls) > 1:
                answered.wait(20)
            return first(handler)

        monkeypatch.setattr(fake_kfp, "healthz", healthz)
    else:
        original = getattr(fake_kfp, stalled)
        monkeypatch.setattr(
            fake_kfp, stalled, lambda handler, **k: (answered.wait(20), original(handler, **k))[1]
        )
    argv = [command, "--host", kfp_server.url, *extra]
    if extra == ["--package"]:
        argv.append(str(package))
    start = time.monotonic()
    try:
        code = main(argv)
    finally:
        answered.set()
    assert time.monotonic() - start < 10  # a stalled answer comes after 20 s
    assert code == 2
    err = one_error_line(capsys.readouterr().err, command)
    assert f"Kubeflow Pipelines at {kfp_server.url} did not answer within 0.5 s" in err
