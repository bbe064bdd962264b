# syntax=docker/dockerfile:1
# The GPU worker image: a Ray node that runs trials on NVIDIA GPUs, with CUDA torch,
# onnxruntime-gpu, NVML and torchao (the project's `gpu` extra). It is also where the
# hardware is known: the control plane places a probe on each worker node (workers.building.probe),
# and the space (fp16, fp8, CUDA graphs, TensorRT, sharding), the trial slots and the tuned
# file's hardware come from what this node reports, never from the control plane's machine.
#
#   docker build -f docker/gpu-worker.Dockerfile -t autotune-gpu-worker .
#
# The base is NVIDIA's CUDA runtime with cuDNN, which ONNX Runtime's CUDA provider loads;
# torch brings its own CUDA libraries. The host needs the NVIDIA driver and the NVIDIA
# Container Toolkit. Ray refuses a node whose Python differs from the head's even by a
# patch release, so the interpreter is copied from the very PYTHON_IMAGE the control-plane
# image is built on (keep the two defaults equal), and both install docker/constraints.txt.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

FROM ${PYTHON_IMAGE} AS python

FROM ${CUDA_IMAGE}

ARG TORCH_VERSION=2.13.0
# Empty: the CUDA build of torch from the default index. To choose the CUDA release, give
# PyTorch's index for it, e.g. --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG TORCH_INDEX_URL=

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    MLFLOW_DISABLE_TELEMETRY=true \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# The shared libraries the official Python build links against (Ubuntu 24.04 names).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates libbz2-1.0 libdb5.3t64 libexpat1 libffi8 libgdbm6t64 liblzma5 \
        libncursesw6 libreadline8t64 libsqlite3-0 libssl3t64 libuuid1 zlib1g \
    && rm -rf /var/lib/apt/lists/*
COPY --from=python /usr/local/bin/ /usr/local/bin/
COPY --from=python /usr/local/lib/ /usr/local/lib/
COPY --from=python /usr/local/include/ /usr/local/include/
RUN ldconfig \
    && python3 -c "import bz2, ctypes, lzma, sqlite3, ssl, uuid, sys; print(sys.version)"

RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}"

WORKDIR /app
# The dependencies first, from the project's metadata alone (a layer that source changes
# leave cached): the `gpu` extra brings onnxruntime-gpu (never next to the CPU onnxruntime,
# both install the same module), nvidia-ml-py for NVML energy and torchao for fp8.
COPY pyproject.toml README.md /app/
COPY docker/constraints.txt /app/docker/constraints.txt
RUN pip install -c docker/constraints.txt ".[gpu,hf]" "torch==${TORCH_VERSION}" \
    && python -c "import torch; assert torch.version.cuda, 'torch has no CUDA'" \
    && python -c "import onnxruntime; assert onnxruntime.get_device() == 'GPU'"
COPY . /app
RUN pip install --no-deps --force-reinstall . && python -c "import workers.actor"

# The same unprivileged user (and uid) as the control-plane image: the autotune-data volume,
# where trials write the optimized models, is shared with the runner and the API.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin autotune \
    && mkdir -p /var/lib/autotune /app/experiments/digits/.cache \
    && chown -R autotune:autotune /var/lib/autotune /app/experiments/digits/.cache
ENV PYTHONPATH=/app
USER autotune

CMD ["ray", "start", "--help"]
