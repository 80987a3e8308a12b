"""``python -m serving``: serve a model directory with KServe's own server flags.

    python -m serving --model_name fashion-mnist --model_dir /mnt/models --http_port 8080

All of KServe's flags (``--http_port``, ``--grpc_port``, ``--workers``, ...) work as in
any KServe model server, so the predictor starts here exactly as in the cluster, but for
two defaults: gRPC is off unless ``--enable_grpc=true``, and ``--http_host`` picks the
address the HTTP server listens on (KServe's is always 0.0.0.0). A bad flag
or a model directory that cannot be loaded is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from serving.defaults import DRAIN_SECONDS, MAX_BATCH_SIZE, MODEL_NAME, NUM_THREADS
from trainer.config import DEVICES, OneLineParser  # errors in one line: KServe's usage text is 25
from trainer.model_dir import SERVED

TRUE_WORDS = ("y", "yes", "t", "true", "on", "1")
FALSE_WORDS = ("n", "no", "f", "false", "off", "0")


def true_or_false(text: str) -> bool:
    """A boolean flag's value: the words KServe accepts for true and false."""
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def import_model_server():
    """KServe's ``model_server`` module, imported while ``sys.argv`` holds no flags.

    KServe parses ``sys.argv`` when the module is imported, and a bad value would stop
    the process there with its own 25-line usage text; main() parses the flags instead.
    """
    saved, sys.argv = sys.argv, sys.argv[:1]
    try:
        from kserve import model_server
    finally:
        sys.argv = saved
    return model_server


def build_parser(kserve_parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """KServe's server flags (booleans checked by name) plus the predictor's own."""
    for action in kserve_parser._actions:
        if isinstance(action.default, bool) and callable(action.type):
            action.type = true_or_false  # KServe's lambda says "invalid <lambda> value"
    parser = OneLineParser(
        prog="python -m serving",
        description="Serve a FashionMNIST model directory over KServe's v1 and v2 protocols.",
        parents=[kserve_parser],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    # No latency line per request unless asked for: it costs ~15 us of CPU a request, and
    # the same timings are in KServe's Prometheus histograms (/metrics).
    # gRPC off unless asked for: the InferenceService declares only the HTTP port.
    parser.set_defaults(model_name=MODEL_NAME, enable_latency_logging=False, enable_grpc=False)
    parser.add_argument(
        "--http_host",
        default="0.0.0.0",
        help="the address the HTTP server listens on (127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--model_dir",
        default=SERVED,
        help="the model directory; KServe mounts STORAGE_URI here",
    )
    parser.add_argument(
        "--max_batch_size",
        type=int,
        default=MAX_BATCH_SIZE,
        help="most images one request may carry; larger requests get a 400",
    )
    parser.add_argument(
        "--num_threads",
        type=int,
        default=NUM_THREADS,
        help="torch intra-op threads per server process",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the network runs; auto: CUDA when a GPU is visible, else the CPU",
    )
    parser.add_argument(
        "--drain_seconds",
        type=float,
        default=DRAIN_SECONDS,
        help="how long GET /drain (the pod's preStop hook) keeps answering before it returns",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Load the model, then serve until stopped; 2 with a one-line error if it cannot load."""
    model_server = import_model_server()
    parser = build_parser(model_server.parser)
    args = parser.parse_args(argv)
    from serving.predictor import FashionMNISTModel, ServingConfig
    from serving.server import build_server

    if not 0 <= args.drain_seconds <= 3600:
        parser.error(f"--drain_seconds must be in 0..3600, got {args.drain_seconds:g}")
    try:
        config = ServingConfig(args.model_dir, args.max_batch_size, args.num_threads, args.device)
        model = FashionMNISTModel(args.model_name, config)
        model.load()
    except ValueError as exc:  # a bad setting, an unloadable model dir, cuda without a GPU
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    model_server.args = args  # ModelServer reads --configure_logging and others from here
    build_server(args).start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
