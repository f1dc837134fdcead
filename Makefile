# One entry point for a fresh machine: `make demo` and `make test` set up
# .venv in the checkout (pinned requirements) when needed, then run.
# The interpreter .venv is made with: the distribution's /usr/bin/python3.11
# (Debian's) when it is a final 3.11 release that can make virtual
# environments (package python3.11-venv), else python3. On this project's
# 2-core VM a fresh training binary took 18% less CPU and the test suite 10%
# less time with it than with pyenv's source build of 3.11.7
# (docs/performance.md). PYTHON=... chooses another 3.11; an existing .venv
# is kept (`make clean` first).
DEBIAN_PYTHON := /usr/bin/python3.11
PYTHON_CHECK := import ensurepip, sys; v = sys.version_info; \
  assert v[:2] == (3, 11) and v.releaselevel == 'final'
PYTHON ?= $(shell $(DEBIAN_PYTHON) -c "$(PYTHON_CHECK)" 2>/dev/null && \
  echo $(DEBIAN_PYTHON) || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# TensorFlow's C++ logs: the binaries keep them off unless asked
# (runtime.install), the test suite at errors (tests/conftest.py); the
# benchmarks, which do not all install the runtime, at errors here.
bench: export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: setup demo test bench bazel bazel_install python_install reproduce utility_curves clean

$(STAMP): requirements.txt requirements-tff.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-tff.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -c "from dpftrl_tff import runtime; runtime.install(); \
	  import tensorflow_federated, tensorflow_privacy, dp_accounting, tensorflow_datasets"
	touch $(STAMP)

setup: $(STAMP)

# ARGS: extra flags, e.g. make demo ARGS=--total_rounds=20
demo: $(STAMP)
	$(PY) -m experiments.run_stackoverflow --flagfile=configs/demo.flags $(ARGS)

test: $(STAMP)
	$(PY) -m pytest tests -q -p no:cacheprovider -n 3 --dist loadscope --no-loadscope-reorder --durations=15

# Debian's python3.11 with venv support for .venv (root's apt-get; CI).
python_install:
	$(DEBIAN_PYTHON) -c "$(PYTHON_CHECK)" 2>/dev/null || { \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends \
	  python3.11-venv; }

# Bazel 4.2.3 from Debian (root's apt-get), offline: BUILD's targets and the
# small tests on .venv's interpreter (docs/bazel.md). make test runs the same
# through tests/bazel_test.py.
bazel_install:
	command -v bazel >/dev/null || { apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends bazel-bootstrap; }

bazel: $(STAMP) bazel_install
	bazel build //...
	bazel test --test_size_filters=small //...

bench: $(STAMP)
	$(PY) -m benchmarks.accounting_speed
	$(PY) -m benchmarks.matmul_peak
	$(PY) -m benchmarks.round_time
	$(PY) -m benchmarks.participation_speed
	$(PY) -m benchmarks.blt_optimizer_speed
	$(PY) -m benchmarks.bandmf_optimizer_speed
	$(PY) -m benchmarks.git_corpus_speed
	$(PY) -m benchmarks.worker_memory

reproduce: $(STAMP)
	$(PY) -m experiments.reproduce_tables
	$(PY) -m experiments.reproduce_privacy_figures
	$(PY) -m experiments.reproduce_participation
	$(PY) -m experiments.compare_mechanisms

utility_curves: $(STAMP)
	$(PY) -m experiments.reproduce_utility_curves $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
