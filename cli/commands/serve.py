"""``fmnist serve``: serve a trained model here with the real KServe predictor.

    fmnist serve                     # the model of runs/latest
    fmnist serve runs/20261201-094241 --port 8081
    fmnist serve path/to/model-dir   # any directory with model.pt and model.json

The predictor is ``python -m serving``, as in the cluster's InferenceService; its log goes
to this terminal. Ctrl-C (or SIGTERM) stops it and exits 0.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from cli.errors import UsageError
from trainer.model_dir import FILES, is_model_dir

DEFAULT_RUN_DIR = Path("runs") / "latest"
DEFAULT_PORT = 8080  # KServe's
RUN_MODEL_GLOB = "outputs/*/train/model"  # where a run of `fmnist run` keeps its model


def register(subparsers) -> None:
    """Add ``fmnist serve``."""
    parser = subparsers.add_parser(
        "serve",
        help="serve a trained model here (the KServe predictor, python -m serving)",
        description="Serve the model of an `fmnist run` (or a model directory) over HTTP "
        "with the KServe predictor, until Ctrl-C.",
    )
    parser.add_argument(
        "run_dir",
        nargs="?",
        type=Path,
        default=DEFAULT_RUN_DIR,
        metavar="RUN_DIR",
        help=f"a run directory of `fmnist run`, or a model directory (default: {DEFAULT_RUN_DIR})",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="HTTP port (default: %(default)s)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; 0.0.0.0 lets other machines call it (default: %(default)s)",
    )
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    """Check the model, start the predictor, print where it answers, wait for Ctrl-C."""
    from components.runtime.local_predictor import PredictorError, running_predictor
    from components.runtime.signals import terminate_on_sigterm
    from serving.defaults import MODEL_NAME
    from serving.loader import ModelDirError, load_served_model

    model_dir = find_model_dir(args.run_dir)
    check_port(args.host, args.port)
    try:
        _, card = load_served_model(model_dir)
    except ModelDirError as exc:
        raise UsageError(str(exc)) from exc
    try:
        with (
            terminate_on_sigterm(),
            running_predictor(model_dir, sys.stderr, port=args.port, host=args.host) as predictor,
        ):
            print(startup_line(model_dir, card.metrics, predictor.url, MODEL_NAME), flush=True)
            predictor.process.wait()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        print("fmnist serve: stopped", flush=True)
        return 0
    except PredictorError as exc:
        print(f"fmnist serve: error: {exc} (its log is above)", file=sys.stderr)
        return 1
    print(f"fmnist serve: the predictor exited with code {predictor.process.returncode}")
    return 1


def find_model_dir(path: Path) -> Path:
    """The model directory ``path`` is, or the one of the run directory ``path``."""
    if not path.exists():
        hint = " (make one with `fmnist run`)" if path == DEFAULT_RUN_DIR else ""
        raise UsageError(f"{path}: no such run or model directory{hint}")
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory (give a run or model directory)")
    if is_model_dir(path):
        return path
    models = sorted(path.glob(RUN_MODEL_GLOB), key=lambda each: each.stat().st_mtime)
    if not models:
        raise UsageError(
            f"{path}: neither a model directory ({', '.join(FILES)}) nor a run directory "
            f"with a trained model ({RUN_MODEL_GLOB})"
        )
    return models[-1]


def check_port(host: str, port: int) -> None:
    """Refuse a port outside 1..65535, or a host and port this machine cannot listen on."""
    if not 1 <= port <= 65535:
        raise UsageError(f"--port must be 1..65535, got {port}")
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except (OSError, UnicodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(
                f"--host {host} --port {port}: cannot listen there ({reason})"
            ) from None


def startup_line(model_dir: Path, metrics: dict, url: str, model_name: str) -> str:
    """What is served, how good it is, and where to send requests."""
    accuracy = metrics.get("accuracy")
    quality = f"test accuracy {accuracy:.4f}" if accuracy is not None else "accuracy unknown"
    return (
        f"fmnist serve: {model_name} from {model_dir} ({quality}) at {url}\n"
        f"  v1: POST {url}/v1/models/{model_name}:predict   "
        f"v2: POST {url}/v2/models/{model_name}/infer   Ctrl-C stops it"
    )
