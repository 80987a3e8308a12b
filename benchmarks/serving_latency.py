"""Serving latency: requests to a real ``python -m serving`` process, on the CPU or a GPU.

Reports p50/p99 latency and requests/s at each concurrency (one persistent HTTP
connection per client thread), the raw forward time of one request's images measured in
the same run on the same device (overhead ratio = p50 latency / forward time), and the
server's memory (RSS of the process tree) at the start and end of a timed run.

    python benchmarks/serving_latency.py [--model-dir DIR] [--requests 2000]
        [--concurrency 1 8] [--duration 60] [--protocol v1|v2] [--device cpu|cuda]
        [--images 1] [--json FILE] [python -m serving flags]

Without ``--model-dir`` an untrained network is served: latency does not depend on the
weights. Targets on 2 cores: p50 <= 3 ms at concurrency 1, >= 800 req/s at concurrency 8,
memory flat over 60 s. The client shares the machine, so it is part of the measurement.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from components.runtime.local_predictor import running_predictor
from serving.predictor import FashionMNISTModel, ServingConfig
from trainer.data import CLASS_NAMES
from trainer.model import build_model, save_model_dir
from trainer.model_dir import ModelCard

MODEL_NAME = "fashion-mnist"
PATHS = {"v1": f"/v1/models/{MODEL_NAME}:predict", "v2": f"/v2/models/{MODEL_NAME}/infer"}
HEADERS = {"content-type": "application/json"}


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="model directory (default: an untrained network)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the memory run")
    parser.add_argument("--protocol", choices=sorted(PATHS), default="v1")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--images", type=int, default=1, help="images per request")
    parser.add_argument("--json", help="also write the results to this file")
    return parser.parse_known_args()  # the rest goes to `python -m serving`


def untrained_model_dir(directory: Path) -> Path:
    card = ModelCard("lenet", list(CLASS_NAMES), pixel_mean=0.286, pixel_std=0.353)
    return save_model_dir(build_model("lenet"), directory, card)


def request_bodies(protocol: str, images: int = 1, count: int = 64) -> list[bytes]:
    """Pre-encoded bodies of ``images`` images each, so the client spends little per request."""
    batches = np.random.default_rng(0).integers(0, 256, (count, images, 28, 28)).tolist()
    if protocol == "v1":
        return [json.dumps({"instances": batch}).encode() for batch in batches]
    shape = [images, 28, 28]
    return [
        json.dumps(
            {"inputs": [{"name": "image", "shape": shape, "datatype": "UINT8", "data": batch}]}
        ).encode()
        for batch in batches
    ]


def client(port: int, path: str, bodies: list[bytes], stop, latencies: list[float]) -> None:
    """Send requests on one connection until ``stop(sent)`` is true."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = 0
    while not stop(sent):
        start = time.perf_counter()
        connection.request("POST", path, bodies[sent % len(bodies)], HEADERS)
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - start)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        sent += 1
    connection.close()


def after_requests(count: int):
    return lambda sent: sent >= count


def after_seconds(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda _sent: time.monotonic() >= deadline


def load(port: int, path: str, bodies: list[bytes], concurrency: int, stop, pid: int) -> dict:
    """Run ``concurrency`` clients until each one's ``stop`` says so; latency and cost."""
    latencies: list[float] = []
    threads = [
        threading.Thread(target=client, args=(port, path, bodies, stop, latencies))
        for _ in range(concurrency)
    ]
    cpu_start, start = cpu_seconds(pid), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_start
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "p50_ms": cuts[49] * 1e3,
        "p99_ms": cuts[98] * 1e3,
        "req_per_s": len(latencies) / wall,
        "server_cpu_ms": cpu / len(latencies) * 1e3,
    }


def forward_ms(model_dir: Path, device: str, images: int, repeats: int = 2000) -> float:
    """Median time of one forward pass on ``images`` images, set up as the server does.

    On a GPU it includes copying the result back, as a request must.
    """
    model = FashionMNISTModel(MODEL_NAME, ServingConfig(str(model_dir), device=device))
    model.load()
    batch, times = torch.zeros(images, 1, 28, 28, device=model.device), []  # pixels 0-255
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            model.net(batch).cpu()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def server_pids(pid: int) -> set[int]:
    """The server process and its children (KServe's --workers processes)."""
    pids = {pid}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                pids.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the server's processes."""
    total = 0
    for each in server_pids(pid):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of the server's processes, in MiB."""
    total = 0
    for each in server_pids(pid):
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def measure(args: argparse.Namespace, server_flags: list[str], tmp: Path) -> dict:
    bodies, path = request_bodies(args.protocol, args.images), PATHS[args.protocol]
    server_flags = [*server_flags, "--device", args.device]
    model_dir = Path(args.model_dir or untrained_model_dir(tmp / "model"))
    with (
        open(tmp / "server.log", "w+") as log,
        running_predictor(model_dir, log, flags=tuple(server_flags)) as server,
    ):
        pid, port = server.process.pid, server.port
        load(port, path, bodies, 2, after_requests(100), pid)  # warm-up
        runs = {}
        for concurrency in args.concurrency:
            stop = after_requests(args.requests // concurrency)
            runs[concurrency] = load(port, path, bodies, concurrency, stop, pid)
        forward = forward_ms(model_dir, args.device, args.images)
        rss_start = rss_mib(pid)
        stop = after_seconds(args.duration)
        timed = load(port, path, bodies, max(args.concurrency), stop, pid)
        rss_end = rss_mib(pid)
    return {"runs": runs, "forward_ms": forward, "timed": timed, "rss_mib": (rss_start, rss_end)}


def report(args: argparse.Namespace, server_flags: list[str], result: dict) -> None:
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"protocol {args.protocol}, {args.images} image(s)/request, on {where}, server flags: "
          f"{' '.join(server_flags) or 'none'}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    forward = result["forward_ms"]
    print(f"raw forward, {args.images} image(s): {forward:.3f} ms")
    print(
        "concurrency  requests   p50 ms   p99 ms   req/s  images/s  server CPU ms/req  p50/forward"
    )
    rows = [(c, args.requests, run) for c, run in result["runs"].items()]
    rows.append((max(args.concurrency), f"{args.duration:.0f} s", result["timed"]))
    for concurrency, amount, run in rows:
        print(f"{concurrency:>11} {amount:>9} {run['p50_ms']:8.2f} {run['p99_ms']:8.2f} "
              f"{run['req_per_s']:7.0f} {run['req_per_s'] * args.images:9.0f} "
              f"{run['server_cpu_ms']:18.2f} "
              f"{run['p50_ms'] / forward:11.1f}x")  # fmt: skip
    start, end = result["rss_mib"]
    print(f"server RSS over the {args.duration:.0f} s run: {start:.0f} -> {end:.0f} MiB "
          f"({end - start:+.1f})")  # fmt: skip


def main() -> None:
    args, server_flags = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args, server_flags, Path(tmp))
    report(args, server_flags, result)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **result}, indent=2))


if __name__ == "__main__":
    main()
