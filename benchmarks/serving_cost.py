"""Cost per prediction: a baseline commit's predictor and the current one, side by side.

    python -m benchmarks.serving_cost [--baseline-rev d15ba85] [--rounds 5] [--scale 1.0]
        [--model-dir DIR] [--json FILE] [python -m serving flags, given to both]

Extracts the baseline's ``serving`` and ``trainer`` packages with ``git archive``, starts
both predictors (``python -m serving``, run from the extracted tree and from this one),
and runs every scenario on each in turn, alternating which goes first, for ``--rounds``
rounds, so that load from other work on the machine falls on both alike. Each figure is
the median over the rounds: the server's CPU time per request (the sum of its threads'
run time, ``/proc/<pid>/task/*/schedstat``), p50 latency, and images/s. It also times the
forward pass in-process (the trained LeNet as the baseline ran it, and the predictor's
network now) and checks that both servers give the same answers.

Without ``--model-dir`` an untrained network is served: the cost does not depend on the
weights. Targets (issue 32), on the 2-core development machine: server CPU <= 0.4 ms per
request at concurrency 8 on v1 and v2, p50 <= 0.6 ms at concurrency 1, one image each.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.serving_latency import PATHS, request_bodies, untrained_model_dir
from components.runtime.local_predictor import stop
from components.runtime.ports import free_port
from serving.loader import load_served_model
from serving.predictor import FashionMNISTModel, ServingConfig
from trainer.model import normalize

REPO = Path(__file__).resolve().parents[1]
BASELINE_REV = "d15ba85"  # the predictor before issue 32's work on the cost per prediction
MODEL_NAME = "fashion-mnist"
READY_SECONDS = 120.0


@dataclass(frozen=True)
class Scenario:
    """One measurement: ``requests`` requests of ``images`` images from ``concurrency`` clients."""

    protocol: str
    images: int
    concurrency: int
    requests: int

    @property
    def name(self) -> str:
        """How the report names it."""
        return f"{self.protocol}, {self.images} image(s), concurrency {self.concurrency}"


SCENARIOS = (
    Scenario("v1", 1, 8, 1600),
    Scenario("v2", 1, 8, 1600),
    Scenario("v1", 1, 1, 600),
    Scenario("v2", 1, 1, 600),
    Scenario("v1", 64, 8, 64),
    Scenario("v2", 64, 8, 64),
)


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision to compare")
    parser.add_argument("--model-dir", help="model directory (default: an untrained network)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every request count")
    parser.add_argument("--json", help="also write the results to this file")
    return parser.parse_known_args()  # the rest goes to both `python -m serving`


def extract(rev: str, into: Path) -> Path:
    """The ``serving`` and ``trainer`` packages of ``rev``, written under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "serving", "trainer"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


@contextlib.contextmanager
def predictor(code_dir: Path, model_dir: Path, log: Path, flags: list[str]):
    """``python -m serving`` of the packages in ``code_dir``; yields (pid, port) once ready."""
    port = free_port()
    command = [sys.executable, "-m", "serving", f"--model_name={MODEL_NAME}",
               f"--model_dir={model_dir}", f"--http_port={port}", "--enable_grpc=false",
               *flags]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    with log.open("w") as output:
        # The working directory comes first on sys.path: it picks the packages served.
        server = subprocess.Popen(command, cwd=code_dir, env=env, stdout=output, stderr=output)
        try:
            wait_ready(server, port, log)
            yield server.pid, port
        finally:
            stop(server)


def wait_ready(server: subprocess.Popen, port: int, log: Path) -> None:
    """Return once the model answers ready; raise if the server exits or takes too long."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the predictor exited:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError, RuntimeError), Connection(port) as connection:
            if connection.get(f"/v2/models/{MODEL_NAME}/ready")[0] == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the predictor was not ready within {READY_SECONDS:.0f} s")


class Connection:
    """A persistent HTTP/1.1 connection with the least client-side work per request.

    Requests are pre-encoded bytes and answers are read by their Content-Length, so the
    latency measured is mostly the server's (``http.client`` adds ~0.1 ms).
    """

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.sock.close()

    def get(self, path: str) -> tuple[int, bytes]:
        """A GET request's status and body."""
        return self.send(f"GET {path} HTTP/1.1\r\nhost: bench\r\n\r\n".encode())

    def send(self, request: bytes) -> tuple[int, bytes]:
        """Send one pre-encoded request; the status and body of the answer."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self.receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(fields["content-length"])
        while len(self.buffer) < length:
            self.receive()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), body

    def receive(self) -> None:
        """Read what the server has sent so far into the buffer."""
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        self.buffer += chunk


def post(path: str, body: bytes) -> bytes:
    """A POST request as bytes on the wire."""
    head = (f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


def cpu_seconds(pid: int) -> float:
    """CPU time of all the server's threads, in seconds (nanosecond resolution)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError):
            total += int(stat.read_text().split()[0])
    return total / 1e9


def client(port: int, requests: list[bytes], count: int, latencies: list[float]) -> None:
    """Send ``count`` requests on one connection, one at a time; record each one's latency."""
    with Connection(port) as connection:
        for sent in range(count):
            start = time.perf_counter()
            status, body = connection.send(requests[sent % len(requests)])
            latencies.append(time.perf_counter() - start)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {body[:200]!r}")


def measure(pid: int, port: int, scenario: Scenario, count: int) -> dict:
    """Run one scenario on one server: CPU ms per request, p50 latency, images/s."""
    path = PATHS[scenario.protocol]
    requests = [post(path, body) for body in request_bodies(scenario.protocol, scenario.images)]
    per_client = max(1, count // scenario.concurrency)
    latencies: list[float] = []
    threads = [
        threading.Thread(target=client, args=(port, requests, per_client, latencies))
        for _ in range(scenario.concurrency)
    ]
    cpu_start, start = cpu_seconds(pid), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_start
    if len(latencies) != per_client * scenario.concurrency:
        raise RuntimeError(f"{scenario.name}: a client failed")
    return {
        "server_cpu_ms": cpu / len(latencies) * 1e3,
        "p50_ms": statistics.median(latencies) * 1e3,
        "images_per_s": len(latencies) * scenario.images / wall,
    }


def run_rounds(servers: dict, rounds: int, scale: float) -> dict:
    """Every scenario on every server, alternating the order each round; the median figures."""
    runs = {name: {s.name: [] for s in SCENARIOS} for name in servers}
    for round_index in range(rounds):
        order = list(servers) if round_index % 2 == 0 else list(servers)[::-1]
        for scenario in SCENARIOS:
            for name in order:
                count = max(scenario.concurrency, round(scenario.requests * scale))
                runs[name][scenario.name].append(measure(*servers[name], scenario, count))
    return {
        name: {
            scenario: {key: statistics.median(run[key] for run in results) for key in results[0]}
            for scenario, results in by_scenario.items()
        }
        for name, by_scenario in runs.items()
    }


def answers(port: int) -> np.ndarray:
    """The probabilities each protocol's server answers for the same 8 images, [2, 8, 10]."""
    got = []
    for protocol in ("v1", "v2"):
        body = request_bodies(protocol, images=8, count=1)[0]
        with Connection(port) as connection:
            status, answer = connection.send(post(PATHS[protocol], body))
        assert status == 200, answer
        answer = json.loads(answer)
        if protocol == "v1":
            got.append([p["probabilities"] for p in answer["predictions"]])
        else:
            (probabilities,) = (o for o in answer["outputs"] if o["name"] == "probabilities")
            got.append(np.reshape(probabilities["data"], (8, 10)))
    return np.array(got)


def forward_us(model_dir: Path, images: int, rounds: int = 7) -> dict:
    """In-process cost of one forward pass: LeNet as trained (the baseline) and as served now.

    Each includes what ``probabilities()`` adds (normalising, ``exp``, the copy to numpy),
    both with the predictor's torch settings (``load()``: one thread, oneDNN off).
    """
    model = FashionMNISTModel(MODEL_NAME, ServingConfig(str(model_dir), device="cpu"))
    model.load()
    trained, card = load_served_model(model_dir)

    def as_trained(pixels: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            pixels = torch.from_numpy(pixels).to("cpu")
            inputs = normalize(pixels, card.pixel_mean, card.pixel_std)
            return trained(inputs).exp().cpu().numpy()

    pixels = np.random.default_rng(0).integers(0, 256, (images, 28, 28)).astype(np.float32)
    forms = {"baseline": as_trained, "current": model.probabilities}
    repeats = max(10, 2000 // images)
    times = {name: [] for name in forms}
    for _ in range(rounds):
        for name, form in forms.items():
            start = time.process_time()
            for _ in range(repeats):
                form(pixels)
            times[name].append((time.process_time() - start) / repeats * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


FIGURES = (  # (label, scenario, figure, the most it may be (issue 32) or None)
    ("server CPU ms/request, v1, concurrency 8", SCENARIOS[0], "server_cpu_ms", 0.4),
    ("server CPU ms/request, v2, concurrency 8", SCENARIOS[1], "server_cpu_ms", 0.4),
    ("p50 ms, v1, concurrency 1", SCENARIOS[2], "p50_ms", 0.6),
    ("p50 ms, v2, concurrency 1", SCENARIOS[3], "p50_ms", 0.6),
    ("server CPU ms/request, v1, concurrency 1", SCENARIOS[2], "server_cpu_ms", None),
    ("server CPU ms/request, v2, concurrency 1", SCENARIOS[3], "server_cpu_ms", None),
    ("images/s, v1, 64-image requests, concurrency 8", SCENARIOS[4], "images_per_s", None),
    ("images/s, v2, 64-image requests, concurrency 8", SCENARIOS[5], "images_per_s", None),
    ("server CPU ms/request, v1, 64 images", SCENARIOS[4], "server_cpu_ms", None),
    ("server CPU ms/request, v2, 64 images", SCENARIOS[5], "server_cpu_ms", None),
)


def report(args, flags: list[str], result: dict) -> None:
    print(f"baseline {args.baseline_rev} vs the working tree; {args.rounds} alternating rounds; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"server flags: {' '.join(flags) or 'none'}")  # fmt: skip
    print(f"{'figure':48} {'baseline':>9} {'current':>9} {'ratio':>6}  target")
    baseline, current = result["servers"]["baseline"], result["servers"]["current"]
    for label, scenario, key, target in FIGURES:
        before, after = baseline[scenario.name][key], current[scenario.name][key]
        verdict = "" if target is None else f"<= {target}: {'met' if after <= target else 'missed'}"
        print(f"{label:48} {before:9.3f} {after:9.3f} {after / before:6.2f}  {verdict}")
    for images, forward in result["forward_us"].items():
        before, after = forward["baseline"], forward["current"]
        print(f"{f'forward pass in-process, {images} image(s), us':48} "
              f"{before:9.1f} {after:9.1f} {after / before:6.2f}")  # fmt: skip
    print(f"answers: max |current - baseline| = {result['answer_difference']:.2e}")


def main() -> None:
    args, flags = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = Path(args.model_dir or untrained_model_dir(tmp / "model"))
        trees = {"baseline": extract(args.baseline_rev, tmp / "baseline"), "current": REPO}
        with contextlib.ExitStack() as stack:
            servers = {
                name: stack.enter_context(predictor(tree, model_dir, tmp / f"{name}.log", flags))
                for name, tree in trees.items()
            }
            difference = np.abs(answers(servers["current"][1]) - answers(servers["baseline"][1]))
            for pid, port in servers.values():  # warm-up
                measure(pid, port, Scenario("v1", 1, 2, 200), 200)
                measure(pid, port, Scenario("v2", 1, 2, 200), 200)
            figures = run_rounds(servers, args.rounds, args.scale)
        forward = {images: forward_us(model_dir, images) for images in (1, 64)}
    result = {
        "servers": figures,
        "forward_us": forward,
        "answer_difference": float(difference.max()),
    }
    report(args, flags, result)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **result}, indent=2))


if __name__ == "__main__":
    main()
