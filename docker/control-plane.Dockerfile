# syntax=docker/dockerfile:1
# The control-plane image: the API, the job runner and scheduler, the Ray head and the MLflow
# server. CPU only: torch is the CPU wheel from PyTorch's CPU index, so no CUDA library is
# ever downloaded, and ONNX Runtime is the CPU build (the project's `cpu` extra). It needs no
# GPU to tune for GPUs: the spaces are the GPU workers', which probe themselves.
#
#   docker build -f docker/control-plane.Dockerfile -t autotune-control-plane .
#
# Ray refuses a node whose Python or Ray version differs from the head's, even by a patch
# release: docker/gpu-worker.Dockerfile takes its interpreter from the same PYTHON_IMAGE,
# and both images install docker/constraints.txt.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    MLFLOW_DISABLE_TELEMETRY=true

# The CPU wheel first, from the CPU index only: the project's `torch` requirement is then
# already met and pip never looks for (or pulls) a CUDA build.
RUN pip install --index-url "${TORCH_CPU_INDEX}" "torch==${TORCH_VERSION}+cpu"

WORKDIR /app
# The dependencies first, from the project's metadata alone (a layer that source changes
# leave cached): the project with its CPU extra, and MLflow's `auth` extra for the
# basic-auth server. Then the project itself.
COPY pyproject.toml README.md /app/
COPY docker/constraints.txt /app/docker/constraints.txt
RUN pip install -c docker/constraints.txt ".[cpu,hf]" "torch==${TORCH_VERSION}+cpu" "mlflow[auth]" \
    && python -c "import torch; assert not torch.version.cuda, torch.version.cuda"
COPY . /app
RUN pip install --no-deps --force-reinstall . && autotune --help > /dev/null

# An unprivileged user owns only what the services write: the data volumes and the digits
# example's cache of trained weights. `experiments` (trusted entry points) is importable
# from /app.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin autotune \
    && mkdir -p /var/lib/autotune /var/lib/mlflow/artifacts /app/experiments/digits/.cache \
    && chown -R autotune:autotune /var/lib/autotune /var/lib/mlflow /app/experiments/digits/.cache
ENV PYTHONPATH=/app
USER autotune

EXPOSE 8000
CMD ["autotune", "serve", "--help"]
