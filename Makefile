# The two commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast torture bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Sets up and runs the main job on the embedded default (local Spark + ./warehouse):
# the REPL on a terminal; examples/quickstart.sql when stdin is not a terminal.
run: $(STAMP)
	$(VENV)/bin/isolde --warehouse ./warehouse --default-script examples/quickstart.sql --echo

# Sets up and runs the whole test suite.
test: $(STAMP)
	$(PY) -m pytest -q

# The fast suite: no Spark (about two minutes on two cores).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not slow"

# The long reliability runs (tests/reliability, marker torture), ending with a summary table.
torture: $(STAMP)
	-$(PY) -m pip install -q -e '.[fuzz]'
	$(PY) -m pytest -q -m torture tests/reliability

bench: $(STAMP)
	$(PY) benchmarks/parse.py

clean:
	rm -rf $(VENV) warehouse .pytest_cache
