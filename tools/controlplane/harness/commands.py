"""The harness's commands: build, up, down, status, restart-apiserver."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from harness import (
    control_plane,
    image_builds,
    karmada,
    multikueue,
    node,
    node_faults,
    real_nodes,
    workers,
)
from harness.api import Api
from harness.build import build, build_all, link
from harness.components import components, without_nodes
from harness.components import karmada as karmada_component
from harness.controllers import controllers, katib, training_operator
from harness.paths import (
    BUILD,
    CONFIG,
    CONTROL_PLANE_BUILT,
    KUBECONFIG,
    LOGS,
    PIDS,
    RUN,
    STATE,
)
from harness.pki import make_pki, remove_certs
from harness.processes import Process, alive, log_tail, terminate, wait_for, wait_ready


def progress(started: float, what: str) -> None:
    """One line per start-up phase, with the seconds since ``started``."""
    print(f"[{time.monotonic() - started:5.1f} s] {what}", flush=True)


def up(args) -> None:
    """Build what is missing, start the control plane and the controllers, wait until ready.

    Our images build (where a source changed) while the control plane starts: only the real
    nodes need them. ``--without-nodes`` stops there (kwok's nodes only; ``nodes`` adds the
    real ones): it needs neither the nodes' programs nor the images, so CI runs the tests of
    kwok's nodes while those still build.
    """
    started = time.monotonic()
    if STATE.exists() or control_plane.kwok_cluster_dir().exists():
        print("a previous cluster is still here: stopping it first", flush=True)
        down(args)
    wanted = components(args.trainer, args.kserve)
    versions = {"trainer": args.trainer, "kserve": args.kserve}
    seconds = {}
    if args.without_nodes:
        for name, component in without_nodes(wanted).items():
            link(name, build(component))
        seconds["build_check"] = time.monotonic() - started
        processes = _start_clusters(args, wanted, versions, started, seconds)
    else:
        build_all(wanted)
        seconds["build_check"] = time.monotonic() - started
        progress(started, "binaries ready; images building where they changed")
        with ThreadPoolExecutor(1) as pool:
            images = pool.submit(image_builds.ensure_images)
            processes = _start_clusters(args, wanted, versions, started, seconds)
            pod_images = images.result()
        seconds["images_wait"] = time.monotonic() - started - sum(seconds.values())
        _start_nodes(processes, pod_images, started, seconds)
    _write_state({**versions, **processes, "real_nodes": not args.without_nodes}, seconds, started)


def nodes(args) -> None:
    """Add the real nodes and their policy enforcers to a cluster ``up --without-nodes`` started."""
    started = time.monotonic()
    state = json.loads(STATE.read_text()) if STATE.exists() else {}
    if state.get("real_nodes", True):
        raise SystemExit("no cluster started with `up --without-nodes` here")
    build_all(components(state["trainer"], state["kserve"]))
    seconds = {"build_check": time.monotonic() - started}
    pod_images = image_builds.ensure_images()
    seconds["images"] = time.monotonic() - started - sum(seconds.values())
    _start_nodes(state, pod_images, started, seconds)
    _write_state({**state, "real_nodes": True}, seconds, started)


def _start_nodes(processes: dict, pod_images, started: float, seconds: dict) -> None:
    """The real nodes, then their NetworkPolicy enforcers; both added to ``processes``."""
    _merge(processes, real_nodes.start_nodes(api=Api(KUBECONFIG), pod_images=pod_images))
    seconds["real_nodes"] = time.monotonic() - started - sum(seconds.values())
    progress(started, f"CoreDNS answering, nodes {', '.join(node.NAMES)} Ready")
    _merge(processes, real_nodes.start_enforcers(Api(KUBECONFIG)))
    seconds["enforcers"] = time.monotonic() - started - sum(seconds.values())
    progress(started, "NetworkPolicies enforced on the real nodes (kube-router)")


def _write_state(state: dict, seconds: dict, started: float) -> None:
    """Record the cluster (build/cluster/state.json) and say how long this command took."""
    seconds["total"] = time.monotonic() - started
    state["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
    STATE.write_text(json.dumps(state, indent=1))
    print(
        f"cluster up in {state['seconds']['total']} s ({json.dumps(state['seconds'])}); "
        f"KUBECONFIG={KUBECONFIG}; logs in {LOGS}",
        flush=True,
    )


def _start_clusters(args, wanted, versions: dict, started: float, seconds: dict) -> dict:
    """The main cluster's control plane and controllers, then its MultiKueue workers."""
    for folder in (LOGS, RUN, PIDS):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    pki = make_pki()
    STATE.write_text(json.dumps({**versions, "starting": True}))
    kwok_files = BUILD / "files" / "kwok"
    stages = [
        kwok_files / "node-initialize.yaml",
        kwok_files / "node-heartbeat-with-lease.yaml",
        kwok_files / "pod-ready.yaml",
        kwok_files / "pod-delete.yaml",
        CONFIG / "pod-stages.yaml",
    ]
    control_plane.start_control_plane(stages)
    seconds["control_plane"] = time.monotonic() - started - sum(seconds.values())
    progress(started, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok up")

    api = Api(KUBECONFIG)
    nodes = control_plane.fake_nodes()
    managed = controllers(wanted, pki, args.trainer, args.kserve, args.workers > 0)
    processes = _start_controllers(api, *managed, nodes, pki)
    STATE.write_text(json.dumps({**versions, **processes}))
    seconds["controllers"] = time.monotonic() - started - sum(seconds.values())
    progress(started, "every controller ready, webhooks answering")

    _after_webhooks(api, args.trainer, len(nodes))
    progress(started, "torch-distributed runtime and kwok ClusterLogs created, nodes Ready")
    for worker in workers.WORKERS[: args.workers]:
        _merge(processes, _start_worker(worker, api, wanted, pki, args.trainer, stages))
        STATE.write_text(json.dumps({**versions, **processes}))
        progress(started, f"MultiKueue worker cluster {worker} up, its Secret on the manager")
    seconds["workers"] = time.monotonic() - started - sum(seconds.values())
    return processes


def _start_controllers(
    api: Api,
    processes: list[Process],
    objects: list[dict],
    nodes: list[dict],
    pki,
    label: str = "",
) -> dict:
    """Create the CRDs, webhooks and nodes, start the controllers, wait until each is ready."""
    api.create_all(objects + nodes, f"{label}controllers")
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    wait_for("the CRDs to be established", lambda: api.established(crds), 120, "kube-apiserver")
    print(f"{len(crds)} CRDs established; webhook configurations, nodes created", flush=True)
    pids = {p.name: p.start() for p in processes}
    state = {"pids": pids, "processes": [p.__dict__ for p in processes]}
    for process in processes:
        if process.health:
            wait_ready(process, pids[process.name], pki["ca.crt"])
    for process in processes:
        if not alive(pids[process.name]):
            raise SystemExit(f"{process.name} exited:\n{log_tail(LOGS / (process.name + '.log'))}")
    return state


def _start_worker(worker: str, manager: Api, wanted, pki, trainer: str, stages) -> dict:
    """A MultiKueue worker: its control plane and controllers; its Secret on the manager."""
    api = workers.start_control_plane(worker, stages)
    processes, objects = workers.controllers(worker, wanted, pki, trainer)
    nodes = control_plane.fake_nodes()
    state = _start_controllers(api, processes, objects, nodes, pki, f"{worker}-")
    _after_webhooks(api, trainer, len(nodes))
    manager.create_all([multikueue.kubeconfig_secret(worker)], f"{worker}-secret")
    return state


def _merge(state: dict, more: dict) -> None:
    """Add a worker's pids and processes to the cluster's state."""
    state["pids"] |= more["pids"]
    state["processes"] += more["processes"]


def _after_webhooks(api: Api, trainer: str, nodes: int) -> None:
    """What needs the webhooks: the torch-distributed runtime, kwok's ClusterLogs; nodes Ready."""
    runtime = yaml.safe_load(
        (BUILD / "files" / f"trainer-{trainer}" / "torch_distributed.yaml").read_text()
    )
    cluster_logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "fmnist-trainer-log"},
        "spec": {
            "logs": [
                {
                    "containers": ["pytorch", "node", "trainer"],
                    "logsFile": str(CONFIG / "trainer.log"),
                }
            ]
        },
    }
    api.create_all([runtime, cluster_logs], "after-webhooks")
    wait_for("the nodes to be Ready", lambda: api.nodes_ready(nodes), 60, "kwok-controller")


def down(args=None) -> None:
    """Stop every process the harness and kwokctl started; keep the logs."""
    for real in reversed(node.NODES):  # first: the kubelets and every container they started
        node.stop(real)
    pids = [int(p.read_text()) for p in PIDS.glob("*.pid")] if PIDS.exists() else []
    terminate(pids, 15)
    shutil.rmtree(PIDS, ignore_errors=True)
    karmada.stop()
    workers.stop_all()
    control_plane.stop_control_plane()
    for folder in (training_operator.CERTS, katib.CERTS):  # ours only: same bytes as build's
        remove_certs(folder)
    STATE.unlink(missing_ok=True)
    KUBECONFIG.unlink(missing_ok=True)
    # The addresses of what was attached by hand: a KFP backend, a Model Registry.
    for path in [*BUILD.glob("kfp-*"), BUILD / "model-registry"]:
        path.unlink(missing_ok=True)
    print("cluster down", flush=True)


def attach_karmada(args) -> None:
    """Karmada's control plane over the running cluster's two workers (harness/karmada.py)."""
    if not STATE.exists() or not karmada.workers_running():
        raise SystemExit("no cluster with two workers here: run `cluster.py up` first")
    link("karmada", build(karmada_component()))  # at once when `build-karmada` built it
    started = time.monotonic()
    state = json.loads(STATE.read_text())
    state["pids"] = {n: pid for n, pid in state["pids"].items() if not n.startswith("karmada-")}
    karmada.stop()  # one attached before
    try:
        state["pids"] |= karmada.attach(make_pki(), state["trainer"])
    except BaseException:
        print(
            "attaching Karmada failed; stopping it (logs stay in build/cluster/logs)",
            file=sys.stderr,
        )
        karmada.stop()
        raise
    STATE.write_text(json.dumps(state, indent=1))
    print(
        f"Karmada up in {time.monotonic() - started:.1f} s, members "
        f"{', '.join(f'{m} ({w})' for m, w in karmada.MEMBERS.items())}; "
        f"KUBECONFIG={karmada.KUBECONFIG}",
        flush=True,
    )


def status(args) -> None:
    """Print which processes run; exit 1 if one does not."""
    if not STATE.exists():
        print("no cluster (make cluster-up)")
        sys.exit(1)
    state = json.loads(STATE.read_text())
    failed = False
    for name, pid in state.get("pids", {}).items():
        ok = alive(pid)
        failed |= not ok
        print(f"{name:20} pid {pid:<8} {'running' if ok else 'NOT RUNNING'}")
    pid = control_plane.apiserver_pid()
    running = "running" if pid and alive(pid) else "NOT RUNNING"
    print(f"{'kube-apiserver':20} pid {pid or '-':<8} {running}")
    sys.exit(1 if failed else 0)


def restart_apiserver(args) -> None:
    """Stop the kube-apiserver, wait ``--down-seconds``, start it again."""
    control_plane.stop_apiserver()
    time.sleep(args.down_seconds)
    control_plane.start_apiserver()
    print("kube-apiserver restarted", flush=True)


def parser(description: str) -> argparse.ArgumentParser:
    """The command line (tools/controlplane/cluster.py's docstring describes it)."""
    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "up"):
        command = sub.add_parser(name)
        command.add_argument("--trainer", default=os.environ.get("TRAINER") or "v2.3.0")
        command.add_argument("--kserve", default=os.environ.get("KSERVE") or "v0.15.2")
    # MultiKueue worker clusters (harness/workers.py): 0 for none
    sub.choices["up"].add_argument(
        "--workers", type=int, choices=range(len(workers.WORKERS) + 1), default=len(workers.WORKERS)
    )
    sub.choices["up"].add_argument("--without-nodes", action="store_true")  # kwok's nodes only
    sub.add_parser("nodes")  # the real nodes, into a cluster started --without-nodes
    sub.add_parser("karmada")  # attach Karmada to a running cluster (its two workers)
    sub.add_parser("build-karmada")  # build Karmada's control plane (cached), nothing else
    sub.add_parser("down")
    sub.add_parser("images")  # build the images (cached); each one's size and seconds
    sub.add_parser("status")
    for name in ("node-off", "node-on"):  # lose a real node, get it back (node_faults.py)
        sub.add_parser(name).add_argument("index", type=int, choices=[n.index for n in node.NODES])
    restart = sub.add_parser("restart-apiserver")
    restart.add_argument("--down-seconds", type=float, default=0)
    return parser


def main(argv: list[str], description: str = "") -> None:
    """Run one command."""
    args = parser(description).parse_args(argv)
    BUILD.mkdir(parents=True, exist_ok=True)
    if args.command == "build":
        started = time.monotonic()
        wanted = components(args.trainer, args.kserve)
        CONTROL_PLANE_BUILT.unlink(missing_ok=True)
        # First: the torch images go through these into the nodes' image stores.
        bin_dirs = (build(wanted["containerd"]) / "bin", build(wanted["registry"]) / "bin")
        with ThreadPoolExecutor(1) as pool:
            torch_images = pool.submit(real_nodes.preload_torch_images, bin_dirs)
            for name, component in without_nodes(wanted).items():
                link(name, build(component))
            CONTROL_PLANE_BUILT.touch()
            print(f"control plane built ({time.monotonic() - started:.1f} s)", flush=True)
            build_all(wanted)
            torch_images.result()
        image_builds.ensure_images()
        print(f"all built ({time.monotonic() - started:.1f} s); binaries in {BUILD / 'bin'}")
    elif args.command == "build-karmada":
        build(karmada_component())
    elif args.command == "up":
        LOGS.mkdir(parents=True, exist_ok=True)
        try:
            up(args)
        except BaseException:
            print(
                "cluster-up failed; stopping what started (logs stay in build/cluster/logs)",
                file=sys.stderr,
            )
            down()
            raise
    elif args.command == "nodes":
        try:
            nodes(args)
        except BaseException:
            print("adding the real nodes failed (logs stay in build/cluster/logs)", file=sys.stderr)
            raise
    elif args.command == "karmada":
        attach_karmada(args)
    elif args.command == "images":
        image_builds.report()
    elif args.command == "down":
        down(args)
    elif args.command == "status":
        status(args)
    elif args.command in ("node-off", "node-on"):
        real = node_faults.node(args.index)
        if args.command == "node-off":
            node_faults.power_off(real)
        else:
            node_faults.power_on(real, Api(KUBECONFIG))
    else:
        restart_apiserver(args)
