"""Tables other engines wrote (delta-rs's test tables and Delta's golden tables, copied under
tests/data/engines/; see its README): isolde reads each with the same rows as delta-rs -- the
latest version and older ones (VERSION AS OF) -- or refuses with an isolde error naming the
feature and the version; the expected outcome of every table is in CASES, so a regression from
"reads" to "refuses" (or the reverse) fails. A few tables isolde can write take a DELETE and an
INSERT (on a copy) that delta-rs then reads back; tables isolde only reads refuse the write.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
from dataclasses import dataclass, field
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.errors import ExecutionError, UnsupportedFeatureError
from isolde.executor.log.deletion_vectors import DeletionVectorError, dv_file_path
from isolde.executor.log.delta_log import DeltaLog

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)

NEEDS_SPARK = True  # every read goes through a Session on Spark

READS = "reads"


@dataclass(frozen=True)
class Case:
    """What isolde does with one copied table.

    ``latest``: READS, or the feature (text) a refusal of the latest version must name.
    ``versions``: older versions read with VERSION AS OF -> READS or the feature refused.
    ``oracle``: where the expected rows come from: "delta-rs" (QueryBuilder, which applies
    deletion vectors), "int96" (pyarrow over the files delta-rs lists, INT96 read in
    microseconds: delta-rs 1.6 overflows 9999-12-31), "delta-rs@<v>" (delta-rs's rows at
    version v: it refuses the wanted version, which changed no data), "empty" (a version
    with no columns and no files, which delta-rs cannot open).
    """

    source: str
    covers: str
    latest: str = READS
    versions: dict = field(default_factory=dict)
    oracle: str = "delta-rs"
    oracles: dict = field(default_factory=dict)  # per older version, when not ``oracle``


RS, DELTA = "delta-rs", "delta"

CASES: dict[str, Case] = {
    # ---- deletion vectors
    "table-with-dv-small": Case(RS, "a file deletion vector", versions={0: READS}),
    "table_with_deletion_logs": Case(RS, "DVs over 20 commits; protocol 1/2 -> 3/7 at version 1-2",
                                     versions={0: READS, 2: READS, 3: READS, 12: READS}),
    "cdf-table-with-cdc-and-dvs": Case(RS, "DVs with change data files, 25 commits",
                                       versions={1: READS, 14: READS, 24: READS}),
    "log-replay-dv-key-cases": Case(DELTA, "one data file re-added with changing DVs",
                                    versions={0: READS, 1: READS, 2: READS}),
    "dv-partitioned-with-checkpoint": Case(DELTA, "partitioned, DVs, a checkpoint",
                                           versions={5: READS, 10: READS}),
    "dv-with-columnmapping": Case(DELTA, "DVs with column mapping (name), partitioned, checkpoint",
                                  versions={0: READS, 10: READS}),
    # ---- column mapping
    "table_with_column_mapping": Case(RS, "name mode, partition column with spaces"),
    "table_with_partitioning_mapping": Case(
        RS, "column mapping turned on after data was written (files without field ids), partition "
            "column renamed", versions={1: READS, 2: READS, 3: READS}),
    "data-reader-timestamp_ntz-name-mode": Case(DELTA, "name mode, timestamp_ntz partition", versions={0: READS}),
    "data-reader-timestamp_ntz-id-mode": Case(DELTA, "id mode, timestamp_ntz partition", versions={0: READS}),
    "table-with-columnmapping-mode-id": Case(DELTA, "id mode, nested structs / arrays / maps"),
    "table-with-icebegCompatV2Enabled": Case(DELTA, "id mode, icebergCompatV2"),
    "data-skipping-basic-stats-all-types-columnmapping-id": Case(DELTA, "id mode, every primitive type"),
    # ---- checkpoints
    "simple_table_with_checkpoint": Case(RS, "classic checkpoint at 10", versions={5: READS, 10: READS}),
    "multi-part-checkpoint": Case(DELTA, "multi-part checkpoint", versions={0: READS}),
    "checkpoint-v2-table": Case(RS, "V2 checkpoints (JSON, sidecars), identity column",
                                versions={0: READS, 6: READS, 8: READS}),
    "v2-checkpoint-json": Case(DELTA, "V2 checkpoint in JSON with sidecars; v2Checkpoint from version 1",
                               versions={0: READS, 1: READS}),
    "v2-checkpoint-parquet": Case(DELTA, "V2 checkpoint in Parquet with sidecars", versions={0: READS, 1: READS}),
    "only-checkpoint-files": Case(DELTA, "checkpoints at every version", versions={0: READS, 1: READS}),
    "corrupted-last-checkpoint-kernel": Case(DELTA, "_last_checkpoint names a missing checkpoint",
                                             versions={5: READS, 10: READS}),
    "table_failed_last_checkpoint_update": Case(RS, "_last_checkpoint behind the latest checkpoint",
                                                versions={1: READS}),
    "delta-1.2.1-only-struct-stats": Case(RS, "checkpoint with struct stats only", versions={3: READS, 10: READS}),
    "basic-with-inserts-deletes-checkpoint": Case(DELTA, "inserts, deletes, checkpoint",
                                                  versions={4: READS, 9: READS, 10: READS}),
    # ---- partitions, types, old writers
    "delta-0.8.0-special-partition": Case(RS, "partition values with / and space"),
    "delta-0.8.0-null-partition": Case(RS, "a null partition value"),
    "partition-type-primitives": Case(RS, "partitioned by int, boolean, date, string"),
    "delta-2.2.0-partitioned-types": Case(RS, "partitioned by several types"),
    "data-reader-partition-values": Case(DELTA, "12 partition columns of every type, null ones"),
    "data-reader-escaped-chars": Case(DELTA, "escaped characters in partition folders", versions={0: READS}),
    "data-reader-timestamp_ntz": Case(DELTA, "timestamp_ntz (reader feature)", versions={0: READS}),
    "parquet-all-types": Case(DELTA, "every Parquet type, timestamp_ntz"),
    "data-reader-map": Case(DELTA, "maps"),
    "data-reader-nested-struct": Case(DELTA, "nested structs"),
    "kernel-timestamp-INT96": Case(DELTA, "INT96 timestamps"),
    "table_with_edge_timestamps": Case(RS, "INT96 9999-12-31", oracle="int96"),
    "table_with_liquid_clustering": Case(RS, "clustered table (delta-rs)"),
    "simple_table": Case(RS, "adds and removes", versions={0: READS, 1: READS, 3: READS}),
    "delta-0.2.0": Case(RS, "written by Delta 0.2.0", versions={0: READS, 1: READS}),
    "cdc_ict_table": Case(RS, "in-commit timestamps, change data feed", versions={1: READS}),
    "time-travel-schema-changes-b": Case(DELTA, "a column added at version 1", versions={0: READS}),
    "log-replay-latest-metadata-protocol": Case(DELTA, "protocol and metadata changed later",
                                                versions={0: READS, 1: READS}),
    "delta-live-table": Case(RS, "version 0's metaData has no schemaString (Delta Live Tables)",
                             versions={0: READS}, oracles={0: "empty"}),
    # ---- features isolde reads at some versions only, or refuses
    "basic-with-vacuum-protocol-check-feature": Case(
        DELTA, "vacuumProtocolCheck (read-only support) from version 1, which changed no data",
        oracle="delta-rs@0", versions={0: READS}),
    "type-widening": Case(DELTA, "typeWidening-preview from version 1: 13 columns widened at version 2",
                          oracle="widened", versions={0: READS, 1: READS}, oracles={0: "delta-rs"}),
    # pyspark's toArrow() cannot convert its ARRAY<VARIANT> with NULL elements: rows by collect()
    "spark-variant-checkpoint": Case(RS, "variantType-preview, variants nested in structs, arrays and maps",
                                     oracle="variant", versions={0: READS, 1: READS}),
    "deltalog-invalid-protocol-version": Case(DELTA, "reader version 99", latest="reader version 99"),
}


# --------------------------------------------------------------------------- rows


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    return value


def _rows(table: pa.Table, columns: list) -> list:
    table = table.select(columns)
    return sorted((tuple(_norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


def delta_rs_table(path: str, version: Optional[int] = None) -> pa.Table:
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(path, version=version) if version is not None else DeltaTable(path)
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def int96_table(path: str, version: Optional[int] = None) -> pa.Table:
    """The files delta-rs lists, read by pyarrow with INT96 in microseconds (no partitions)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version) if version is not None else DeltaTable(path)
    assert not table.metadata().partition_columns
    return pa.concat_tables(pq.read_table(uri.removeprefix("file://"), coerce_int96_timestamp_unit="us")
                            for uri in table.file_uris())


def expected_table(path: str, oracle: str, version: Optional[int]) -> Optional[pa.Table]:
    if oracle == "delta-rs":
        return delta_rs_table(path, version)
    if oracle.startswith("delta-rs@"):
        return delta_rs_table(path, int(oracle.split("@")[1]))
    if oracle == "int96":
        return int96_table(path, version)
    if oracle == "empty":
        return None
    if oracle == "widened":  # delta-rs refuses typeWidening: pyarrow over its files, cast to the table's types
        from tests.executor.jobs.test_type_widening import widened_table

        return widened_table(path, version)
    raise AssertionError(f"unknown oracle {oracle}")


def isolde_table(session, path: str, version: Optional[int] = None) -> pa.Table:
    travel = f" VERSION AS OF {version}" if version is not None else ""
    return session.sql(f"SELECT * FROM delta.`{path}`{travel}").toArrow()


def assert_same_rows(got: pa.Table, expected: Optional[pa.Table]):
    if expected is None:  # "empty": no columns, no rows
        assert got.num_columns == 0 and got.num_rows == 0
        return
    assert sorted(got.column_names) == sorted(expected.column_names)
    columns = got.column_names
    assert got.num_rows == expected.num_rows
    assert _rows(got, columns) == _rows(expected, columns)


def assert_refused(session, path: str, feature: str, version: int, travel: bool):
    with pytest.raises(UnsupportedFeatureError) as info:
        isolde_table(session, path, version if travel else None)
    error = info.value
    assert type(error) is UnsupportedFeatureError
    assert error.error_class == "DELTA_UNSUPPORTED_FEATURES_FOR_READ"
    message = str(error)
    assert feature in message
    assert message.startswith(f"Cannot read version {version} of table {path}: ")
    assert "table of table" not in message.lower()


def _path(name: str) -> str:
    return os.path.join(ENGINES, name)


def _latest_version(name: str) -> int:
    return DeltaLog(_path(name)).update().version


# --------------------------------------------------------------------------- reads


def test_every_copied_table_has_an_expected_outcome():
    on_disk = sorted(n for n in os.listdir(ENGINES) if os.path.isdir(_path(n)))
    assert on_disk == sorted(CASES)
    readme = open(os.path.join(ENGINES, "README.md")).read()
    missing = [n for n in on_disk if f"`{n}`" not in readme]
    assert not missing, f"tests/data/engines/README.md does not describe {missing}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_latest_version(session, name):
    case = CASES[name]
    path = _path(name)
    if case.latest != READS:
        assert_refused(session, path, case.latest, _latest_version(name), travel=False)
        return
    _assert_reads(session, path, case.oracle, None)


@pytest.mark.parametrize("name,version", sorted((n, v) for n, c in CASES.items() for v in c.versions))
def test_older_version(session, name, version):
    case = CASES[name]
    path = _path(name)
    outcome = case.versions[version]
    if outcome != READS:
        assert_refused(session, path, outcome, version, travel=True)
        return
    oracle = case.oracles.get(version, "delta-rs" if case.oracle.startswith("delta-rs@") else case.oracle)
    _assert_reads(session, path, oracle, version)


def _assert_reads(session, path: str, oracle: str, version: Optional[int]) -> None:
    if oracle == "variant":
        from tests.executor.catalog.test_variant import delta_rs_rows, isolde_rows

        travel = f" VERSION AS OF {version}" if version is not None else ""
        assert isolde_rows(session, f"delta.`{path}`{travel}") == delta_rs_rows(path, version)
        return
    assert_same_rows(isolde_table(session, path, version), expected_table(path, oracle, version))


# --------------------------------------------------------------------------- writes


@dataclass(frozen=True)
class WriteCase:
    delete_where: str
    keep: Callable[[dict], bool]
    insert: str  # after VALUES; or a query (SELECT ... FROM {path} VERSION AS OF {start} ...)
    inserted: "list | Callable[[list], list]"  # rows (dicts) the INSERT adds, or the rows before -> them


WRITES = {
    "table_with_partitioning_mapping": WriteCase(
        "description = 'Initial data'", lambda r: r["description"] != "Initial data",
        "(3, 'written by isolde')", [{"newid": 3, "description": "written by isolde"}]),
    "table_with_column_mapping": WriteCase(
        "`Super Name` = 'Stephanie Mcgrath'", lambda r: r["Super Name"] != "Stephanie Mcgrath",
        "('isolde Co', 'Ada')", [{"Company Very Short": "isolde Co", "Super Name": "Ada"}]),
    "table-with-dv-small": WriteCase(
        "value IN (3, 7)", lambda r: r["value"] not in (3, 7), "(100)", [{"value": 100}]),
    "delta-0.8.0-special-partition": WriteCase(
        "x = 'A/A'", lambda r: r["x"] != "A/A", "('C=C %/#', 3)", [{"x": "C=C %/#", "y": 3}]),
    "dv-with-columnmapping": WriteCase(
        "col1 % 3 = 0", lambda r: r["col1"] % 3 != 0, "(9, 99, 'isolde')", [{"part": 9, "col1": 99, "col2": "isolde"}]),
    "data-reader-escaped-chars": WriteCase(
        "_1 = 'foo1'", lambda r: r["_1"] != "foo1", "('foo4', 'bar+%24')", [{"_1": "foo4", "_2": "bar+%24"}]),
    "simple_table_with_checkpoint": WriteCase(
        "version < 3", lambda r: r["version"] >= 3, "(11)", [{"version": 11}]),
    # id mode: files isolde writes carry Delta's field ids (the engine's own files are the reference)
    "table-with-columnmapping-mode-id": WriteCase(
        "IntegerType IN (1, 2)", lambda r: r["IntegerType"] not in (1, 2),
        "SELECT * FROM delta.`{path}` VERSION AS OF {start} WHERE IntegerType = 2",
        lambda before: [r for r in before if r["IntegerType"] == 2]),
    "table-with-icebegCompatV2Enabled": WriteCase(  # array elements / map keys and values have ids too
        "IntegerType IN (1, 2)", lambda r: r["IntegerType"] not in (1, 2),
        "SELECT * FROM delta.`{path}` VERSION AS OF {start} WHERE IntegerType = 2",
        lambda before: [r for r in before if r["IntegerType"] == 2]),
    "data-skipping-basic-stats-all-types-columnmapping-id": WriteCase(
        "as_int = 0", lambda r: r["as_int"] != 0,
        "SELECT * FROM delta.`{path}` VERSION AS OF {start}", lambda before: before),
    "data-reader-timestamp_ntz-id-mode": WriteCase(  # partitioned by a timestamp_ntz column
        "id % 3 = 0", lambda r: r["id"] % 3 != 0,
        "SELECT * FROM delta.`{path}` VERSION AS OF {start} WHERE id = 3",
        lambda before: [r for r in before if r["id"] == 3]),
    "table_with_liquid_clustering": WriteCase(  # writer feature `liquid`, delta.liquid domain
        "id IN (3, 4)", lambda r: r["id"] not in (3, 4), "(100)", [{"id": 100}]),
}


def _copy(name: str, tmp_path) -> str:
    target = str(tmp_path / name)
    shutil.copytree(_path(name), target)
    return target


@pytest.mark.parametrize("name", sorted(WRITES))
def test_delete_and_insert_round_trip(session, tmp_path, name):
    """DELETE + INSERT through isolde on a copy; delta-rs reads back the same rows as isolde,
    and they are the rows before minus the deleted plus the inserted."""
    case = WRITES[name]
    path = _copy(name, tmp_path)
    before = delta_rs_table(path)
    columns = before.column_names
    start = DeltaLog(path).update().version
    deleted = session.execute(f"DELETE FROM delta.`{path}` WHERE {case.delete_where}")
    query = case.insert.format(path=path, start=start)
    query = query if query.startswith("SELECT") else f"VALUES {query}"
    inserted = session.execute(f"INSERT INTO delta.`{path}` {query}")
    assert (deleted.version, inserted.version) == (start + 1, start + 2)
    kept = [r for r in before.to_pylist() if case.keep(r)]
    assert len(kept) < before.num_rows  # the DELETE removed something
    added = case.inserted(before.to_pylist()) if callable(case.inserted) else case.inserted
    assert added
    expected = sorted((tuple(_norm(r[c]) for c in columns) for r in kept + added), key=repr)
    by_delta_rs = delta_rs_table(path)
    by_isolde = isolde_table(session, path)
    assert _rows(by_delta_rs, columns) == expected
    assert _rows(by_isolde, columns) == expected
    # the table as it was is still there for both
    assert _rows(isolde_table(session, path, start), columns) == _rows(before, columns)
    snap = DeltaLog(path).update()
    if snap.configuration.get("delta.columnMapping.mode") == "id":
        assert_field_ids_as_the_engine_wrote_them(_path(name), path, start)


def _field_id_tree(t: pa.DataType) -> list:
    """(name, Parquet field id) of every field nested in an Arrow type, list elements and map
    keys / values included, depth first."""
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_list(t):
        fields = [t.value_field]
    elif pa.types.is_map(t):
        fields = [t.key_field, t.item_field]
    else:
        return []
    return [((f.name, (f.metadata or {}).get(b"PARQUET:field_id")), _field_id_tree(f.type)) for f in fields]


def _file_field_ids(local: str) -> list:
    schema = pq.read_schema(local)
    return _field_id_tree(pa.struct([schema.field(i) for i in range(len(schema))]))


def assert_field_ids_as_the_engine_wrote_them(source: str, path: str, start: int) -> None:
    """Every file isolde added to a copied id-mode table names and numbers its Parquet fields
    (columns, nested struct fields, array elements, map keys and values) exactly as a file the
    other engine wrote."""
    from urllib.parse import unquote

    engine_files = DeltaLog(source).update().all_files
    reference = _file_field_ids(os.path.join(source, unquote(engine_files[0].path)))
    assert any(ident is not None for (_, ident), _ in reference)
    old = {a.path for a in DeltaLog(path).snapshot(start).all_files}
    new = [a for a in DeltaLog(path).update().all_files if a.path not in old]
    assert new
    for add in new:
        assert _file_field_ids(os.path.join(path, unquote(add.path))) == reference, add.path


@pytest.mark.parametrize("feature", ["collations-preview", "variantShredding-preview"])
def test_write_to_a_table_needing_a_writer_feature_isolde_lacks_is_refused(session, tmp_path, feature):
    """Every engine table here is now written; a copy whose latest commit adds a writer feature
    isolde does not implement (as a newer Delta would) is read, and refused for writing."""
    import json

    path = _copy("table-with-dv-small", tmp_path)
    snap = DeltaLog(path).update()
    p = snap.protocol
    protocol = {"minReaderVersion": p.min_reader_version, "minWriterVersion": 7,
                "readerFeatures": list(p.reader_features or []),
                "writerFeatures": sorted(set(p.writer_features or []) | {feature})}
    latest = snap.version + 1
    with open(os.path.join(path, "_delta_log", f"{latest:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL"}}) + "\n")
        fh.write(json.dumps({"protocol": protocol}) + "\n")
    # still read (delta-rs refuses some of these features: its rows at the version before)
    assert_same_rows(isolde_table(session, path), delta_rs_table(path, latest - 1))
    with pytest.raises(UnsupportedFeatureError) as info:
        session.execute(f"DELETE FROM delta.`{path}` WHERE value IS NULL")
    assert info.value.error_class == "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE"
    message = str(info.value)
    assert message.startswith(f"Cannot write to table {path}: its version {latest} ")
    assert feature in message
    assert DeltaLog(path).update().version == latest  # nothing committed


# --------------------------------------------------------------------------- clustered tables


def _as_delta_spark_clusters(path: str) -> None:
    """Rewrite the copied table_with_liquid_clustering log as Delta Spark writes a clustered
    table: writer feature ``clustering``, domain ``delta.clustering``."""
    import json

    log = os.path.join(path, "_delta_log")
    os.remove(os.path.join(log, "00000000000000000000.crc"))
    lines = []
    for line in open(os.path.join(log, "00000000000000000000.json")):
        action = json.loads(line)
        if "protocol" in action:
            features = action["protocol"]["writerFeatures"]
            features[features.index("liquid")] = "clustering"
        if action.get("domainMetadata", {}).get("domain") == "delta.liquid":
            action["domainMetadata"] = {"domain": "delta.clustering", "removed": False,
                                        "configuration": json.dumps({"clusteringColumns": [["id"]]})}
        lines.append(json.dumps(action))
    with open(os.path.join(log, "00000000000000000000.json"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


CLUSTERED = {"liquid": "delta.liquid", "clustering": "delta.clustering"}


def _clustered_copy(tmp_path, flavour: str) -> str:
    path = _copy("table_with_liquid_clustering", tmp_path)
    if flavour == "clustering":
        _as_delta_spark_clusters(path)
    return path


@pytest.mark.parametrize("flavour", sorted(CLUSTERED))
def test_clustered_table_from_another_engine_keeps_its_clustering(session, tmp_path, flavour):
    """INSERT, DELETE, UPDATE and OPTIMIZE on a table another engine clustered (Databricks'
    preview `liquid` feature as delta-rs's copy has it, and Delta's `clustering`): protocol and
    clustering domain stay as they were, OPTIMIZE clusters by the domain's column, and
    delta-rs reads the rows isolde does."""
    path = _clustered_copy(tmp_path, flavour)
    first = DeltaLog(path).update()
    domain = CLUSTERED[flavour]
    for sql in ("DELETE FROM {t} WHERE id IN (3, 4)", "INSERT INTO {t} VALUES (100), (101)",
                "UPDATE {t} SET id = id + 1000 WHERE id = 5", "OPTIMIZE {t}"):
        session.execute(sql.format(t=f"delta.`{path}`"))
    expected = [(i,) for i in (0, 1, 2, 6, 7, 8, 9, 100, 101, 1005)]
    assert sorted(tuple(r.values()) for r in delta_rs_table(path).to_pylist()) == expected
    assert sorted(tuple(r.values()) for r in isolde_table(session, path).to_pylist()) == expected
    snap = DeltaLog(path).update()
    assert snap.protocol == first.protocol
    assert snap.domain_metadata[domain].configuration == first.domain_metadata[domain].configuration
    assert [a.clustering_provider for a in snap.all_files] == ["liquid"]  # clustered by `id`
    assert DeltaLog(path).history(1)[0]["operationParameters"]["clusterBy"] == '["id"]'


@pytest.mark.parametrize("flavour", sorted(CLUSTERED))
def test_row_ids_stay_unique_on_a_clustered_table_from_another_engine(session, tmp_path, flavour):
    """The copy tracks row ids (rowIdHighWaterMark 9 in its delta.rowTracking domain): rows
    isolde adds get ids above it, and the high-water mark moves past them."""
    import json

    path = _clustered_copy(tmp_path, flavour)
    session.execute(f"INSERT INTO delta.`{path}` VALUES (100), (101)")
    snap = DeltaLog(path).update()
    ranges = sorted((a.base_row_id, a.base_row_id + a.parsed_stats["numRecords"] - 1) for a in snap.all_files)
    assert all(lo > prev_hi for (_, prev_hi), (lo, _) in zip(ranges, ranges[1:]))
    mark = json.loads(snap.domain_metadata["delta.rowTracking"].configuration)["rowIdHighWaterMark"]
    assert mark == ranges[-1][1] == 11


# --------------------------------------------------------------------------- broken tables


def test_missing_deletion_vector_file_names_table_version_and_files(session, tmp_path):
    path = _copy("table-with-dv-small", tmp_path)
    snap = DeltaLog(path).update()
    (add,) = [a for a in snap.all_files if a.deletion_vector is not None]
    dv_path = dv_file_path(path, add.deletion_vector)
    os.remove(dv_path)
    with pytest.raises(DeletionVectorError) as info:
        isolde_table(session, path)
    error = info.value
    assert isinstance(error, ExecutionError)
    assert error.error_class == "DELTA_FILE_NOT_FOUND_DETAILED" and error.sqlstate == "42K03"
    assert str(error) == (
        f"Cannot read version 1 of table {path}: the deletion vector file {dv_path} of data file {add.path} "
        "does not exist. Was it deleted outside Delta, by hand or by a VACUUM with too short a retention?")
    assert (error.table_path, error.data_file, error.version) == (path, add.path, 1)
    # version 0 has no deletion vector and still reads
    assert isolde_table(session, path, 0).num_rows == 10


# --------------------------------------------------------------------------- column mapping reads


def test_name_mode_reads_files_without_field_ids_whatever_the_session_says(session, spark):
    """table_with_partitioning_mapping turned column mapping on after its first file was
    written: that file has no Parquet field ids, the later one has. Name mode matches by name,
    so neither Spark's refusal of a read schema with ids nor a user's own
    spark.sql.parquet.fieldId.read.enabled=true (which would match by id and read NULLs from
    the old file) changes the rows."""
    path = _path("table_with_partitioning_mapping")
    expected = delta_rs_table(path)
    key = "spark.sql.parquet.fieldId.read.enabled"
    before = spark.conf.get(key, "false")
    try:
        for value in ("false", "true"):
            spark.conf.set(key, value)
            assert_same_rows(isolde_table(session, path), expected)
    finally:
        spark.conf.set(key, before)


def test_id_mode_matches_columns_by_field_id_and_leaves_the_session_alone(session, spark, tmp_path):
    """An id-mode table whose data file names its columns differently from the log's physical
    names (as a converted Iceberg table's files may): only the field ids connect them."""
    import json

    import pyarrow.parquet as pq

    from isolde.executor.log.actions import AddFile, CommitInfo, Metadata, Protocol, serialize_commit

    path = str(tmp_path / "id_table")
    os.makedirs(os.path.join(path, "_delta_log"))
    file_schema = pa.schema([pa.field("renamed_a", pa.int64(), metadata={"PARQUET:field_id": "1"}),
                             pa.field("renamed_b", pa.string(), metadata={"PARQUET:field_id": "2"})])
    pq.write_table(pa.table({"renamed_a": [1, 2, 3], "renamed_b": ["x", "y", None]}, schema=file_schema),
                   os.path.join(path, "part-0.parquet"))

    def column(name, typ, ident):
        return {"name": name, "type": typ, "nullable": True,
                "metadata": {"delta.columnMapping.id": ident, "delta.columnMapping.physicalName": f"col-{ident}"}}

    schema = json.dumps({"type": "struct", "fields": [column("a", "long", 1), column("b", "string", 2)]})
    actions = [CommitInfo(timestamp=1, operation="CREATE"), Protocol(2, 5),
               Metadata(schema, (), {"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId": "2"}),
               AddFile("part-0.parquet", {}, os.path.getsize(os.path.join(path, "part-0.parquet")), 1)]
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json"), "wb") as fh:
        fh.write(serialize_commit(actions))
    key = "spark.sql.parquet.fieldId.read.enabled"
    before = spark.conf.get(key, "false")
    got = isolde_table(session, path)
    assert got.column_names == ["a", "b"]
    assert sorted(got.to_pylist(), key=repr) == sorted(
        [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": None}], key=repr)
    assert spark.conf.get(key, "false") == before  # read through a clone of the session
