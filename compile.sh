#!/usr/bin/env bash
# Compile every pipeline to build/pipelines/<name>.yaml (see `fmnist compile --help`).
#
# Images, each from its flag, else the environment, else ghcr.io/fmnist-pipeline/<runtime>:<version>:
#   --trainer-image IMAGE     or FMNIST_TRAINER_IMAGE      (the PyTorchJob pods)
#   --serving-image IMAGE     or FMNIST_SERVING_IMAGE      (the KServe predictor)
#   --components-image IMAGE  or FMNIST_COMPONENTS_IMAGE   (every pipeline step)
# Other flags (--out-dir DIR, pipeline names) are passed on to `fmnist compile`.
set -euo pipefail
cd "$(dirname "$0")"
python="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$python" -m cli compile "$@"
