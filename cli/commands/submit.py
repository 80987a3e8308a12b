"""``fmnist submit``: upload a pipeline version, start a run, optionally follow it."""

import argparse
import math
import time

from cli.errors import UsageError
from cli.flags import command_with_examples
from cli.server import add_server_flags, quiet, timestamp, ui_url
from cli.upload import add_pipeline_flags, plan_or_upload, require_text

WAIT_CHUNK_SECONDS = 5  # one round of the client's wait call (its own poll interval)
ENDED = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")  # a run's final states (v2beta1)

SUMMARY = "upload a pipeline version and start a run on Kubeflow"
DESCRIPTION = """\
Compile a pipeline in the variant the server runs (or take --package), upload it to
Kubeflow Pipelines as a new version of its pipeline (created on first upload), start a
run in --experiment with every parameter's value (--param over the defaults), and print
the run's URL. With --wait, follow the run to its end and exit non-zero unless it
succeeds. With --dry-run, check all of it (values, package, parameters) and print what
would be done, contacting nothing.
"""
EPILOG = """\
examples:
  kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80 &
  fmnist submit --host http://localhost:8080 --param epochs=5 --param workers=2
  fmnist submit --host https://kubeflow.example.com/pipeline --token-file ~/.kfp-token \\
      --namespace team-a --pipeline fashion-mnist-tune --param algorithm=grid \\
      --param lr_step=0.02 --experiment tuning
  fmnist submit --host http://localhost:8080 --package build/pipelines/fashion-mnist.yaml
  fmnist submit --host http://localhost:8080 --param epochs=5 --dry-run
"""


def register(subparsers) -> None:
    """Add ``fmnist submit``."""
    parser = command_with_examples(subparsers, "submit", SUMMARY, DESCRIPTION, EPILOG)
    add_server_flags(parser)
    add_pipeline_flags(parser)
    parser.add_argument("--run-name", help="the run's name (default: NAME <UTC timestamp>)")
    parser.add_argument(
        "--no-cache", action="store_true", help="run every step, ignoring cached results"
    )
    parser.add_argument(
        "--wait", action="store_true", help="follow the run, printing its state, until it ends"
    )
    parser.add_argument(
        "--timeout", type=float, default=24 * 3600, help="--wait: give up after this many seconds"
    )
    parser.set_defaults(handler=submit_command)


def submit_command(args: argparse.Namespace) -> int:
    """Upload, start the run, print its URL (``--dry-run``: say what would be done)."""
    require_text(args.run_name, "--run-name")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
    waiting = f", followed for up to {args.timeout:g} s" if args.wait else ""
    uploaded = plan_or_upload(
        args, lambda plan: f"run: {args.run_name or f'{plan.name} <UTC timestamp>'}{waiting}"
    )
    if uploaded is None:
        return 0
    with quiet(args.host):
        run = uploaded.client.run_pipeline(
            experiment_id=uploaded.experiment_id,
            job_name=args.run_name or f"{uploaded.name} {timestamp()}",
            params=uploaded.every_value,  # so the run's details and Compare show them all
            pipeline_id=uploaded.pipeline_id,
            version_id=uploaded.version_id,
            enable_caching=False if args.no_cache else None,
        )
    print(f"pipeline {uploaded.name}: version {uploaded.version_id}")
    print(f"run {run.run_id}: {ui_url(args.host, f'runs/details/{run.run_id}')}", flush=True)
    if not args.wait:
        return 0
    state = follow(uploaded.client, run.run_id, args.host, args.timeout)
    return 0 if state == "SUCCEEDED" else 1


def follow(client, run_id: str, host: str, timeout: float) -> str:
    """Follow the run to its end, printing each new state; return the last state.

    The client's own wait call returns once the run succeeded, failed, errored or was
    skipped; it never returns for a canceled run (kfp 2.17 ``Client.wait_for_run_completion``),
    so it waits in short rounds and the state is read between them.
    """
    deadline, state = time.monotonic() + timeout, None
    while True:
        left = deadline - time.monotonic()
        with quiet(host):
            try:
                run = client.wait_for_run_completion(run_id, timeout=min(WAIT_CHUNK_SECONDS, left))
                finished = True
            except TimeoutError:
                run, finished = client.get_run(run_id), False
        if run.state != state:
            state = run.state
            print(f"run {run_id}: {state}", flush=True)
        if finished or state in ENDED:
            return state
        if time.monotonic() >= deadline:
            print(f"run {run_id}: still {state} after {timeout:g} s; not waiting longer")
            return state
