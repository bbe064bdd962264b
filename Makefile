# autotune: the two everyday commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
# Extra pip arguments for torch, e.g. TORCH_INDEX="--extra-index-url https://download.pytorch.org/whl/cpu"
TORCH_INDEX ?=

# A machine with an NVIDIA driver gets the CUDA builds; any other gets the CPU build of
# torch (the +cpu local version never resolves to a multi-GB CUDA wheel).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
EXTRA := $(if $(HAS_GPU),gpu,cpu)
TORCH_SPEC := $(if $(HAS_GPU),torch==$(TORCH_VERSION),torch==$(TORCH_VERSION)+cpu)

.PHONY: setup demo test test-all lint mlflow-ui clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRA),hf,dev]"
	touch $@

demo: setup
	$(BIN)/autotune tune experiments/digits/request.yaml

test: setup
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check autotune workers tests experiments
	$(BIN)/ruff format --check autotune workers tests experiments
	$(BIN)/lint-imports
	$(BIN)/mypy autotune workers

mlflow-ui: setup
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db

clean:
	rm -rf autotune-out mlflow.db mlruns autotune.db autotune.db.lock autotune.db.schema.lock autotune-service.db autotune-service.db.lock autotune-service.db.schema.lock autotune-data
