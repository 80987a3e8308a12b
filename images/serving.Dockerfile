# syntax=docker/dockerfile:1
# The KServe predictor image (the InferenceService's kserve-container): `python -m serving`
# on a CPU build of torch. KServe mounts the model directory (STORAGE_URI) at /mnt/models.
#   docker build -f images/serving.Dockerfile -t ghcr.io/fmnist-pipeline/serving:0.1.0 .
#   docker run -p 8080:8080 -v "$PWD/model:/mnt/models:ro" ghcr.io/fmnist-pipeline/serving:0.1.0

# BASE and TORCH_INDEX let a machine without the upstream registry or PyTorch's index build
# the same image (the cluster tier: tools/controlplane/harness/images.py).
ARG BASE=python:3.11.11-slim-bookworm

# torch alone, in a stage of its own that components.Dockerfile and the CPU trainer's stage
# repeat line for line: built once, the layer is shared by every image.
# torch from PyTorch's CPU index (PyPI's default build carries several GB of CUDA libraries
# the predictor never uses), at the trainer image's version so models load the same way.
FROM ${BASE} AS torch
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir --disable-pip-version-check --index-url "${TORCH_INDEX}" \
        torch==2.9.0 torchvision==0.24.0

FROM torch
# A numeric non-root user (Kubernetes can only check runAsNonRoot against a numeric UID),
# in group 0 so that platforms that pick a random UID (OpenShift) can still use its home.
RUN useradd --uid 10001 --gid 0 --create-home --home-dir /home/fmnist fmnist

# Dependencies before sources: this layer is rebuilt only when pyproject.toml changes. The
# sources go to /src, which the install step removes again (the image keeps the installed
# package in /opt/venv only).
# kserve is pinned to the version the predictor is tested with (it subclasses its data plane).
COPY pyproject.toml README.md /src/
ARG KSERVE_VERSION=0.21.0
RUN cd /src && python -c "import tomllib; \
project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print(*project['dependencies'], *project['optional-dependencies']['serving'], sep='\n')" \
    > requirements.txt \
    && pip install --no-cache-dir --disable-pip-version-check -r requirements.txt \
        "kserve==${KSERVE_VERSION}"

# The predictor needs only trainer.model and trainer.data from the trainer package.
COPY trainer/ /src/trainer/
COPY serving/ /src/serving/
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps /src && rm -rf /src \
    && python -c "import kserve, PIL, torch, serving.predictor"

# The commit the image is built from, for `docker inspect` (the components image's report
# names its own): `make images` and the cluster tier pass the checkout's. Declared after
# every RUN and COPY, so that a new commit rebuilds no layer, only this one setting.
ARG GIT_COMMIT
ENV FMNIST_GIT_COMMIT="${GIT_COMMIT}"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001
WORKDIR /home/fmnist

# KServe's ports: REST (v1 and v2) and gRPC (v2).
EXPOSE 8080 8081
# The InferenceService passes --model_name and any other flags as container args.
ENTRYPOINT ["python", "-m", "serving"]
