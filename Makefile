# tr2's entry points. `make all` runs every protocol stage on the default card, then the report;
# `make test` runs the tests. Both set up .venv first, so each works on a fresh clone by itself.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   ?= .venv
PY     ?= $(VENV)/bin/python
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
# The GPU card when a GPU is there, the CPU card otherwise. CARD is a name (params/cards/NAME.yaml) or a path.
CARD   ?= $(if $(HAS_GPU),h200,cpu)
# RESUME=results/<folder> continues a stage where it stopped instead of starting a new folder. The folder
# knows its card (card.yaml): CARD is passed along only when given (make ... CARD=x), and must then agree.
RESUME ?=
CARD_GIVEN = $(filter command line environment environment override,$(origin CARD))
# CARD= given empty would reach the runner as `--card` with no value (argparse's "expected one argument"): one line here
NEED_CARD = $(if $(strip $(CARD)),,$(error CARD: '' is not allowed; allowed: a card name under params/cards/ (e.g. cpu) or a card file))
RUN_STAGE = $(PY) -m tr2.runner $(1) $(if $(RESUME),--resume $(RESUME) $(if $(CARD_GIVEN),$(NEED_CARD)--card $(CARD)),$(NEED_CARD)--card $(CARD))
# A CPU build of PyTorch: this pin is the one the CPU machines here carry on disk; elsewhere pip
# falls back to PyTorch's CPU index.
TORCH_CPU ?= torch==2.13.0
CUPY_EXTRA ?= cuda13

.PHONY: help setup kernels products test lab all series method-a method-b footprint families report bench clean-smoke

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo "  CARD=$(CARD) (a name under params/cards/ or a path), RESUME=results/<folder> to continue a stage (its card is in it)"

setup: $(VENV)/.tr2-setup  ## create .venv and install tr2 with its extras (CuPy only where nvidia-smi sees a GPU)

$(VENV)/.tr2-setup: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(HAS_GPU)" ]; then \
	  $(PY) -m pip install -q -e '.[test,notebooks,$(CUPY_EXTRA)]'; \
	else \
	  $(PY) -m pip install -q '$(TORCH_CPU)' || $(PY) -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu; \
	  $(PY) -m pip install -q -e '.[test,notebooks]'; \
	fi
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(PY) -m tr2.papermill_hook install >/dev/null  # `papermill -f` refusals in one line (tr2/papermill_hook.py)
	@if [ -n "$(HAS_GPU)" ]; then $(PY) -m tr2.cupy_side.gpu.cubins; fi  # the kernels built ahead on a GPU machine
	touch $@

kernels: setup  ## compile every .cu file to a cubin ahead of the runs (ARCH=sm_90 without a GPU; needs NVRTC)
	$(PY) -m tr2.cupy_side.gpu.cubins $(if $(ARCH),--arch $(ARCH))

products: setup  ## time cuBLASLt's candidates for every product of the models on this GPU (the record runs read)
	$(PY) -m tr2.cupy_side.products $(if $(MODELS),--models $(MODELS)) $(if $(BUILDS),--builds $(BUILDS))

test: setup  ## the linter, the tests (CPU; GPU tests skip without a GPU) and the notebooks under nbval
	$(PY) -m ruff check .
	$(PY) -m pytest -q tests --nbval-lax notebooks

# The results as DataFrames (notebooks/explore.ipynb, through tr2.explore); LAB_ARGS passes options on
# (e.g. LAB_ARGS="--ip 127.0.0.1 --port 8890 --no-browser" on a remote machine behind a tunnel).
# JupyterLab refuses to start as root unless told; containers here run as root.
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
lab: setup  ## JupyterLab on notebooks/: explore.ipynb loads every results folder into pandas DataFrames
	$(PY) -m jupyterlab --notebook-dir=notebooks $(LAB_ROOT) $(LAB_ARGS)

series: setup  ## protocol rules 10-16: step times in rounds under the outside clock
	$(call RUN_STAGE,series)
method-a: setup  ## protocol rules 40-42: five seeds a side, families of curves
	$(call RUN_STAGE,method_a)
method-b: setup  ## protocol rules 50-54: one shared start, plain float32
	$(call RUN_STAGE,method_b)
footprint: setup  ## protocol rules 60-62: what each side opens and needs at run time
	$(call RUN_STAGE,footprint)
families: setup  ## protocol rules 30-33: where the kernel time goes
	$(call RUN_STAGE,families)

bench: setup  ## one clocked run of every model and type on both sides (tiny stand-in without a GPU), one table
	TR2_BENCH_DEVICE=$(if $(HAS_GPU),cuda,cpu) $(if $(HAS_GPU),,TR2_BENCH_MODELS=tiny) \
	  $(PY) scripts/device_bench.py results/bench-$(shell date +%Y%m%d-%H%M%S)-$(CARD) bench:3600

report: setup  ## stitch the newest executed notebooks of CARD into report/TR-2.html
	$(PY) -m tr2.report $(NEED_CARD)--card $(CARD) --out report/TR-2.html

# On a GPU the products record comes first, for the card's models and builds (the protocol's amendment 4.3; keys
# already timed are skipped, so each is timed once per GPU model and cuBLASLt version): without a record every GPU
# stage stops before its first run (tr2.cards).
all: setup  ## every stage on the default card, then the report (the main job)
	@if [ -n "$(HAS_GPU)" ]; then $(PY) -m tr2.cupy_side.products $(if $(MODELS)$(BUILDS),$(if $(MODELS),--models $(MODELS)) $(if $(BUILDS),--builds $(BUILDS)),$(NEED_CARD)--card $(CARD)); fi
	$(call RUN_STAGE,series)
	$(call RUN_STAGE,method_a)
	$(call RUN_STAGE,method_b)
	$(call RUN_STAGE,footprint)
	$(call RUN_STAGE,families)
	$(PY) -m tr2.report --card $(CARD) --out report/TR-2.html

clean-smoke:  ## remove the smoke card's results folders (what the notebook tests leave)
	rm -rf results/*-smoke results/*-smoke-*
