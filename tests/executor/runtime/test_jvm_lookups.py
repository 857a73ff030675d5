"""Py4J look-ups remembered (executor/runtime/jvm_lookups.py): round trips counted on the wire.

After the first time, ``F.col`` is one round trip (the call), not three; classes, packages,
nested classes and methods are kept; a static field's value, a missing name and Python's magic
names are not; results are those of plain py4j.
"""

from __future__ import annotations

import pytest
from py4j import clientserver
from py4j.protocol import Py4JError

pytestmark = pytest.mark.spark


@pytest.fixture
def wire(monkeypatch):
    """The commands this thread sends to the JVM while the test runs."""
    import threading

    sent = []
    original = clientserver.ClientServerConnection.send_command
    me = threading.get_ident()

    def send(self, command):
        if threading.get_ident() == me:
            sent.append(command)
        return original(self, command)

    monkeypatch.setattr(clientserver.ClientServerConnection, "send_command", send)
    return sent


def test_the_session_keeps_lookups(spark):
    from isolde.executor.runtime.jvm_lookups import _KeptJVMView

    assert type(spark.sparkContext._jvm) is _KeptJVMView


def test_a_function_call_is_one_round_trip_once_looked_up(spark, wire):
    from pyspark.sql import functions as F

    F.col("warm")
    wire.clear()
    column = F.col("id")
    assert len(wire) == 1 and wire[0].startswith("c\n")  # the call only: no 'r' (reflection)
    assert spark.range(3).select((column * 2).alias("x")).collect() == [(0,), (2,), (4,)]


def test_what_is_kept_and_what_is_not(spark, wire):
    jvm = spark.sparkContext._jvm
    integer = jvm.java.lang.Integer
    assert jvm.java.lang.Integer is integer  # the class (and its packages) kept
    assert integer.parseInt("42") == 42
    wire.clear()
    assert integer.parseInt("7") == 7
    assert [c.split("\n")[0] for c in wire] == ["c"]  # the method kept
    wire.clear()
    assert integer.MAX_VALUE == 2**31 - 1  # a static field: read from the JVM each time
    assert integer.MAX_VALUE == 2**31 - 1
    assert len(wire) == 2
    entry = jvm.java.util.AbstractMap.SimpleEntry  # a nested class
    assert entry("k", 1).getValue() == 1
    assert jvm.java.util.AbstractMap.SimpleEntry is entry
    for _ in range(2):  # a missing name asks each time (and fails each time)
        with pytest.raises(Py4JError):
            integer.noSuchMethodAnywhere
    assert not hasattr(integer, "__len__")  # magic names never go to the JVM
