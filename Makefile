# Two set-up commands (README): `make demo` and `make test`. Both install what they need first,
# with the exact versions verified on our machines (constraints.txt; pyproject.toml has ranges).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RMS := $(VENV)/bin/rms
STAMP := $(VENV)/.installed-stamp
CONSTRAINTS := constraints.txt
EXTRAS ?= test,ray,dask,peers
LOCOMO ?= ../shared/data/locomo10.json
PIP_FLAGS := --quiet --disable-pip-version-check

.PHONY: install system-deps demo test test-slow package-check bench dag modules clean

# Graphviz's `dot` draws the DAG pictures (rms dag, the notebook, their tests).
system-deps:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "installing graphviz (dot) with apt-get"; \
	  (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) || \
	  { echo "could not install graphviz: run 'apt-get install graphviz' as root"; exit 1; }; }

# uv (pinned in constraints.txt, installed into the virtualenv by pip) installs the rest: it
# downloads and unpacks in parallel, a fresh install in about 90 s where pip took 4.5 minutes.
# It compiles the bytecode ahead (--compile-bytecode), as pip does: these machines set
# PYTHONDONTWRITEBYTECODE, and every process the suite starts would compile its imports again.
# uv reads no pip configuration: the folders pip would search (PIP_FIND_LINKS and pip's own
# find-links setting; where this machine keeps the CPU build of torch) are handed over as
# --find-links, so that torch==2.13.0 is that wheel and not PyPI's CUDA build.
UV := $(VENV)/bin/uv
FIND_LINKS := $(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_FLAGS := --quiet --compile-bytecode $(foreach folder,$(FIND_LINKS),--find-links $(folder))

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -c $(CONSTRAINTS) uv
	$(UV) pip install --python $(PY) $(UV_FLAGS) -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP) system-deps

demo: install
	$(RMS) demo

# The suite without its slow tier (pytest's `slow` marker: large sizes that a smaller test of the
# same kind also covers, and the Ray and Dask engines); `make test-slow` runs that tier, CI both.
# The fast tier runs on every core (pytest-xdist). Temporary stores go to /dev/shm where it is
# writable: every commit fsyncs, and on tmpfs that costs nothing (a SIGKILL, which the crash tests
# send, loses nothing that fsync guards against).
# The suite's own processes (pytest's workers, the store worker scripts they start) skip
# Hamilton's plugin autoloading, as `rms` does (dataflows/cli.py): it imports matplotlib, dask,
# scikit-learn and more on first use of a decorator, 4 of a process's 7 s of imports. A library
# caller's process keeps it: `make package-check` runs `retrieve()` from a plain script.
TEST_TMPDIR := $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
TEST_ENV := HAMILTON_AUTOLOAD_EXTENSIONS=0 $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))

test: install
	$(TEST_ENV) $(PY) -m pytest -q -m "not slow" -n auto --dist worksteal --durations=25

# One process: the Ray and Dask engines in it bring their own workers, and a second pytest worker
# beside a Ray cluster on two cores slows both several times over.
test-slow: install
	$(TEST_ENV) $(PY) -m pytest -q -m slow --durations=25

# The wheel as a user installs it: built, installed (core only, -c constraints.txt) into a fresh
# virtualenv outside the repository, then `rms demo` and `retrieve()` from another directory.
package-check: install
	$(PY) tests/package_check.py

bench: install
	$(RMS) bench locomo --data $(LOCOMO) --store .rms/locomo-store --out bench-out

# The DAG picture the README shows, redrawn from the code, and its text form (tests/test_audit.py
# fails when the committed three no longer match the code). One hash seed: Hamilton lists nodes in
# hash-seed order, which moves them in the layout, and the SVG and the PNG must be one drawing.
dag: install
	PYTHONHASHSEED=0 $(RMS) dag --out docs/retrieval_dag.svg
	PYTHONHASHSEED=0 $(RMS) dag --out docs/retrieval_dag.png
	PYTHONHASHSEED=0 $(RMS) dag --out docs/retrieval_dag.txt

# The module and import diagram (docs/modules.md), redrawn from the source; standard library only.
modules:
	$(PYTHON) docs/module_graph.py

clean:
	rm -rf $(VENV) .rms bench-out .pytest_cache build dist
