# tfrl: the two set-up commands are `make demo` and `make test`; both build .venv first.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# Two installs: the demo's (tfrl and what it requires) and the suite's (with the dev
# extras: every env suite, Ray, pytest, and the notebooks' packages).
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# Quiet TensorFlow's C++ start-up chatter; real errors still print.
export TF_CPP_MIN_LOG_LEVEL ?= 2
DEMO_DIR ?= runs/demo

.PHONY: venv demo test test-fast bench docs docs-install clean

venv: $(STAMP)

$(BASE_STAMP): setup.py
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; \
	  sys.exit(0 if (3, 9) <= v <= (3, 11) else \
	  "tfrl needs Python 3.9-3.11 (dm-reverb 0.14 wheels); found %d.%d. Set PYTHON=python3.11" % v)'
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip setuptools wheel
	$(VPY) -m pip install --quiet -e .
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(VPY) -m pip install --quiet -e '.[dev,notebooks]'
	touch $(STAMP)

# The demo needs none of the extras: CartPole is gymnasium's own.
demo: $(BASE_STAMP)
	$(VPY) -m learners.train_eval --root_dir=$(DEMO_DIR) \
	  --gin_file=learners/configs/dqn_cartpole.gin

# Two lanes of tests at once (pytest-xdist); which files share a lane: tests/conftest.py.
# pytest.ini prints the 15 slowest tests and tests/conftest.py the seconds per file.
TEST_LANES ?= 2
PYTEST := $(VPY) -m pytest tests -n $(TEST_LANES) --dist loadgroup --no-loadscope-reorder

test: $(STAMP)
	$(PYTEST)

# The edit loop: no learning runs (marked slow) and no whole jobs, programs, notebooks or
# benchmark scripts (marked integration).
test-fast: $(STAMP)
	$(PYTEST) -m 'not slow and not integration'

bench: $(STAMP)
	$(VPY) benchmarks/collect_throughput.py
	$(VPY) benchmarks/learner_throughput.py

# The documentation site (mkdocs.yml) into site/: MkDocs with the Material theme, the API
# pages from the docstrings by mkdocstrings, which reads the source without importing it.
# --strict: any warning (a broken link, a missing page or include) fails the build.
# The packages are setup.py's dev extras' docs packages, installed alone here (the same
# ranges: tests/test_docs.py checks they agree).
DOCS_STAMP := $(VENV)/.installed-docs
DOCS_PACKAGES := 'mkdocs>=1.6,<2' 'mkdocs-material>=9.5,<10' 'mkdocstrings[python]>=0.30,<2' 'mkdocstrings-python>=2.0,<3' 'ruff>=0.5,<1'

docs-install: $(DOCS_STAMP)

$(DOCS_STAMP): $(BASE_STAMP)
	$(VPY) -m pip install --quiet $(DOCS_PACKAGES)
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs .pytest_cache site
