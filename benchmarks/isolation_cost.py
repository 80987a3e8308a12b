"""What enforcing k8s/network-policies costs: a DDP epoch and a predictor request, side by side.

    python tools/controlplane/cluster.py up      # the cluster tier: kube-router on both nodes
    python -m benchmarks.isolation_cost [--rounds 3] [--requests 300] [--json FILE]
    python tools/controlplane/cluster.py down

Runs against the cluster tier (docs/development.md), as its admin, in two namespaces pinned
to the real nodes: the run's and a client's, which the predictor's policy names as the
ingress gateway's. Each round measures with the policies applied and without them (the
baseline), alternating which goes first, so that load from other work falls on both alike:

- **a DDP epoch**: the train step's code runs the default PyTorchJob (Master + Worker, one CPU
  each: the ranks land on the two nodes and every allreduce crosses the pod network) for 3
  epochs of a 12,000-image slice; an epoch's time is the gap between rank 0's metric lines
  (epochs 2 and 3: the first includes the start-up), training and test pass together;
- **a predictor request**: the deploy step serves an untrained model (the cost does not
  depend on the weights); a client pod on each node, once it connects (an enforcer lets a new
  pod through only after it has seen the pod's address) and after 20 warm-up requests, sends
  ``--requests`` v1 requests of one image, one at a time, first each on a new connection
  (every SYN walks the policy chains), then all on one kept-alive connection (packets of an
  established connection are accepted early: kube-router v2.10.0
  pkg/controllers/netpol/network_policy_controller.go ensureCommonPolicyChain, its
  RELATED,ESTABLISHED rule).

Prints a table with the median of the rounds and the ratio of "policies" to "none".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import kubernetes
import yaml
from kfp import dsl

from benchmarks.serving_latency import untrained_model_dir
from components.images import Images
from components.runtime import volumes
from components.runtime.launcher import run_training_job
from components.specs.params import Serving, TrainingJob
from components.specs.pods import (
    container_security_context,
    resources,
    workspace_placement,
)
from components.steps.deploy import deploy
from serving.defaults import HTTP_PORT, MODEL_NAME
from trainer.data import pack

REPO = Path(__file__).resolve().parents[1]
KUBECONFIG = REPO / "build" / "cluster" / "kubeconfig"
MODES = ("none", "policies")
JOB = TrainingJob(epochs=3, cpu="1", memory="3Gi", timeout_seconds=1200)  # the fault tests' job
METRIC_TIME = re.compile(r"(\S+) \{metricName: accuracy, ")
STORE = "fmnist-models"  # Serving's default model_pvc
CLIENT = """
import http.client, json, sys, time
host, port, path, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
body = json.dumps({"instances": [[[0] * 28] * 28]})
def timed(connection):
    started = time.perf_counter()
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
    return (time.perf_counter() - started) * 1000
def connection():
    return http.client.HTTPConnection(host, port, timeout=10)
deadline = time.monotonic() + 60
while True:  # until the enforcer has this new pod's address (tests/cluster/probes.py)
    try:
        timed(connection())
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
for _ in range(20):
    timed(connection())
fresh = [timed(connection()) for _ in range(n)]
kept = connection()
print(json.dumps({"new connection": fresh, "kept alive": [timed(kept) for _ in range(n)]}))
"""


def tier_helpers():
    """The tier tests' helper modules: tests/cluster/probes.py and real_pods.py."""
    sys.path.insert(0, str(REPO / "tests" / "cluster"))
    return importlib.import_module("probes"), importlib.import_module("real_pods")


probes, real_pods = tier_helpers()


def kubectl(*args: str, stdin: str | None = None) -> str:
    """``kubectl`` as the tier's admin; returns stdout."""
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={KUBECONFIG}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def make_namespace(core, prefix: str, queues: list[dict]) -> str:
    """A namespace whose pods run on the real nodes, with the LocalQueues of k8s/kueue."""
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    metadata = {
        "name": name,
        "labels": {"pod-security.kubernetes.io/enforce": "baseline"},
        "annotations": dict(real_pods.harness_node().REAL_NAMESPACE_ANNOTATIONS),
    }
    core.create_namespace({"metadata": metadata})
    if queues:
        for queue in queues:
            queue["metadata"]["namespace"] = name
        kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(queues))
    return name


def set_policies(namespace: str, mode: str, gateway: str) -> None:
    """k8s/network-policies applied in ``namespace`` (``gateway`` named), or removed; settled."""
    if mode == "policies":
        probes.network_policies(kubectl, namespace, gateway=gateway)
    else:
        probes.remove_network_policies(kubectl, namespace)
    time.sleep(5)  # for both nodes' kube-router to sync it (test_isolation.py probes that)


def epoch_seconds(core, namespace: str, packed: Path, scratch: Path) -> list[float]:
    """Seconds of epochs 2 and 3 of the default job, from rank 0's metric lines.

    Each run gets a fresh workspace, as a pipeline run does: one with a checkpoint would resume.
    """
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    workspace = real_pods.bind_workspace(core, namespace, run_id)
    out = io.StringIO()
    placement = workspace_placement(workspace.pvc, str(workspace.path))
    with contextlib.redirect_stdout(out):
        run_training_job(
            JOB,
            str(packed),
            str(scratch / run_id),
            str(workspace.path),
            run_id,
            placement,
        )
    times = [datetime.fromisoformat(t) for t in METRIC_TIME.findall(out.getvalue())]
    if len(times) != JOB.epochs:
        raise RuntimeError(f"expected {JOB.epochs} metric lines:\n{out.getvalue()}")
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


def client_pod(node: str, address: str, requests: int) -> dict:
    """The client: restricted, no API token, on ``node``."""
    path = f"/v1/models/{MODEL_NAME}:predict"
    container = {
        "name": "client",
        "image": Images.resolve().components,
        "command": ["python", "-c", CLIENT, address, str(HTTP_PORT), path, str(requests)],
        "resources": resources("500m", "256Mi"),
        "securityContext": container_security_context(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "latency-"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }


def latencies(core, namespace: str, node: str, address: str, requests: int) -> dict:
    """The client's request latencies (ms) from ``node``: new connections, then kept alive."""
    name = core.create_namespaced_pod(namespace, client_pod(node, address, requests)).metadata.name
    try:
        deadline = time.monotonic() + 600
        while (phase := core.read_namespaced_pod(name, namespace).status.phase) not in (
            "Succeeded",
            "Failed",
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"client {namespace}/{name} still {phase} after 600 s")
            time.sleep(1)
        # Raw: the client would parse a log that is JSON and hand back its Python repr.
        log = core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()
        if phase == "Failed":
            raise RuntimeError(f"client {namespace}/{name} failed:\n{log}")
        return json.loads(log.strip().splitlines()[-1])
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def serve_untrained(core, namespace: str, scratch: Path):
    """The deploy step's predictor of an untrained model, in ``namespace``; its pod."""
    store = real_pods.bind_workspace(core, namespace, STORE)
    volumes.MODEL_STORE = str(store.path)  # where the step's pod would mount the store PVC
    model = untrained_model_dir(scratch / "untrained")
    deploy.python_func(
        model=dsl.Model(uri=str(model)),
        dataset=dsl.Dataset(uri=str(model)),  # read only by the local check
        serving=Serving(model_pvc=STORE, serving_timeout_seconds=420).to_dict(),
        target="cluster",
        run_id=f"bench-{uuid.uuid4().hex[:6]}",
    )
    return real_pods.running_predictor(core, namespace, MODEL_NAME)


def median(values: list[float]) -> float:
    """The median, or nan for none."""
    return statistics.median(values) if values else float("nan")


def report(figures: dict) -> str:
    """The side-by-side table: median of each measure without and with the policies."""
    lines = [f"{'measure':<46} {'none':>10} {'policies':>10} {'ratio':>7}"]
    for measure, by_mode in figures.items():
        none, policies = (median(by_mode[mode]) for mode in MODES)
        lines.append(f"{measure:<46} {none:>10.2f} {policies:>10.2f} {policies / none:>6.3f}x")
    return "\n".join(lines)


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Figures(dict):
    """measure -> mode -> values."""

    def record(self, measure: str, mode: str, values: list[float]) -> None:
        """Add ``values`` to the measure's figures for ``mode``."""
        self.setdefault(measure, {m: [] for m in MODES})[mode].extend(values)


def measure_epochs(core, run_ns: str, client_ns: str, scratch: Path, rounds, figures) -> None:
    """The default job's epochs, each round without and with the policies."""
    pack(str(scratch / "packed"), train_limit=12_000, test_limit=2_000)
    for order in rounds:
        for mode in order:
            set_policies(run_ns, mode, client_ns)
            seconds = epoch_seconds(core, run_ns, scratch / "packed", scratch)
            figures.record("DDP epoch, 2 nodes (s)", mode, seconds)
            print(f"{mode}: epochs {seconds}", flush=True)


def measure_requests(core, run_ns: str, client_ns: str, scratch: Path, rounds, figures, n):
    """The predictor's request latency from each node, each round without and with them."""
    set_policies(run_ns, "policies", client_ns)  # the deploy step's check under the policies
    pod = serve_untrained(core, run_ns, scratch)
    for order in rounds:
        for mode in order:
            set_policies(run_ns, mode, client_ns)
            for node in real_pods.harness_node().NAMES:
                where = "same node" if node == pod.spec.node_name else "other node"
                for kind, values in latencies(core, client_ns, node, pod.status.pod_ip, n).items():
                    figures.record(f"request p50, {kind}, {where} (ms)", mode, [median(values)])
                    p99 = percentile(values, 0.99)
                    figures.record(f"request p99, {kind}, {where} (ms)", mode, [p99])
            print(f"{mode}: requests done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()

    kubernetes.config.load_kube_config(config_file=str(KUBECONFIG))
    core = kubernetes.client.CoreV1Api()
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "k8s" / "kueue"))
    kueue = yaml.safe_load_all(kubectl("kustomize", str(REPO / "k8s" / "kueue")))
    queues = [o for o in kueue if o and o["kind"] == "LocalQueue"]
    rounds = [MODES if r % 2 == 0 else MODES[::-1] for r in range(args.rounds)]
    scratch = Path(tempfile.mkdtemp(prefix="isolation-cost-"))
    figures, namespaces = Figures(), []
    try:
        namespaces.append(make_namespace(core, "bench-run", queues))
        namespaces.append(make_namespace(core, "bench-client", []))
        run_ns, client_ns = namespaces
        # The steps act in the run's namespace: the kubeconfig context's (runtime/kube.py).
        config = yaml.safe_load(KUBECONFIG.read_text())
        config["contexts"][0]["context"]["namespace"] = run_ns
        (scratch / "kubeconfig").write_text(yaml.safe_dump(config))
        os.environ["KUBECONFIG"] = str(scratch / "kubeconfig")
        # Training first: a predictor would hold a CPU of one node.
        measure_epochs(core, run_ns, client_ns, scratch, rounds, figures)
        measure_requests(core, run_ns, client_ns, scratch, rounds, figures, args.requests)
    finally:
        for namespace in namespaces:
            core.delete_namespace(namespace, propagation_policy="Background")
        shutil.rmtree(scratch, ignore_errors=True)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
