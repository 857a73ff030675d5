"""COPY INTO: idempotent loads remembered in the table (domain metadata), FILES / PATTERN, the
SELECT form, schema checks and evolution, CSV / JSON / Parquet, reader modes, the result row,
and concurrency (same file: ConcurrentTransactionException; distinct files and plain INSERTs:
no conflict). Every loaded table is read back by delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import isolde
from isolde import errors as E
from tests.helpers.oracle import read_delta_rows, sorted_rows

pytestmark = pytest.mark.spark


# --------------------------------------------------------------------------- helpers


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def _log(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _commit_info(path: str, version: int) -> dict:
    return next(a["commitInfo"] for a in _log(path, version) if "commitInfo" in a)


def _version(session, table: str) -> int:
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(table,)), session.current_database).log.snapshot().version


def _same(session, table_path, name: str) -> list[tuple]:
    """isolde's rows == delta-rs's rows; returns them sorted."""
    ours = sorted_rows(session.execute(f"SELECT * FROM {name}").rows)
    assert ours == read_delta_rows(table_path(session, name))
    return ours


def _prepare(session, sql: str):
    """session.prepare(sql); while planner/plan.py does not list CopyInto among the writes, the
    runner is called as Session._run would (same PreparedWrite, same commit)."""
    try:
        return session.prepare(sql)
    except E.AnalysisError as e:
        if e.error_class != "NOT_A_WRITE":
            raise
    from isolde.executor.session.context import ExecutionContext
    from isolde.executor.jobs.copy_into import run_copy_into

    [stmt] = isolde.parse(sql)
    return run_copy_into(ExecutionContext(session, stmt), stmt)


def _no_staging(path: str) -> None:
    assert [n for n in os.listdir(path) if n.startswith(".isolde-staging")] == []


@pytest.fixture
def csv_dir(tmp_path):
    d = tmp_path / "landing"
    _write(str(d / "a.csv"), "id,name,day\n1,ann,2024-01-01\n2,bob,2024-01-02\n")
    _write(str(d / "b.csv"), "id,name,day\n3,cy,2024-01-03\n")
    return str(d)


# --------------------------------------------------------------------------- idempotence


def test_csv_folder_loaded_once_new_files_later_force_reloads(session, table_path, csv_dir):
    session.execute("CREATE TABLE t (id INT, name STRING, day DATE)")
    sql = f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')"
    r = session.execute(sql)
    assert r.version == 1 and r.operation == "COPY INTO"
    assert r.columns == ["num_affected_rows", "num_inserted_rows", "num_skipped_corrupt_files"]
    assert tuple(r.first()) == (3, 3, 0) and r.first().num_inserted_rows == 3
    path = table_path(session, "t")
    info = _commit_info(path, 1)
    assert info["operation"] == "COPY INTO" and info["isBlindAppend"] is True
    assert info["operationParameters"]["fileFormat"] == "CSV"
    assert info["operationParameters"]["source"] == os.path.abspath(csv_dir)
    assert info["operationMetrics"]["numOutputRows"] == "3" and info["operationMetrics"]["numSourceFiles"] == "2"
    domains = {a["domainMetadata"]["domain"]: json.loads(a["domainMetadata"]["configuration"])
               for a in _log(path, 1) if "domainMetadata" in a}
    a_csv = os.path.join(os.path.abspath(csv_dir), "a.csv")
    assert set(domains) == {"isolde.copyInto:" + a_csv, "isolde.copyInto:" + os.path.join(csv_dir, "b.csv")}
    assert domains["isolde.copyInto:" + a_csv]["size"] == os.path.getsize(a_csv)
    protocol = next(a["protocol"] for a in _log(path, 1) if "protocol" in a)
    assert "domainMetadata" in protocol["writerFeatures"]
    expected = [(1, "ann", dt.date(2024, 1, 1)), (2, "bob", dt.date(2024, 1, 2)), (3, "cy", dt.date(2024, 1, 3))]
    assert _same(session, table_path, "t") == expected

    # second run: nothing new, nothing committed, zeros
    again = session.execute(sql)
    assert tuple(again.first()) == (0, 0, 0) and again.committed is False and again.version == 1
    assert "nothing to load" in again.message and "loaded before" in again.message
    assert _version(session, "t") == 1 and _same(session, table_path, "t") == expected

    # a file added later is the only one the third run loads; a changed, already-loaded file is
    # skipped (by path, as Databricks documents)
    _write(os.path.join(csv_dir, "c.csv"), "id,name,day\n4,dee,2024-01-04\n")
    _write(os.path.join(csv_dir, "a.csv"), "id,name,day\n1,ann,2024-01-01\n2,bob,2024-01-02\n99,zed,2024-09-09\n")
    third = session.execute(sql)
    assert tuple(third.first()) == (1, 1, 0) and third.version == 2
    assert third.loaded_files == (os.path.join(os.path.abspath(csv_dir), "c.csv"),)
    expected.append((4, "dee", dt.date(2024, 1, 4)))
    assert _same(session, table_path, "t") == expected
    assert tuple(session.execute(sql).first()) == (0, 0, 0)

    # force: everything again (rows duplicated, as Databricks does)
    forced = session.execute(sql + " COPY_OPTIONS ('force' = 'true')")
    assert tuple(forced.first()) == (5, 5, 0) and forced.version == 3
    assert len(_same(session, table_path, "t")) == 9
    assert session.execute("SELECT count(*) FROM t WHERE id = 99").first()[0] == 1
    _no_staging(table_path(session, "t"))


def test_files_and_pattern(session, table_path, tmp_path):
    d = str(tmp_path / "in")
    _write(f"{d}/2024/jan.csv", "id,v\n1,x\n")
    _write(f"{d}/2024/feb.csv", "id,v\n2,y\n")
    _write(f"{d}/2023/dec.csv", "id,v\n3,z\n")
    _write(f"{d}/notes.txt", "not data\n")
    _write(f"{d}/_SUCCESS", "")
    session.execute("CREATE TABLE t (id BIGINT, v STRING)")
    opts = "FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')"
    r = session.execute(f"COPY INTO t FROM '{d}' {opts} FILES = ('2024/jan.csv')")
    assert tuple(r.first()) == (1, 1, 0)
    assert json.loads(_commit_info(table_path(session, "t"), 1)["operationParameters"]["files"]) == ["2024/jan.csv"]
    # PATTERN: '*' stays inside a folder level; jan.csv was loaded already
    r = session.execute(f"COPY INTO t FROM '{d}' {opts} PATTERN = '2024/*.csv'")
    assert tuple(r.first()) == (1, 1, 0)
    assert _commit_info(table_path(session, "t"), 2)["operationParameters"]["pattern"] == "2024/*.csv"
    r = session.execute(f"COPY INTO t FROM '{d}' {opts} PATTERN = '*.csv'")
    assert r.committed is False and "no file matches PATTERN" in r.message
    r = session.execute(f"COPY INTO t FROM '{d}' {opts} PATTERN = '{{2023,2022}}/[a-d]*.csv'")
    assert tuple(r.first()) == (1, 1, 0)
    assert _same(session, table_path, "t") == [(1, "x"), (2, "y"), (3, "z")]
    with pytest.raises(E.AnalysisError, match=r"FILES names 1 file\(s\) that are not in .*2024/mar.csv"):
        session.execute(f"COPY INTO t FROM '{d}' {opts} FILES = ('2024/jan.csv', '2024/mar.csv')")
    # a single file as the source
    _write(f"{tmp_path}/one.csv", "id,v\n7,w\n")
    assert tuple(session.execute(f"COPY INTO t FROM '{tmp_path}/one.csv' {opts}").first()) == (1, 1, 0)
    assert _version(session, "t") == 4


# --------------------------------------------------------------------------- SELECT form, types


def test_select_form_with_casts_and_metadata(session, table_path, csv_dir):
    session.execute("CREATE TABLE t (id BIGINT, label STRING, day DATE, src STRING)")
    r = session.execute(
        f"COPY INTO t FROM (SELECT CAST(id AS BIGINT) * 10 AS id, upper(name) AS label, to_date(day) AS day, "
        f"_metadata.file_name AS src FROM '{csv_dir}') FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')")
    assert tuple(r.first()) == (3, 3, 0)
    assert _same(session, table_path, "t") == [
        (10, "ANN", dt.date(2024, 1, 1), "a.csv"), (20, "BOB", dt.date(2024, 1, 2), "a.csv"),
        (30, "CY", dt.date(2024, 1, 3), "b.csv")]
    # the files are remembered for the SELECT form too
    again = session.execute(
        f"COPY INTO t FROM (SELECT CAST(id AS BIGINT) AS id FROM '{csv_dir}') FILEFORMAT = CSV "
        "FORMAT_OPTIONS ('header' = 'true')")
    assert again.committed is False
    # a text column into an INT column needs a CAST: the error names column and types
    session.execute("CREATE TABLE u (id INT, name STRING)")
    with pytest.raises(E.AnalysisError, match=r"column `id` is STRING in the CSV source but INT in the table.*CAST"):
        session.execute(f"COPY INTO u FROM (SELECT id, name FROM '{csv_dir}') FILEFORMAT = CSV "
                        "FORMAT_OPTIONS ('header' = 'true')")
    assert _version(session, "u") == 0


def test_csv_text_parsed_as_table_types_and_reader_modes(session, table_path, tmp_path):
    d = str(tmp_path / "in")
    _write(f"{d}/good.csv", "id;amount;ok;ts\n1;2.50;true;2024-01-01 10:00:00\n")
    _write(f"{d}/bad.csv", "id;amount;ok;ts\n2;oops;false;2024-01-02 11:00:00\n3;1.25;true;2024-01-03 12:00:00\n")
    session.execute("CREATE TABLE t (id INT, amount DECIMAL(10,2), ok BOOLEAN, ts TIMESTAMP)")
    base = f"COPY INTO t FROM '{d}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true', 'sep' = ';'"
    with pytest.raises(E.ExecutionError, match=r"(?s)bad\.csv.*Malformed records"):
        session.execute(base + ", 'mode' = 'FAILFAST')")
    assert _version(session, "t") == 0
    _no_staging(table_path(session, "t"))
    r = session.execute(base + ", 'mode' = 'DROPMALFORMED')")
    assert tuple(r.first()) == (2, 2, 0)
    import decimal

    assert sorted_rows(session.execute("SELECT * FROM t").rows) == [
        (1, decimal.Decimal("2.50"), True, dt.datetime(2024, 1, 1, 10, 0)),
        (3, decimal.Decimal("1.25"), True, dt.datetime(2024, 1, 3, 12, 0))]
    assert read_delta_rows(table_path(session, "t"), ["id", "amount", "ok"]) == [
        (1, decimal.Decimal("2.50"), True), (3, decimal.Decimal("1.25"), True)]
    # PERMISSIVE (the default) keeps the row with NULL for the value that does not parse
    session.execute("CREATE TABLE p (id INT, amount DECIMAL(10,2), ok BOOLEAN, ts TIMESTAMP)")
    session.execute(f"COPY INTO p FROM '{d}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true', 'sep' = ';')")
    rows = session.execute("SELECT id, amount FROM p ORDER BY id").rows
    assert [tuple(x) for x in rows] == [(1, decimal.Decimal("2.50")), (2, None), (3, decimal.Decimal("1.25"))]


def test_headerless_csv_by_position(session, table_path, tmp_path):
    d = str(tmp_path / "in")
    _write(f"{d}/x.csv", "1,a\n2,b\n")
    session.execute("CREATE TABLE t (id INT, name STRING)")
    assert tuple(session.execute(f"COPY INTO t FROM '{d}' FILEFORMAT = CSV").first()) == (2, 2, 0)
    assert _same(session, table_path, "t") == [(1, "a"), (2, "b")]


# --------------------------------------------------------------------------- schema checks and evolution


def test_merge_schema_adds_a_column_and_mismatch_errors(session, table_path, tmp_path):
    d = str(tmp_path / "json")
    _write(f"{d}/1.json", '{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n')
    session.execute("CREATE TABLE t (id BIGINT, name STRING)")
    assert tuple(session.execute(f"COPY INTO t FROM '{d}' FILEFORMAT = JSON").first()) == (2, 2, 0)
    _write(f"{d}/2.json", '{"id": 3, "name": "c", "score": 9.5}\n')
    with pytest.raises(E.AnalysisError, match=r"source has column\(s\) the table does not have: `score` DOUBLE"):
        session.execute(f"COPY INTO t FROM '{d}' FILEFORMAT = JSON")
    assert _version(session, "t") == 1
    r = session.execute(f"COPY INTO t FROM '{d}' FILEFORMAT = JSON COPY_OPTIONS ('mergeSchema' = 'true')")
    assert tuple(r.first()) == (1, 1, 0)
    assert any("metaData" in a for a in _log(table_path(session, "t"), 2))
    assert session.columns("t") == [("id", "bigint"), ("name", "string"), ("score", "double")]
    assert _same(session, table_path, "t") == [(1, "a", None), (2, "b", None), (3, "c", 9.5)]

    # a type that cannot be stored: named column and both types; nothing committed
    p = str(tmp_path / "pq")
    os.makedirs(p)
    pq.write_table(pa.table({"id": pa.array(["x1"]), "name": pa.array(["n"])}), f"{p}/part.parquet")
    with pytest.raises(E.AnalysisError, match=r"column `id` is STRING in the PARQUET source but BIGINT in the table"):
        session.execute(f"COPY INTO t FROM '{p}' FILEFORMAT = PARQUET")
    with pytest.raises(E.AnalysisError, match=r"column `id` is STRING .* BIGINT"):
        session.execute(f"COPY INTO t FROM '{p}' FILEFORMAT = PARQUET COPY_OPTIONS ('mergeSchema' = 'true')")
    # a JSON string where the table has a number
    _write(f"{tmp_path}/j2/x.json", '{"id": "seven"}\n')
    with pytest.raises(E.AnalysisError, match=r"column `id` is STRING in the JSON source but BIGINT"):
        session.execute(f"COPY INTO t FROM '{tmp_path}/j2' FILEFORMAT = JSON")
    assert _version(session, "t") == 2


def test_schemaless_table_gets_schema_from_first_load(session, table_path, csv_dir):
    session.execute("CREATE TABLE IF NOT EXISTS t")
    session.execute("CREATE TABLE IF NOT EXISTS t")  # Databricks' idiom runs it every time
    assert session.columns("t") == []
    sql = f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true', 'inferSchema' = 'true')"
    with pytest.raises(E.AnalysisError, match=r"has no columns yet.*mergeSchema"):
        session.execute(sql)
    r = session.execute(sql + " COPY_OPTIONS ('mergeSchema' = 'true')")
    assert tuple(r.first()) == (3, 3, 0)
    assert session.columns("t") == [("id", "int"), ("name", "string"), ("day", "date")]
    assert _same(session, table_path, "t") == [
        (1, "ann", dt.date(2024, 1, 1)), (2, "bob", dt.date(2024, 1, 2)), (3, "cy", dt.date(2024, 1, 3))]
    assert session.execute(sql + " COPY_OPTIONS ('mergeSchema' = 'true')").committed is False


# --------------------------------------------------------------------------- formats


def test_json_and_parquet(session, table_path, tmp_path):
    j = str(tmp_path / "j")
    _write(f"{j}/a.json", '[{"id": 1, "tags": ["x", "y"], "at": "2024-05-01"},\n {"id": 2, "tags": [], "at": null}]')
    session.execute("CREATE TABLE t (id INT, tags ARRAY<STRING>, at DATE)")
    r = session.execute(f"COPY INTO t FROM '{j}' FILEFORMAT = JSON FORMAT_OPTIONS ('multiLine' = 'true')")
    assert tuple(r.first()) == (2, 2, 0)
    assert sorted_rows(session.execute("SELECT id, tags, at FROM t").rows) == [
        (1, ["x", "y"], dt.date(2024, 5, 1)), (2, [], None)]
    assert read_delta_rows(table_path(session, "t"), ["id", "at"]) == [(1, dt.date(2024, 5, 1)), (2, None)]

    p = str(tmp_path / "p")
    os.makedirs(p)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "price": pa.array([1.5, 2.5])}), f"{p}/0.parquet")
    pq.write_table(pa.table({"price": pa.array([3.5]), "id": pa.array([3], pa.int32())}), f"{p}/1.parquet")
    session.execute("CREATE TABLE q (id BIGINT, price DOUBLE, note STRING) PARTITIONED BY (id)")
    r = session.execute(f"COPY INTO q FROM '{p}' FILEFORMAT = PARQUET")
    assert tuple(r.first()) == (3, 3, 0)
    ours = sorted_rows(session.execute("SELECT id, price, note FROM q").rows)
    assert ours == [(1, 1.5, None), (2, 2.5, None), (3, 3.5, None)]
    assert read_delta_rows(table_path(session, "q"), ["id", "price", "note"]) == ours
    assert sorted(os.listdir(table_path(session, "q")))[:3] == ["id=1", "id=2", "id=3"] or \
        {"id=1", "id=2", "id=3"} <= set(os.listdir(table_path(session, "q")))
    assert tuple(session.execute(f"COPY INTO q FROM '{p}' FILEFORMAT = PARQUET").first()) == (0, 0, 0)


def test_ignore_corrupt_files_counted(session, table_path, tmp_path):
    p = str(tmp_path / "p")
    os.makedirs(p)
    pq.write_table(pa.table({"id": pa.array([1, 2])}), f"{p}/good.parquet")
    _write(f"{p}/broken.parquet", "this is not parquet at all, just text pretending")
    session.execute("CREATE TABLE t (id BIGINT)")
    with pytest.raises(E.IsoldeError, match="broken.parquet"):
        session.execute(f"COPY INTO t FROM '{p}' FILEFORMAT = PARQUET")
    assert _version(session, "t") == 0
    r = session.execute(f"COPY INTO t FROM '{p}' FILEFORMAT = PARQUET FORMAT_OPTIONS ('ignoreCorruptFiles' = 'true')")
    assert tuple(r.first()) == (2, 2, 1)
    assert r.loaded_files == (os.path.join(os.path.abspath(p), "good.parquet"),)
    assert _same(session, table_path, "t") == [(1,), (2,)]


# --------------------------------------------------------------------------- errors


def test_errors_name_the_thing_and_commit_nothing(session, table_path, tmp_path, csv_dir):
    session.execute("CREATE TABLE t (id INT, name STRING)")
    os.makedirs(tmp_path / "empty")
    cases = [
        (f"COPY INTO t FROM '{tmp_path}/nope' FILEFORMAT = CSV", E.AnalysisError, r"source '.*nope' does not exist"),
        (f"COPY INTO t FROM '{tmp_path}/empty' FILEFORMAT = CSV", E.AnalysisError, r"empty folder"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CVS", E.AnalysisError, r"Unknown FILEFORMAT = CVS.*`CSV`"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('heder' = 'true')", E.AnalysisError,
         r"Unknown FORMAT_OPTIONS 'heder'.*`header`"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'yes')", E.AnalysisError,
         r"'header' must be 'true' or 'false'"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('mode' = 'LENIENT')", E.AnalysisError,
         r"'mode' must be one of PERMISSIVE"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV COPY_OPTIONS ('forse' = 'true')", E.AnalysisError,
         r"Unknown COPY_OPTIONS 'forse'.*`force`"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV COPY_OPTIONS ('mergeSchema' = '1')", E.AnalysisError,
         r"'mergeSchema' must be 'true' or 'false'"),
        (f"COPY INTO nosuch FROM '{csv_dir}' FILEFORMAT = CSV", E.TableNotFoundError, r"nosuch"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')", E.AnalysisError,
         r"source has column\(s\) the table does not have: `day` STRING"),
        (f"COPY INTO t FROM '{csv_dir}' FILEFORMAT = CSV PATTERN = '[ab.csv'", E.AnalysisError, r"unclosed '\['"),
    ]
    for sql, cls, pattern in cases:
        with pytest.raises(cls, match=pattern):
            session.execute(sql)
    assert _version(session, "t") == 0
    _no_staging(table_path(session, "t"))


# --------------------------------------------------------------------------- concurrency


def test_concurrent_copy_into_same_file_conflicts(session, table_path, csv_dir, tmp_path):
    session.execute("CREATE TABLE t (id INT, name STRING, day DATE)")
    opts = "FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')"
    # a first load puts the domainMetadata feature in the protocol
    other = str(tmp_path / "other")
    _write(f"{other}/z.csv", "id,name,day\n0,zero,2024-01-01\n")
    session.execute(f"COPY INTO t FROM '{other}' {opts}")

    first = _prepare(session, f"COPY INTO t FROM '{csv_dir}' {opts}")
    second = _prepare(session, f"COPY INTO t FROM '{csv_dir}' {opts} FILES = ('b.csv')")
    assert tuple(first.commit().first()) == (3, 3, 0)
    with pytest.raises(E.ConcurrentTransactionException) as info:
        second.commit()
    assert info.value.winning_operation == "COPY INTO" and "b.csv" in str(info.value)
    assert second.state == "failed"
    rows = _same(session, table_path, "t")
    assert [r[0] for r in rows] == [0, 1, 2, 3]  # b.csv once
    _no_staging(table_path(session, "t"))


def test_concurrent_copy_into_distinct_files_and_insert_do_not_conflict(session, table_path, csv_dir, tmp_path):
    session.execute("CREATE TABLE t (id INT, name STRING, day DATE)")
    opts = "FILEFORMAT = CSV FORMAT_OPTIONS ('header' = 'true')"
    other = str(tmp_path / "other")
    _write(f"{other}/z.csv", "id,name,day\n0,zero,2024-01-01\n")
    session.execute(f"COPY INTO t FROM '{other}' {opts}")

    a = _prepare(session, f"COPY INTO t FROM '{csv_dir}' {opts} FILES = ('a.csv')")
    b = _prepare(session, f"COPY INTO t FROM '{csv_dir}' {opts} FILES = ('b.csv')")
    ins = session.prepare("INSERT INTO t VALUES (100, 'ins', DATE'2024-02-02')")
    assert a.commit().version == 2
    assert ins.commit().version == 3   # INSERT after a concurrent COPY INTO
    assert b.commit().version == 4     # COPY INTO after concurrent COPY INTO (other file) and INSERT
    # and a COPY INTO that loses the race to an INSERT
    _write(os.path.join(csv_dir, "c.csv"), "id,name,day\n4,dee,2024-01-04\n")
    c = _prepare(session, f"COPY INTO t FROM '{csv_dir}' {opts}")
    session.execute("INSERT INTO t VALUES (101, 'ins2', DATE'2024-02-03')")
    assert tuple(c.commit().first()) == (1, 1, 0)
    assert [r[0] for r in _same(session, table_path, "t")] == [0, 1, 2, 3, 4, 100, 101]
    assert tuple(session.execute(f"COPY INTO t FROM '{csv_dir}' {opts}").first()) == (0, 0, 0)
