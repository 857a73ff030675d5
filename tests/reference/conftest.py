"""The reference suite: isolde beside Delta Lake on Spark (delta-spark), in one SparkSession.

Runs in the second environment (``make test-reference``: ``.venv-ref`` with pyspark 4.2 and
delta-spark; JARs from Maven's cache, tests/helpers/delta_spark.py). The session is Delta's
(DeltaSparkSessionExtension + DeltaCatalog) and isolde connects to it with ``spark=`` -- the
set-up of a user who adds isolde to an existing Delta pipeline -- so every test here also
proves that isolde runs inside such a session, on Spark 4.2.

In an environment without delta-spark (the main ``.venv``) these tests skip, naming what is
missing; ``make test-reference`` sets ``ISOLDE_REFERENCE_REQUIRED=1``, which turns a missing
reference into an error, so CI cannot pass by skipping it.

Fixtures, beside the root conftest's (``session``, ``delta_rows`` ... use this ``spark``):

    spark        the session-scoped SparkSession with Delta's extension and catalog
    delta        Delta(spark): runs SQL on Delta-Spark against table folders (see below)
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.reference import Delta


def _missing_reference() -> str | None:
    try:
        import delta  # noqa: F401  (the delta-spark package)
    except ImportError:
        return ("delta-spark is not installed in this environment: the reference suite runs in "
                ".venv-ref (make test-reference)")
    from tests.helpers.delta_spark import delta_version, maven_repo

    if delta_version() is None:
        return f"the Delta Lake JARs are not in {maven_repo()}: run make reference"
    return None


@pytest.fixture(scope="session")
def spark():
    missing = _missing_reference()
    if missing:
        if os.environ.get("ISOLDE_REFERENCE_REQUIRED") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    from tests.helpers.delta_spark import delta_session

    return delta_session()


@pytest.fixture
def delta(spark):
    return Delta(spark)
