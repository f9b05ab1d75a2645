# gpu-widgets developer tasks.  `make help` lists them.
#
#   make setup     venv + editable install + labextension (fast when already done)
#   make lab       JupyterLab on .lab/examples, an untracked copy of examples/ (simulated GPUs without a driver)
#   make test      jest + pytest (installs Debian chromium and prometheus for the browser and cluster tests if root)
#   make test-quick  the unit-level tests only (jest + pytest --quick, ~90 s): the loop to run while editing
#   make build     wheel + sdist into dist/
#   make bench     benchmark suite against nvitop, gpustat, nvdashboard, ... (docs/benchmarks.md)
#   make screenshots  retake docs/screenshots/: sidebar and examples, light and dark, 2 and 8 GPUs
#
# Variables (override on the command line, e.g. `make setup VENV=/tmp/gw-venv`):
VENV ?= .venv
PY = $(VENV)/bin/python
PORT ?= 8888
IP ?= 127.0.0.1
# Extra arguments: `make test PYTEST_ARGS="-k packaging -x"`, `make lab LAB_ARGS=--no-browser`.
PYTEST_ARGS ?=
LAB_ARGS ?=
# The CPU wheel that lies on these machines; installed before the project so that the
# `torch` extra is already satisfied (a bare `torch` requirement pulls a multi-GB CUDA build).
# `make setup TORCH_SPEC=` skips torch.
TORCH_SPEC ?= torch==2.13.0
# `make lab` runs the examples from this untracked copy, so running them (outputs, widget state)
# never rewrites the tracked notebooks in $(EXAMPLES).
EXAMPLES ?= examples
LAB_EXAMPLES ?= .lab/examples

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV_ABS := $(abspath $(VENV))
BIN := $(VENV_ABS)/bin
JLPM := $(BIN)/jlpm
# The package.json scripts call `jupyter labextension build`: use the venv's.
export PATH := $(BIN):$(PATH)

STAMP_PIP := $(VENV)/.gw-stamp-pip
STAMP_TORCH := $(VENV)/.gw-stamp-torch
STAMP_INSTALL := $(VENV)/.gw-stamp-install
NODE_STAMP := node_modules/.yarn-state.yml
# Written by `jlpm build`; its age tells whether the labextension is up to date.
LABEXT_BUILT := gpu_widgets/labextension/package.json
LABEXT_SOURCES := package.json tsconfig.json install.json \
	$(shell find labextension/src labextension/style labextension/schema -type f -not -path '*/__tests__/*' 2>/dev/null)
OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
# JupyterLab refuses to run as root without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help setup lab lab-examples test test-quick build screenshots clean distclean

help: ## List the targets
	@echo "gpu-widgets make targets:"
	@grep -E '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "Variables: VENV=$(VENV) PORT=$(PORT) IP=$(IP) PYTEST_ARGS=... LAB_ARGS=... TORCH_SPEC=$(TORCH_SPEC)"

setup: $(STAMP_INSTALL) $(LABEXT_BUILT) $(OVERRIDES) ## Create/refresh the dev venv: editable install, labextension (dev mode), server extension

$(PY):
	python3 -m venv $(VENV)

$(STAMP_PIP): | $(PY)
	$(PY) -m pip install --upgrade pip
	@touch $@

# Never fails: without the wheel the project installs without the [torch] extra.
$(STAMP_TORCH): $(STAMP_PIP)
	@if [ -z "$(TORCH_SPEC)" ]; then \
		echo "TORCH_SPEC is empty: not installing torch"; \
	elif ! $(PY) -m pip install "$(TORCH_SPEC)"; then \
		echo "WARNING: could not install $(TORCH_SPEC): continuing WITHOUT torch (the [torch] extra is skipped)."; \
	fi
	@touch $@

# Editable install: the build hook (hatch-jupyter-builder) runs `jlpm install` and `jlpm build`
# into gpu_widgets/labextension; `develop` links that folder into the venv's labextensions;
# the server extension is enabled in the venv (sys-prefix) as the wheel's config file would.
$(STAMP_INSTALL): $(STAMP_TORCH) pyproject.toml
	@# pip would install (and uninstall) the wheel's shared-data THROUGH the dev-mode link
	@# into gpu_widgets/labextension: drop the link first; `develop` below re-creates it.
	@if [ -L $(VENV)/share/jupyter/labextensions/gpu-widgets ]; then rm $(VENV)/share/jupyter/labextensions/gpu-widgets; fi
	@extras=test; \
	if $(PY) -c 'import torch' >/dev/null 2>&1; then extras=test,torch,lightning,transformers,keras; \
	else echo "NOTE: torch is not installed: installing without the [torch] and framework extras"; fi; \
	set -x; $(PY) -m pip install -e ".[$$extras]"
	@# jupyterlab 4.6 moved `labextension develop` to jupyter-builder; older ones lack it.
	if [ -x $(BIN)/jupyter-builder ]; then $(BIN)/jupyter builder develop --overwrite .; \
	else $(BIN)/jupyter labextension develop --overwrite .; fi
	$(BIN)/jupyter server extension enable --sys-prefix gpu_widgets
	@touch $@

$(NODE_STAMP): package.json yarn.lock | $(STAMP_INSTALL)
	$(JLPM) install
	@touch $@

# Rebuild (development build, ~7 s) whenever a labextension source changed.
$(LABEXT_BUILT): $(NODE_STAMP) $(LABEXT_SOURCES)
	$(JLPM) build
	@touch $@

# Quiet JupyterLab for development and tests: no news pop-up, no kernel-choice dialog.
$(OVERRIDES): | $(PY)
	@mkdir -p $(dir $@)
	@printf '%s\n' \
		'{' \
		'  "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false},' \
		'  "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": true}' \
		'}' > $@
	@echo "wrote $@"

# Backend choice: a GPU_WIDGETS_BACKEND set by the user wins; otherwise `gpu-widgets probe`
# (exit 0 when NVML initialises, else non-zero with the reason as its last output line)
# decides, and without a driver the simulated GPUs are used.
lab: setup lab-examples ## Start JupyterLab on .lab/examples, a working copy of examples/ (PORT=8888 IP=127.0.0.1)
	@if [ -n "$${GPU_WIDGETS_BACKEND:-}" ]; then \
		echo "GPU_WIDGETS_BACKEND=$$GPU_WIDGETS_BACKEND (set by you)"; \
	elif out=$$($(BIN)/gpu-widgets probe 2>&1); then \
		echo "NVIDIA driver found: using the real GPUs (NVML)."; \
	else \
		reason=$$(printf '%s\n' "$$out" | sed '/^[[:space:]]*$$/d' | tail -n 1); \
		echo "================================================================================"; \
		echo "No NVIDIA driver found ($${reason:-gpu-widgets probe failed}): starting with SIMULATED GPUs"; \
		echo "(GPU_WIDGETS_BACKEND=simulated). Set GPU_WIDGETS_BACKEND=nvml to force the real backend."; \
		echo "================================================================================"; \
		export GPU_WIDGETS_BACKEND=simulated; \
	fi; \
	echo "Examples: $(LAB_EXAMPLES) (your copy; the tracked ones in $(EXAMPLES)/ stay untouched)"; \
	cd "$(LAB_EXAMPLES)" && exec $(BIN)/jupyter lab --ServerApp.port_retries=0 \
		--port=$(PORT) --ip=$(IP) $(ALLOW_ROOT) $(LAB_ARGS)

# A notebook is copied when it is missing, and refreshed when the tracked one changed and the copy
# was not edited (it still equals the pristine copy kept in .tracked/); an edited copy is kept,
# with a note. Content is compared, not times: a fresh clone gives every file a new mtime.
lab-examples: ## Copy examples/ to the untracked .lab/examples (LAB_EXAMPLES=...) without overwriting your edits
	@mkdir -p "$(LAB_EXAMPLES)/.tracked"
	@# The notebooks, the scripts they run (distributed.ipynb launches distributed_train.py) and the
	@# data they read (memory.ipynb draws memory_snapshot_example.pickle).
	@for src in $(EXAMPLES)/*.ipynb $(EXAMPLES)/*.py $(EXAMPLES)/*.pickle; do \
		[ -e "$$src" ] || continue; \
		name=$$(basename "$$src"); dst="$(LAB_EXAMPLES)/$$name"; orig="$(LAB_EXAMPLES)/.tracked/$$name"; \
		if [ ! -e "$$dst" ]; then \
			cp "$$src" "$$dst" && cp "$$src" "$$orig" && echo "copied $$src to $$dst"; \
		elif [ -e "$$orig" ] && cmp -s "$$src" "$$orig"; then :; \
		elif cmp -s "$$src" "$$dst" || { [ -e "$$orig" ] && cmp -s "$$dst" "$$orig"; }; then \
			cp "$$src" "$$dst" && cp "$$src" "$$orig" && echo "refreshed $$dst: $$src changed"; \
		else \
			echo "NOTE: $$src changed, but $$dst has your edits: kept yours (delete it to get the new one)"; \
		fi; \
	done

# pytest-xdist: three workers on these 2-core machines (the suite waits on servers, kernels and the clock more
# than it computes: 3 workers kept 132-138 % of the 2 cores busy; 4 made tests fail for lack of CPU).
# loadscope keeps a module's tests on one worker, so its module-scoped servers, labs and browsers start once.
# (Sending the heaviest modules first was tried: they then ran together and the run took a minute longer.)
XDIST ?= -n 3 --dist loadscope

test: setup ## Run jest and pytest (PYTEST_ARGS=...); non-zero on any failure
	bash scripts/ensure-chromium.sh
	bash scripts/ensure-prometheus.sh
	@# The sidebar's API types must match openapi.json (`jlpm gen:api` regenerates them).
	$(JLPM) check:api
	@# So must its built-in catalogue match gpu_widgets/metrics/catalogue.py (`jlpm gen:catalogue`; python3 is $(BIN)'s).
	$(JLPM) check:catalogue
	@# jest runs beside pytest (whose workers wait on servers more than they compute); its report
	@# follows pytest's, and either failing fails the target.
	bash scripts/with-jest.sh $(JLPM) $(PY) -m pytest -q --durations=30 $(XDIST) $(PYTEST_ARGS)

# No browser, server, kernel or other process (tests/quick_mode.py fails a quick test that starts
# one): what to run after each edit; `make test` before a push.
test-quick: setup ## The unit-level tests of every room, ~90 s: jest beside pytest --quick (PYTEST_ARGS=...)
	bash scripts/with-jest.sh $(JLPM) $(PY) -m pytest -q --quick --durations=10 $(XDIST) $(PYTEST_ARGS)

# python -m build makes the sdist, then the wheel FROM the sdist, with a fresh production
# build of the labextension: what a user gets from PyPI.
# The check asks for the installed distribution: `import build` would succeed on the tests'
# build/ folder (a namespace package: the editable install puts the repository on sys.path).
build: setup ## Build the wheel and sdist into dist/
	@$(PY) -c 'import importlib.metadata as m; m.version("build")' >/dev/null 2>&1 || $(PY) -m pip install build
	rm -rf dist
	$(PY) -m build --outdir dist .
	@ls -l dist

# The contenders (the `bench` extra) go into their own venv, benchmarks/.cache/venv-peers.
# `make bench BENCH_ARGS=--smoke` for a quick check; `BENCH_ARGS="--only sampler"` for one section.
BENCH_ARGS ?=
.PHONY: bench
bench: setup ## Run the benchmark suite against the contenders (tables + JSON; docs/benchmarks.md)
	$(PY) -m benchmarks.run --install-peers $(BENCH_ARGS)

# Simulated GPUs with a scripted power-cap episode and a lost stretch; about 6 min (the sidebar's
# one-minute window has to fill, twice, and the examples run). The tests' own screenshots go to
# build/screenshots/. SCREENSHOTS_ARGS="--only sidebar" (or examples, or --gpus 8) for part of it.
SCREENSHOTS_ARGS ?=
screenshots: setup ## Retake docs/screenshots/ (sidebar, examples; light, dark; 2 and 8 GPUs)
	bash scripts/ensure-chromium.sh
	$(PY) scripts/screenshots.py --out docs/screenshots $(SCREENSHOTS_ARGS)

clean: ## Remove build outputs (keeps the venv and node_modules)
	rm -rf dist build labextension/lib gpu_widgets/labextension tsconfig.tsbuildinfo .pytest_cache
	find . -name __pycache__ -type d -not -path './.venv/*' -not -path './node_modules/*' -prune -exec rm -rf {} +

distclean: clean ## Also remove node_modules and yarn state (not the venv: delete it yourself)
	rm -rf node_modules .yarn
