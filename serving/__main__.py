"""``python -m serving``: serve a model directory with KServe's own server flags.

    python -m serving --model_name fashion-mnist --model_dir /mnt/models --http_port 8080

All of KServe's flags (``--http_port``, ``--grpc_port``, ``--workers``, ...) work as in
any KServe model server, so the predictor starts here exactly as in the cluster.
"""

from __future__ import annotations

import argparse
import sys

from kserve import model_server

from serving.defaults import MODEL_NAME
from serving.predictor import DEFAULT_MODEL_DIR, DEVICES, FashionMNISTModel, ServingConfig
from serving.server import build_server

DEFAULT_MODEL_NAME = MODEL_NAME


def build_parser() -> argparse.ArgumentParser:
    """KServe's server flags plus the predictor's own."""
    parser = argparse.ArgumentParser(
        prog="python -m serving",
        description="Serve a FashionMNIST model directory over KServe's v1 and v2 protocols.",
        parents=[model_server.parser],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.set_defaults(model_name=DEFAULT_MODEL_NAME)
    parser.add_argument(
        "--model_dir",
        default=DEFAULT_MODEL_DIR,
        help="model directory (model.pt + model.json); KServe mounts STORAGE_URI here",
    )
    parser.add_argument(
        "--max_batch_size",
        type=int,
        default=ServingConfig.max_batch_size,
        help="most images one request may carry; larger requests get a 400",
    )
    parser.add_argument(
        "--num_threads",
        type=int,
        default=ServingConfig.num_threads,
        help="torch intra-op threads per server process",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=ServingConfig.device,
        help="where the network runs; auto: CUDA when a GPU is visible, else the CPU",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Load the model, then serve until stopped; 1 with a one-line error if it cannot load."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = ServingConfig(args.model_dir, args.max_batch_size, args.num_threads, args.device)
    except ValueError as exc:
        parser.error(str(exc))
    model = FashionMNISTModel(args.model_name, config)
    try:
        model.load()
    except (FileNotFoundError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    build_server(args).start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
