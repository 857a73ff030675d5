# The two commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The reference engine (Delta Lake on Spark) in a second environment: pyspark 4.2 + delta-spark
# + isolde; its JARs go to Maven's home cache (~/.m2), once per machine (tests/helpers/delta_spark.py).
REF_VENV  ?= .venv-ref
REF_PY    := $(REF_VENV)/bin/python
REF_STAMP := $(REF_VENV)/.installed-stamp

.PHONY: run test test-main test-reference reference test-fast torture bench clean jvm-archive s3a

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The Spark JVM's class archive (executor/runtime/jvm_archive.py): a cold JVM starts ~40%
# sooner with it. Built once per machine and pyspark install (~40 s) into ~/.cache/isolde;
# a no-op when it exists. A failed build only costs start-up speed, so it does not stop make.
jvm-archive: $(STAMP)
	-$(PY) -m isolde.executor.runtime.jvm_archive build

# Spark's S3A connector (s3a:// tables; executor/runtime/s3a.py): hadoop-aws of pyspark's Hadoop and
# the AWS SDK v2 modules it loads (~13 MB, 36 JARs), fetched with mvn into ~/.m2 once per machine;
# the embedded Spark puts them on its class path whenever they are there.
s3a: $(STAMP)
	$(PY) -m isolde.executor.runtime.s3a fetch

# Sets up and runs the main job on the embedded default (local Spark + ./warehouse):
# the REPL on a terminal; examples/quickstart.sql when stdin is not a terminal.
run: $(STAMP) jvm-archive
	$(VENV)/bin/isolde --warehouse ./warehouse --default-script examples/quickstart.sql --echo

# Sets up and runs the whole test suite: isolde's own (Spark 4.3), then the reference suite
# (tests/reference: isolde beside Delta-Spark in one Spark 4.2 session).
test: test-main test-reference

test-main: $(STAMP) jvm-archive s3a
	ISOLDE_S3A_REQUIRED=1 $(PY) -m pytest -q -m "not reference" --durations=25

$(REF_STAMP): pyproject.toml
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_PY) -m pip install -q --upgrade pip
	$(REF_PY) -m pip install -q -e '.[test,reference]'
	touch $(REF_STAMP)

# Sets up the reference: the environment and the Delta Lake JARs (fetched with mvn, once per machine).
reference: $(REF_STAMP)
	$(REF_PY) -m tests.helpers.delta_spark fetch
	$(REF_PY) -m isolde.executor.runtime.s3a fetch

test-reference: reference
	ISOLDE_REFERENCE_REQUIRED=1 $(REF_PY) -m pytest -q -m "reference and not torture" --durations=15

# The fast suite: no Spark (about two minutes on two cores).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not spark and not slow"

# The long runs (marker torture): tests/reliability and the model checkers' thousands of
# histories (tests/executor/txn), ending with a summary table, then the reference suite's long
# variants (mixed-engine races, thousands of differential cases).
torture: $(STAMP) reference s3a
	-$(PY) -m pip install -q -e '.[fuzz]'
	$(PY) -m pytest -q -m torture tests/reliability tests/executor
	ISOLDE_REFERENCE_REQUIRED=1 $(REF_PY) -m pytest -q -m "reference and torture" tests/reference

bench: $(STAMP)
	$(PY) benchmarks/parse.py

clean:
	rm -rf $(VENV) $(REF_VENV) warehouse .pytest_cache
