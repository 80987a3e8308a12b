"""Every Kubernetes API call has connect and read timeouts.

An API server (or a proxy in front of it) that accepts a connection and never answers
must fail the call within the bound, not hold the step past its deadline: the real
``kubernetes`` client, configured the way the steps configure it (a kubeconfig, the
client's retries), talks to the ``silent_server`` fixture (tests/conftest.py).
"""

import threading
import time

from urllib3.exceptions import HTTPError

from components.runtime.kube import (
    CLIENT_RETRIES,
    REQUEST_TIMEOUT,
    BoundedApiClient,
    KubeClient,
    connection_failure,
)
from components.runtime.watchers.multikueue import worker_client
from components.specs.kinds import INFERENCESERVICE, PYTORCHJOB, WORKLOAD

TEST_TIMEOUT = (1.0, 0.5)  # (connect, read) seconds, per attempt, for these tests
# A GET is read 3 times (CLIENT_RETRIES.read = 2), with 1 s of back-off between the last two.
BOUND_SECONDS = (1 + CLIENT_RETRIES.read) * TEST_TIMEOUT[1] + 1.0

BODY = {"metadata": {"name": "x", "namespace": "team"}}
CALLS = {  # every KubeClient method, with arguments
    "create": lambda kube: kube.create(PYTORCHJOB, "team", BODY),
    "get": lambda kube: kube.get(INFERENCESERVICE, "team", "x"),
    "list": lambda kube: kube.list(WORKLOAD, "team", "a=b"),
    "replace": lambda kube: kube.replace(INFERENCESERVICE, "team", "x", BODY),
    "delete": lambda kube: kube.delete(PYTORCHJOB, "team", "x"),
    "list_pods": lambda kube: kube.list_pods("team", "a=b"),
    "pod_log": lambda kube: kube.pod_log("team", "x", "pytorch"),
    "list_deployments": lambda kube: kube.list_deployments("team", "a=b"),
    "namespace_labels": lambda kube: kube.namespace_labels("team"),
    "served_resources": lambda kube: kube.served_resources("kubeflow.org/v1"),
    "openapi_schema": lambda kube: kube.openapi_schema("kubeflow.org/v1"),
    "read_node": lambda kube: kube.core_api.read_node("node-1"),  # watchers/lost_nodes.py
}


def kubeconfig(tmp_path, server: str):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: silent\n"
        f"clusters: [{{name: silent, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: silent, context: {cluster: silent, user: me}}]\n"
    )
    return path


def timed(call) -> dict:
    """Run ``call`` in a thread: what it raised and how long it took, once it ends."""
    outcome = {}

    def run():
        start = time.monotonic()
        try:
            call()
        except Exception as error:
            outcome["error"] = error
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_the_bound_is_the_documented_one():
    assert BoundedApiClient.timeout == REQUEST_TIMEOUT == (10.0, 30.0)
    assert (CLIENT_RETRIES.connect, CLIENT_RETRIES.read) == (4, 2)  # docs/security.md's sums


def test_every_call_gives_up_on_a_server_that_never_answers(silent_server, tmp_path, monkeypatch):
    """kubernetes 30.1.0 ``client/rest.py`` (``RESTClientObject.request``) sets no timeout
    unless the call passes ``_request_timeout``; ``BoundedApiClient`` passes it always."""
    path = kubeconfig(tmp_path, silent_server)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setattr(BoundedApiClient, "timeout", TEST_TIMEOUT)
    calls = {
        name: timed(lambda call=call: call(KubeClient.connect())) for name, call in CALLS.items()
    }
    worker = worker_client(path)  # MultiKueue: the worker's API
    calls["worker get"] = timed(lambda: worker.get(PYTORCHJOB, "team", "x"))
    for outcome in calls.values():
        outcome["thread"].join(BOUND_SECONDS + 5)
    hung = [name for name, outcome in calls.items() if outcome["thread"].is_alive()]
    assert hung == []
    for name, outcome in calls.items():
        assert outcome["seconds"] < BOUND_SECONDS + 2, name
        assert isinstance(outcome["error"], HTTPError), (name, outcome["error"])
        message = connection_failure(outcome["error"])
        assert message.startswith(f"{silent_server}: Read timed out."), (name, message)
        assert "\n" not in message


def test_a_command_facing_a_silent_api_server_fails_in_one_line(
    silent_server, tmp_path, monkeypatch, capsys
):
    from cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, silent_server)))
    monkeypatch.setattr(BoundedApiClient, "timeout", TEST_TIMEOUT)
    codes = []
    outcome = timed(lambda: codes.append(main(["sweep", "--apply"])))
    outcome["thread"].join(BOUND_SECONDS + 5)
    assert not outcome["thread"].is_alive()
    err = capsys.readouterr().err.splitlines()
    assert codes == [2] and len(err) == 1, err
    assert err[0].startswith(
        f"fmnist sweep: error: cannot reach the Kubernetes API at {silent_server}: Read timed out"
    )
