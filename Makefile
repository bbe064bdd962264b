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

.PHONY: setup setup-dev demo test test-unit test-component test-system lint mlflow-ui clean gpu-check gpu-wheels

# `setup` is what running autotune needs (torch, the runtime extra, hf); `setup-dev` adds the
# development tools (pytest, ruff, mypy, import-linter, ...) that test and lint need.
RUNTIME_EXTRAS := $(EXTRA),hf
DEV_EXTRAS := $(RUNTIME_EXTRAS),dev

setup: $(VENV)/.installed

setup-dev: $(VENV)/.installed-dev

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	@echo "setup: installing torch ($(TORCH_SPEC)), then autotune with its extras ($(RUNTIME_EXTRAS)): a few minutes"
	$(BIN)/python -m pip install "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(BIN)/python -m pip install -e ".[$(RUNTIME_EXTRAS)]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	@echo "setup-dev: adding the development tools (extras $(DEV_EXTRAS))"
	$(BIN)/python -m pip install -e ".[$(DEV_EXTRAS)]"
	touch $@

demo: setup
	$(BIN)/autotune tune experiments/digits/request.yaml

# The suite runs in one pytest-xdist worker per core, at most four (each worker imports
# torch, MLflow and Ray's client); a test marked exclusive runs while no other does. Bytecode
# is cached between runs even where the environment turns that off: compiling the sources
# and the rewritten test modules again costs every worker seconds.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
PYTEST_PARALLEL := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

# The suite in three tiers (docs/testing.md): the unit tier runs alone first, where importing
# a heavy package is refused, then the component and system tiers together, ending with their
# slowest tests and the time each took (where the suite's time goes).
test: setup-dev
	$(PYTEST_PARALLEL) tests/unit
	$(PYTEST_PARALLEL) --durations=25 tests/component tests/system

# The inner loop: no torch, Ray, ONNX Runtime, OpenVINO, NNCF or MLflow, no database server.
test-unit: setup-dev
	$(PYTEST_PARALLEL) tests/unit

# Real models, real studies and stores, in this process.
test-component: setup-dev
	$(PYTEST_PARALLEL) tests/component

# Ray clusters, service processes and the console scripts end to end.
test-system: setup-dev
	$(PYTEST_PARALLEL) tests/system

lint: setup-dev
	$(BIN)/ruff check autotune workers tests experiments
	$(BIN)/ruff format --check autotune workers tests experiments
	$(BIN)/lint-imports
	$(BIN)/mypy autotune workers

# The GPU paths on a CUDA machine (experiments/gpu_check.py; a dry run without one). It runs
# on the Python that holds torch: the venv's where there is one, else python3, which gets
# optuna and pydantic from the wheels `make gpu-wheels` put in .gpu-wheels/ where it lacks
# them (a GPU machine with no package index).
GPU_CHECK_OUT ?= gpu-check-out
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_WHEELS := .gpu-wheels
GPU_WHEEL_PYTHON ?= 3.12
GPU_WHEEL_SPECS := optuna==5.0.0 alembic==1.20.1 SQLAlchemy==2.1.9 greenlet==3.5.6 Mako==1.4.3 \
	colorlog==6.12.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
	typing-inspection==0.4.5 typing_extensions==4.16.0

gpu-check:
	$(GPU_PYTHON) -c "import optuna, pydantic" 2>/dev/null || \
		$(GPU_PYTHON) -m pip install --quiet --no-index --no-deps $(GPU_WHEELS)/*.whl
	$(GPU_PYTHON) experiments/gpu_check.py --out $(GPU_CHECK_OUT)

gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --dest $(GPU_WHEELS) \
		--python-version $(GPU_WHEEL_PYTHON) --platform manylinux2014_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 $(GPU_WHEEL_SPECS)

# One worker: MLflow's default four restart one another for minutes on a small machine.
MLFLOW_PORT ?= 5000
mlflow-ui: setup
	@$(BIN)/python -c "import socket; socket.create_server(('127.0.0.1', $(MLFLOW_PORT))).close()" 2>/dev/null \
		|| { echo "mlflow-ui: port $(MLFLOW_PORT) is taken (another MLflow UI?); choose a free one: make mlflow-ui MLFLOW_PORT=N" >&2; exit 1; }
	@echo "MLflow UI: http://127.0.0.1:$(MLFLOW_PORT)  (Ctrl-C stops it)"
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --workers 1 --port $(MLFLOW_PORT)

clean:
	rm -rf gpu-check-out autotune-out mlflow.db mlruns autotune.db autotune.db.lock autotune.db.schema.lock autotune-service.db autotune-service.db.lock autotune-service.db.schema.lock autotune-data
