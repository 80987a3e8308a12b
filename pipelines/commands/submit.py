"""``fmnist submit``: upload a pipeline version to Kubeflow Pipelines and start a run."""

import argparse

from pipelines.remote import add_pipeline_flags, add_server_flags, quiet, timestamp, ui_url

DESCRIPTION = """\
Compile a pipeline (or take --package), upload it to Kubeflow Pipelines as a new version
of its pipeline (created on first upload), start a run in --experiment with the --param
values, and print the run's URL.
"""
EPILOG = """\
examples:
  kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80 &
  fmnist submit --host http://localhost:8080 --param epochs=5 --param workers=2
  fmnist submit --host https://kubeflow.example.com/pipeline --token "$TOKEN" \\
      --namespace team-a --pipeline fashion-mnist-tune --param algorithm=grid \\
      --param lr_step=0.02 --experiment tuning
  fmnist submit --host http://localhost:8080 --package build/pipelines/fashion-mnist.yaml
"""


def register(subparsers) -> None:
    """Add ``fmnist submit``."""
    parser = subparsers.add_parser(
        "submit",
        help="upload a pipeline version and start a run on Kubeflow",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_flags(parser)
    add_pipeline_flags(parser)
    parser.add_argument("--run-name", help="the run's name (default: NAME <UTC timestamp>)")
    parser.add_argument(
        "--no-cache", action="store_true", help="run every step, ignoring cached results"
    )
    parser.set_defaults(handler=submit_command)


def submit_command(args: argparse.Namespace) -> int:
    """Upload, start the run, print its URL."""
    from pipelines.remote import upload_from_args

    uploaded = upload_from_args(args)
    with quiet(args.host):
        run = uploaded.client.run_pipeline(
            experiment_id=uploaded.experiment_id,
            job_name=args.run_name or f"{uploaded.name} {timestamp()}",
            params=uploaded.params,
            pipeline_id=uploaded.pipeline_id,
            version_id=uploaded.version_id,
            enable_caching=False if args.no_cache else None,
        )
    print(f"pipeline {uploaded.name}: version {uploaded.version_id}")
    print(f"run {run.run_id}: {ui_url(args.host, f'runs/details/{run.run_id}')}")
    return 0
