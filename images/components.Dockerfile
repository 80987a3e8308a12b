# syntax=docker/dockerfile:1
# The KFP step image: this package with its component dependencies (kfp, kubernetes) and a
# CPU build of torch for the steps that read data and models.
#   docker build -f images/components.Dockerfile -t ghcr.io/fmnist-pipeline/components:0.1.0 .
# Add the serving extra (only `fmnist run`'s local deploy needs it, never a cluster step) with
#   --build-arg EXTRAS=components,serving

# BASE and TORCH_INDEX let a machine without the upstream registry or PyTorch's index build
# the same image (the cluster tier: tools/controlplane/harness/images.py).
ARG BASE=python:3.11.11-slim-bookworm

# torch alone, in a stage of its own that serving.Dockerfile and the CPU trainer's stage
# repeat line for line: built once, the layer is shared by every image.
# torch from PyTorch's CPU index (PyPI's default build carries several GB of CUDA libraries
# no step uses), at the trainer image's version so that models load the same way in both.
FROM ${BASE} AS torch
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir --disable-pip-version-check --index-url "${TORCH_INDEX}" \
        torch==2.9.0 torchvision==0.24.0

FROM torch
# The raw FashionMNIST files from Debian (/usr/share/datasets/fashion-mnist, 30 MB; the pack
# step verifies their checksums), so that no step downloads data from inside the cluster.
# `apt-get clean` drops apt's package caches (/var/cache/apt/*.bin, 110 MB) on a base that
# keeps them: a plain Debian one (python:*-slim's config has apt write none).
RUN apt-get update \
    && apt-get install -y --no-install-recommends dataset-fashion-mnist=0.0~git20200523.55506a9-1 \
    && apt-get clean && rm -rf /var/lib/apt/lists/*

# A numeric non-root user in group 0 (see trainer.Dockerfile). The KFP launcher downloads
# input artifacts to /gcs, /minio and /s3 at the filesystem root, which a non-root user
# cannot create: make them now, writable by group 0.
RUN useradd --uid 10001 --gid 0 --create-home --home-dir /home/fmnist fmnist \
    && mkdir -p /gcs /minio /s3 \
    && chown 10001:0 /gcs /minio /s3 \
    && chmod 0775 /gcs /minio /s3

# Dependencies before sources: this layer is rebuilt only when pyproject.toml changes. The
# sources go to /src, which the install step removes again (the image keeps the installed
# package in /opt/venv only).
COPY pyproject.toml README.md /src/
ARG EXTRAS=components
RUN cd /src && python -c "import sys, tomllib; \
project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = [name for name in sys.argv[1].split(',') if name]; \
print(*project['dependencies'], *(d for e in extras for d in project['optional-dependencies'][e]), sep='\n')" \
    "${EXTRAS}" > requirements.txt \
    && pip install --no-cache-dir --disable-pip-version-check -r requirements.txt

COPY trainer/ /src/trainer/
COPY serving/ /src/serving/
COPY components/ /src/components/
COPY pipelines/ /src/pipelines/
COPY cli/ /src/cli/
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /src && rm -rf /src \
    && python -c "import components, kfp, kubernetes, torch, trainer"

# The commit the image is built from, which the evaluation report names
# (components/runtime/commit.py): `make images` and the cluster tier pass the checkout's.
# Declared after every RUN and COPY, so that a new commit rebuilds no layer (torch's least
# of all), only this one setting.
ARG GIT_COMMIT
ENV FMNIST_GIT_COMMIT="${GIT_COMMIT}"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

USER 10001
WORKDIR /home/fmnist
# KFP sets each step's command (python -m kfp.dsl.executor_main ...); this default only
# answers `docker run IMAGE`.
CMD ["python", "-m", "cli", "--help"]
