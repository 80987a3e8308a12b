# syntax=docker/dockerfile:1
# The PyTorchJob image: the `trainer` package on torch, in two variants, one build argument:
#   TORCH=cuda, on PyTorch's CUDA runtime image, for the jobs that request GPUs:
#     docker build -f images/trainer.Dockerfile --build-arg TORCH=cuda \
#       -t ghcr.io/fmnist-pipeline/trainer:0.1.0 .
#   TORCH=cpu, on Python with torch's CPU wheels (no CUDA libraries), for the jobs that
#   request none:
#     docker build -f images/trainer.Dockerfile --build-arg TORCH=cpu \
#       -t ghcr.io/fmnist-pipeline/trainer:0.1.0-cpu .
# The pipeline's `trainer_image` and `trainer_cpu_image` parameters name the two; a job runs
# on the first when `gpus_per_worker` > 0, else on the second. Spell TORCH out: buildah 1.28
# (Debian 12's podman) skips a stage that the final FROM names only through a default.
#
# CUDA/torch pitfall: a torch build only runs on GPUs and drivers its CUDA version supports.
# An old base (torch 1.0 + CUDA 10) on a CUDA 12 host with a newer GPU never gets a usable
# device, and the job hangs or crawls instead of failing. So:
#   * the base tag pins torch AND the CUDA runtime it was built with, together (2.9.0 / 12.8);
#   * the node's driver must support that CUDA: `nvidia-smi` on the node must report
#     "CUDA Version" 12.8 or newer (driver R570+; R525+ works through CUDA minor-version
#     compatibility);
#   * never `pip install torch` on top of this image: pip would swap the CUDA build for
#     whatever PyPI serves. The trainer needs nothing the base does not have (torch,
#     torchvision, numpy), so the package is copied, not pip-installed.
# The build fails below if the base ever stops matching. BASE, CPU_BASE and TORCH_INDEX let a
# machine that cannot pull them build on stand-ins with the same torch, user and layout (the
# cluster tier's, made by tools/controlplane/harness/images.py).
ARG TORCH=cuda
ARG BASE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime
ARG CPU_BASE=python:3.11.11-slim-bookworm

FROM ${BASE} AS cuda
RUN python -c "import numpy, torch, torchvision; \
assert torch.__version__.startswith('2.9.0'), torch.__version__; \
assert torch.version.cuda == '12.8', torch.version.cuda"

# torch alone, the lines of the `torch` stage of serving.Dockerfile and components.Dockerfile:
# built once, the layer is shared by the three CPU images.
FROM ${CPU_BASE} AS cpu
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir --disable-pip-version-check --index-url "${TORCH_INDEX}" \
        torch==2.9.0 torchvision==0.24.0

FROM ${TORCH}

# A numeric non-root user (Kubernetes can only check runAsNonRoot against a numeric UID),
# in group 0 so that platforms that pick a random UID (OpenShift) can still use its home.
RUN useradd --uid 10001 --gid 0 --create-home --home-dir /home/fmnist fmnist

# A pod that asks for no GPU must see none. The base image sets NVIDIA_VISIBLE_DEVICES=all,
# which on nodes whose default runtime is NVIDIA's hands every GPU to every pod of this image:
# a CPU-only job would train on CUDA, two ranks on one card. The device plugin sets the
# variable for pods that request nvidia.com/gpu (and `docker run --gpus` does), overriding this.
ENV NVIDIA_VISIBLE_DEVICES=void \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/opt/fmnist
WORKDIR /opt/fmnist
COPY trainer/ trainer/

# The commit the image is built from, for `docker inspect` (the components image's report
# names its own): `make images` and the cluster tier pass the checkout's. Declared after
# every RUN and COPY, so that a new commit rebuilds no layer, only this one setting.
ARG GIT_COMMIT
ENV FMNIST_GIT_COMMIT="${GIT_COMMIT}"

USER 10001
WORKDIR /home/fmnist
# The pipeline's PyTorchJob sets its own command (`torchrun -m trainer ...`, sized by the PET_*
# variables the Training Operator sets); this entry point is for `docker run IMAGE --epochs 1`.
ENTRYPOINT ["torchrun", "--standalone", "--nproc-per-node=1", "-m", "trainer"]
CMD ["--help"]
