# Two commands on a fresh machine: `make demo` and `make test`.
#
# Install order matters: torch first and pinned (an unpinned torch, or a package that
# pulls one, downloads several GB of CUDA wheels), DeepSpeed last with
# --no-build-isolation (its setup.py imports the torch already installed). The rest goes
# through uv, pinned like pip.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
DEEPSPEED_VERSION ?= 0.19.8
# uv installs the pinned requirements (68 s with pip, 8 s with uv, same packages and
# versions). torch stays with pip: uv would not take the local CPU wheel pip finds, and
# with torch already installed at a version every requirement accepts, uv keeps it.
UV_VERSION ?= 0.13.8
# --compile-bytecode: uv, unlike pip, writes no .pyc files, and Ray's processes never wrote
# them either (none appeared in 20 minutes of the suite): every worker compiled Ray and
# transformers from source at import, and a fresh venv's suite ran far slower (README).
UV_PIP = $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
# Empty: torch from PyPI. On a CPU-only machine set it to PyTorch's CPU wheel index
# (https://download.pytorch.org/whl/cpu) so that pip does not fetch the CUDA build.
TORCH_INDEX_URL ?=
DATA_DIR ?= ../shared/data
PYTEST_ARGS ?=
export DATA_DIR

.PHONY: install browser demo test test-unit bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/runtime.txt requirements/test.txt requirements/eval.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q torch==$(TORCH_VERSION) $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(UV_PIP) -r requirements/runtime.txt -r requirements/test.txt -r requirements/eval.txt
	$(UV_PIP) --no-build-isolation deepspeed==$(DEEPSPEED_VERSION)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
# DeepSpeed's CPU op, compiled now into $(VENV)/torch_extensions instead of silently in
# the first training run (stages/training/native_ops.py).
	$(BIN)/python -m stages.training.native_ops
	touch $@

demo: install
	@test -d "$(DATA_DIR)" || { echo "DATA_DIR=$(DATA_DIR) does not exist: run 'make demo DATA_DIR=/path/to/shared/data'"; exit 2; }
	$(BIN)/pretrain run configs/demo.yaml
	$(BIN)/pretrain status runs/demo

# The Ray tests and the unit tests run side by side (tests/parallel_suite.py); with
# PYTEST_ARGS, one plain pytest with those arguments.
test: install browser
	$(BIN)/python -m tests.parallel_suite $(PYTEST_ARGS)

# Headless Chromium for tests/e2e/test_report_browser.py; a no-op when already installed.
browser:
	@command -v chromium >/dev/null 2>&1 || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }

test-unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf runs build *.egg-info .pytest_cache

# datatrove, for benchmarks/data_stages_vs_datatrove.py, in its own venv: it requires
# numpy>=2 and huggingface-hub>=1.6, which must not move the project's. The [processing]
# extra brings what MinHash (xxhash) and DocumentTokenizer (tokenizers) import; orjson is
# its JSONL reader's and writer's; spaCy is its English word tokenizer (spacy.blank("en"):
# rules only, no model to download), used by the Gopher filters and MinHash shingles.
# Nothing here pulls torch (checked below: a torch from PyPI would be GBs of CUDA wheels).
DATATROVE_VENV ?= .venv-datatrove
DATATROVE_VERSION ?= 0.10.1
SPACY_VERSION ?= 3.8.18
ORJSON_VERSION ?= 3.13.0
.PHONY: bench-datatrove-env
bench-datatrove-env: $(DATATROVE_VENV)/.installed

$(DATATROVE_VENV)/.installed:
	$(PYTHON) -m venv $(DATATROVE_VENV)
	$(DATATROVE_VENV)/bin/pip install -q --upgrade pip
	$(DATATROVE_VENV)/bin/pip install -q "datatrove[processing]==$(DATATROVE_VERSION)" spacy==$(SPACY_VERSION) orjson==$(ORJSON_VERSION)
	@! $(DATATROVE_VENV)/bin/pip show -q torch 2>/dev/null || { echo "torch got into $(DATATROVE_VENV)"; exit 1; }
	touch $@
