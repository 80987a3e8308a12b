"""Which token the Model Registry client sends, and where (components/runtime/registry.py,
registry_credentials.py): to a real HTTP listener.

Upstream behaviour relied on, read in kubeflow/model-registry's Python client 0.3.8 and
0.3.11, ``clients/python/src/model_registry/_client.py``: ``ModelRegistry.__init__`` calls
``_get_user_token`` when it is given no ``user_token``, which reads the file named by
``$KF_PIPELINES_SA_TOKEN_PATH`` (else the pod's service-account token) and the client sends
it as ``Authorization: Bearer`` to the address it was given, over http too; an https
connection without a token raises "user token must be provided for secure connection";
the constructor's first request is ``GET .../registered_models?pageSize=1``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.runtime.registry import Registry
from components.runtime.registry_credentials import Credentials, RegistryError

# The answer of a real v0.3.8 server to the constructor's request (tests/components/
# registry_tapes/, the first exchange of each tape).
FIRST_PAGE = {"items": [], "nextPageToken": "", "pageSize": 1, "size": 0}
STOLEN = "the-runner-service-account-token"


@pytest.fixture
def listener():
    """A loopback HTTP server that answers every GET with an empty page, noting each
    request's ``Authorization`` header (None where there is none)."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            data = json.dumps(FIRST_PAGE).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.seen = seen
    server.address = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def ambient_token(tmp_path, monkeypatch):
    """A token where the client would look for one by itself."""
    path = tmp_path / "sa-token"
    path.write_text(STOLEN)
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(path))


def test_the_client_never_sends_a_token_it_finds(listener, ambient_token):
    Registry(listener.address)
    assert listener.seen and listener.seen == [None] * len(listener.seen)


def test_the_secrets_token_goes_over_http_only_when_allowed_with_a_warning(
    listener, ambient_token, tmp_path, capsys
):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("the-users-token\n")
    with pytest.raises(RegistryError) as error:
        Registry(listener.address, Credentials.from_dir(str(secret)))
    assert str(error.value) == (
        f"model registry {listener.address}: refusing to send its token over plain http; "
        "use an https:// address, or set model_registry_insecure=true"
    )
    assert listener.seen == []  # nothing was sent
    capsys.readouterr()
    Registry(listener.address, Credentials.from_dir(str(secret), insecure=True))
    assert set(listener.seen) == {"Bearer the-users-token"}
    out = capsys.readouterr().out
    assert out == (
        f"warning: sending the model registry token over plain http to {listener.address} "
        "(model_registry_insecure=true)\n"
    )


def test_https_without_a_token_is_one_line_and_no_token_is_ever_shown(tmp_path):
    with pytest.raises(RegistryError) as error:
        Registry("https://registry.example:8443", Credentials.from_dir(str(tmp_path / "none")))
    assert str(error.value) == (
        "model registry https://registry.example:8443: an https registry needs a token; put "
        "it under the key 'token' of the Secret named by model_registry_secret"
    )
    credentials = Credentials(token="the-users-token", ca_file="/ca.crt")
    assert "the-users-token" not in repr(credentials)


def test_a_mounted_secret_gives_its_token_and_ca_bundle(tmp_path):
    (tmp_path / "token").write_text("abc\n")
    (tmp_path / "ca.crt").write_text("PEM")
    assert Credentials.from_dir(str(tmp_path)) == Credentials("abc", str(tmp_path / "ca.crt"))
    assert Credentials.from_dir(str(tmp_path / "absent")) == Credentials()
