# syntax=docker/dockerfile:1
# The KServe predictor image (the InferenceService's kserve-container): `python -m serving`
# on a CPU build of torch. KServe mounts the model directory (STORAGE_URI) at /mnt/models.
#   docker build -f images/serving.Dockerfile -t ghcr.io/fmnist-pipeline/serving:0.1.0 .
#   docker run -p 8080:8080 -v "$PWD/model:/mnt/models:ro" ghcr.io/fmnist-pipeline/serving:0.1.0

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# torch from PyTorch's CPU index (PyPI's default build carries several GB of CUDA libraries
# the predictor never uses), at the trainer image's version so models load the same way.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.9.0 torchvision==0.24.0

# Dependencies before sources: this layer is rebuilt only when pyproject.toml changes.
# kserve is pinned to the version the predictor is tested with (it subclasses its data plane).
WORKDIR /src
COPY pyproject.toml README.md ./
ARG KSERVE_VERSION=0.21.0
RUN python -c "import tomllib; \
project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print(*project['dependencies'], *project['optional-dependencies']['serving'], sep='\n')" \
    > requirements.txt \
    && pip install -r requirements.txt "kserve==${KSERVE_VERSION}"

# The predictor needs only trainer.model and trainer.data from the trainer package.
COPY trainer/ trainer/
COPY serving/ serving/
RUN pip install --no-deps . && python -c "import kserve, PIL, torch, serving.predictor"


FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# A numeric non-root user (Kubernetes can only check runAsNonRoot against a numeric UID),
# in group 0 so that platforms that pick a random UID (OpenShift) can still use its home.
RUN useradd --uid 10001 --gid 0 --create-home --home-dir /home/fmnist fmnist
USER 10001
WORKDIR /home/fmnist

# KServe's ports: REST (v1 and v2) and gRPC (v2).
EXPOSE 8080 8081
# The InferenceService passes --model_name and any other flags as container args.
ENTRYPOINT ["python", "-m", "serving"]
