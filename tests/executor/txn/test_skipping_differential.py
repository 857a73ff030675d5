"""Data skipping against Spark with no skipping at all (issue 17).

Three tables, many small files each (one to three rows a file, files that are all NULL,
files with NaN / -0.0 / +-Infinity, edge values of every type):

    wide     isolde-written, one column per primitive type (tinyint .. bigint, float, double,
             decimal(38,18) / (5,2) / (10,0) / (18,9), short and long non-ASCII strings,
             boolean, date, timestamp, timestamp_ntz, binary)
    parted   isolde-written, partitioned by int, string, date, decimal, double, boolean and
             timestamp columns (NULL partitions, -0.0 / 0.0 / NaN folders)
    deltars  written by delta-rs (its own statistics: JSON floats for decimals, float maxima
             that ignore NaN, millisecond-truncated timestamps, byte-truncated strings)

A seeded generator (skipping_cases.Generator) writes thousands of predicates biased to the
values stored, the min/max statistics in the log and their neighbours. The oracle is Spark
reading every data file's Parquet directly (partition values added as typed columns from
the inserted literals), evaluating many predicates per query, per row, under each session
time zone in skipping_cases.ZONES. A file that holds a row the oracle says matches must
never be skipped by ``Predicate(sql, schema, partition_columns).file_may_match(add)``.
A sample also runs end to end (SELECT through the isolde session; DELETE, UPDATE and MERGE
on copies) and must touch exactly the oracle's rows. Predicates Spark refuses are counted,
not compared. The pruning isolde achieves is printed (run with -s to see it).

Replay with another seed: ISOLDE_SKIPPING_SEED=7 pytest tests/executor/txn/test_skipping_differential.py -s
(ISOLDE_SKIPPING_SCALE=3 multiplies the number of random predicates.)
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pytest

from tests.helpers import skipping_cases as K  # noqa: E402

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("ISOLDE_SKIPPING_SEED", "17"))
#: random predicates per table in the first zone (UTC), after one comparison per stored value and
#: statistic of every column (Generator.sweep); the other zones get time-dependent ones
_SCALE = float(os.environ.get("ISOLDE_SKIPPING_SCALE", "1"))
PREDICATES = {k: int(v * _SCALE) for k, v in {"wide": 700, "parted": 300, "deltars": 350}.items()}
#: per other zone: this many of the first zone's time-dependent predicates again, and as many new ones
ZONE_PREDICATES = {k: int(v * _SCALE) for k, v in {"wide": 150, "parted": 70, "deltars": 80}.items()}
BATCH = 300  # predicates per oracle query
SHOW = 40  # failures printed


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    name: str
    ref: str  # how isolde SQL names it
    path: str
    columns: list  # skipping_cases.Column (without rid)
    rows: dict  # rid -> {column: value}
    partition_columns: tuple = ()
    schema: dict = field(default_factory=dict)
    files: list = field(default_factory=list)  # AddFile
    view: str = ""
    df: object = None  # the oracle's cached rows

    @property
    def by_file(self) -> dict:
        return {file_key(a): a for a in self.files}


def file_key(add) -> str:
    """A data file's path relative to its table, as on disk (file names repeat across partitions)."""
    return os.path.normpath(unquote(add.path))


def uri_key(table: "Table", uri: str) -> str:
    """``_metadata.file_path`` (a percent-encoded URI) as a ``file_key``."""
    path = unquote(uri[len("file:"):] if uri.startswith("file:") else uri)
    while path.startswith("//"):
        path = path[1:]
    return os.path.relpath(os.path.realpath(path), os.path.realpath(table.path))


def _load(table: Table) -> None:
    from isolde.executor.log.delta_log import DeltaLog

    snap = DeltaLog.for_table(table.path).snapshot()
    table.schema = snap.schema
    table.partition_columns = tuple(snap.partition_columns)
    table.files = list(snap.all_files)
    assert not any(a.deletion_vector for a in table.files), "the oracle reads files without deletion vectors"
    assert len(table.by_file) == len(table.files), "file paths must be unique"


def _insert_groups(designs: list[list[dict]]) -> list[tuple[int, list[list[dict]]]]:
    """(rows per file, designs) per INSERT: an even number of equally long designs, written
    with spark.sql.files.maxRecordsPerFile = their length, becomes one file per design (the
    VALUES rows split evenly over the two local tasks)."""
    by_len = collections.defaultdict(list)
    for d in designs:
        by_len[len(d)].append(d)
    groups = []
    for n, same in sorted(by_len.items()):
        for i in range(0, len(same), 12):
            chunk = same[i:i + 12]
            if len(chunk) > 1 and len(chunk) % 2:
                groups.append((n, chunk[:-1]))
                chunk = chunk[-1:]
            groups.append((n, chunk))
    return groups


def build_isolde_table(s, name: str, columns, designs, partitioned=False) -> Table:
    rid = 0
    rows = {}
    cols_sql = ", ".join(f"{c.name} {c.sql_type}" for c in columns)
    parts = [c.name for c in columns if c.partition]
    clause = f" PARTITIONED BY ({', '.join(parts)})" if partitioned else ""
    s.execute(f"CREATE TABLE {name} (rid INT, {cols_sql}){clause}")
    for per_file, group in _insert_groups(designs):
        values = []
        for design in group:
            for row in design:
                rid += 1
                rows[rid] = dict(row)
                values.append("(" + ", ".join([str(rid)] + [K.insert_literal(c, row[c.name]) for c in columns]) + ")")
        s.execute(f"SET spark.sql.files.maxRecordsPerFile = {per_file}")
        s.execute(f"INSERT INTO {name} VALUES {', '.join(values)}")
    s.execute("RESET spark.sql.files.maxRecordsPerFile")
    from isolde.grammar import ast

    path = s.catalog.resolve(ast.TableRef(parts=(name,)), s.current_database).path
    table = Table(name, name, path, columns, rows)
    _load(table)
    return table


def _arrow_type(c):
    return {"INT": pa.int32(), "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
            "DECIMAL(38,18)": pa.decimal128(38, 18), "DECIMAL(5,2)": pa.decimal128(5, 2), "STRING": pa.string(),
            "BOOLEAN": pa.bool_(), "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us", tz="UTC"),
            "TIMESTAMP_NTZ": pa.timestamp("us")}[c.sql_type]


def build_deltars_table(path: str, columns, designs) -> Table:
    from deltalake import write_deltalake

    schema = pa.schema([("rid", pa.int32())] + [(c.name, _arrow_type(c)) for c in columns])
    rid = 0
    rows = {}
    for design in designs:
        batch = {"rid": []}
        for c in columns:
            batch[c.name] = []
        for row in design:
            rid += 1
            rows[rid] = dict(row)
            batch["rid"].append(rid)
            for c in columns:
                v = row[c.name]
                if c.kind == "decimal" and v is not None:
                    v = v.quantize(K.D(1).scaleb(-c.scale), context=K.CTX)
                batch[c.name].append(v)
        write_deltalake(path, pa.table(batch, schema=schema), mode="append")
    table = Table("deltars", f"delta.`{path}`", path, columns, rows)
    _load(table)
    return table


# --------------------------------------------------------------------------- oracle


def make_view(spark, table: Table) -> None:
    """A cached view: every live file's rows as Spark reads its Parquet, plus `__file`."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    full = T.StructType.fromJson(table.schema)
    parts = {p.lower() for p in table.partition_columns}
    data_schema = T.StructType([f for f in full.fields if f.name.lower() not in parts])
    paths = [os.path.join(table.path, unquote(a.path)) for a in table.files]
    df = spark.read.schema(data_schema).parquet(*paths)
    df = df.select(*[F.col(f"`{f.name}`") for f in data_schema.fields], F.col("_metadata.file_path").alias("__file"))
    if parts:
        part_cols = [c for c in table.columns if c.partition]
        values = ", ".join("(" + ", ".join([str(rid)] + [K.insert_literal(c, row[c.name]) for c in part_cols]) + ")"
                           for rid, row in table.rows.items())
        typed = spark.sql(f"SELECT * FROM VALUES {values} AS v(rid, {', '.join(c.name for c in part_cols)})")
        df = df.join(typed, "rid")
    df = df.cache()
    files = {uri_key(table, r["__file"]) for r in df.select("__file").distinct().collect()}
    assert files == set(table.by_file), "Spark must read exactly the snapshot's files"
    assert df.count() == len(table.rows), "the oracle must see every row exactly once"
    table.view, table.df = f"__skipping_{table.name}", df
    df.createOrReplaceTempView(table.view)


#: the oracle's thousands of one-off projections run interpreted: compiling each would fill the
#: JVM's code cache (and cost more than evaluating ~100 rows)
_INTERPRETED = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}


def oracle(spark, table: Table, preds: list) -> dict:
    """pred index -> {file: [rids matching]} or the error text when Spark refuses the predicate."""
    saved = {k: spark.conf.get(k, None) for k in _INTERPRETED}
    for k, v in _INTERPRETED.items():
        spark.conf.set(k, v)
    try:
        return _oracle(spark, table, preds)
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _oracle(spark, table: Table, preds: list) -> dict:
    out: dict = {}

    def query(batch):
        cols = ", ".join(f"({p.sql}) AS `c{k}`" for k, p in enumerate(batch))
        return spark.sql(f"SELECT __file, rid, {cols} FROM {table.view}")

    def refuse(p, e):
        out[p.index] = str(e).strip().splitlines()[0][:200]

    def analysable(batch) -> list:
        """The predicates of ``batch`` Spark parses and analyses (analysis only: cheap to bisect)."""
        try:
            query(batch)
            return batch
        except Exception as e:  # noqa: BLE001 - parse and analysis errors
            if len(batch) == 1:
                refuse(batch[0], e)
                return []
            half = len(batch) // 2
            return analysable(batch[:half]) + analysable(batch[half:])

    def run(batch, df=None):
        try:
            rows = (df if df is not None else query(batch)).collect()
        except Exception as e:  # noqa: BLE001 - ANSI runtime errors (casts, overflow)
            if len(batch) == 1:
                refuse(batch[0], e)
                return
            half = len(batch) // 2
            run(batch[:half])
            run(batch[half:])
            return
        for p in batch:
            out[p.index] = collections.defaultdict(list)
        keys: dict = {}
        for r in rows:
            uri = r["__file"]
            key = keys.get(uri) or keys.setdefault(uri, uri_key(table, uri))
            for k, p in enumerate(batch):
                if r[f"c{k}"] is True:
                    out[p.index][key].append(r["rid"])

    for i in range(0, len(preds), BATCH):
        batch = preds[i:i + BATCH]
        try:
            df = query(batch)
        except Exception:  # noqa: BLE001
            batch, df = analysable(batch), None
        if batch:
            run(batch, df)
    return out


# --------------------------------------------------------------------------- isolde's answers


def isolde_answers(table: Table, pred) -> dict | str:
    """file -> may match (bool), or the exception text when isolde raised."""
    from isolde.executor.txn.predicates import Predicate

    try:
        p = Predicate(pred.sql, table.schema, table.partition_columns)
        return {file_key(a): bool(p.file_may_match(a)) for a in table.files}
    except Exception as e:  # noqa: BLE001 - raising is a failure class of its own
        return f"{type(e).__name__}: {e}"[:200]


# --------------------------------------------------------------------------- the run


@dataclass
class Failure:
    table: str
    zone: str
    pred: object
    file: str
    rids: list
    raised: str | None = None


@dataclass
class World:
    session: object
    tables: dict
    preds: dict = field(default_factory=dict)  # (table, zone) -> [Pred]
    truth: dict = field(default_factory=dict)  # (table, zone) -> {index: {file: rids} | error}
    answers: dict = field(default_factory=dict)  # (table, sql) -> {file: bool} | error
    failures: list = field(default_factory=list)
    refused: collections.Counter = field(default_factory=collections.Counter)
    pairs: collections.Counter = field(default_factory=collections.Counter)  # pruning statistics
    seconds: dict = field(default_factory=dict)


def _by_first_row(table: Table) -> list:
    """The table's files in the order their rows were designed: the log lists them in the order
    Spark's tasks finished, which would make the seeded predicates differ from run to run."""
    return sorted(table.files, key=lambda a: ((a.parsed_stats or {}).get("minValues") or {}).get("rid", 0))


def _typed_stats(table: Table) -> dict:
    out = collections.defaultdict(list)
    by_name = {c.name: c for c in table.columns}
    files = _by_first_row(table)
    for a in files:
        st = a.parsed_stats or {}
        for key in ("minValues", "maxValues"):
            for name, raw in (st.get(key) or {}).items():
                c = by_name.get(name)
                if c is not None:
                    v = K.parse_stat_value(raw, c)
                    if v is not None:
                        out[name].append(v)
    for a in files:  # partition values as written in the log
        for name, raw in a.partition_values.items():
            c = by_name.get(name)
            if c is not None and raw is not None:
                v = K.parse_stat_value(raw, c) if c.kind not in ("int", "double", "decimal") else _num(raw)
                if v is not None:
                    out[name].append(v)
    return out


def _num(raw: str):
    try:
        return int(raw)
    except ValueError:
        try:
            return K.D(raw) if K.D(raw).is_finite() else None
        except Exception:  # noqa: BLE001
            return None


def _stored(table: Table) -> dict:
    """column -> the distinct non-NULL values stored (0.0 and -0.0, and every NaN, kept apart)."""
    out = collections.defaultdict(list)
    seen = set()
    for row in table.rows.values():
        for name, v in row.items():
            key = (name, type(v).__name__, repr(v))
            if v is not None and key not in seen:
                seen.add(key)
                out[name].append(v)
    return out


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    import isolde

    t0 = time.perf_counter()
    base = tmp_path_factory.mktemp("skipping")
    s = isolde.connect(warehouse=str(base / "warehouse"), spark=spark)
    s.execute("SET spark.sql.session.timeZone = UTC")
    rng = random.Random(SEED)
    tables = {
        "wide": build_isolde_table(s, "wide", K.wide_columns(), K.design_files(K.wide_columns(), rng, 64)),
        "parted": build_isolde_table(s, "parted", K.partitioned_columns(),
                                     _partition_designs(K.partitioned_columns(), rng, 30), partitioned=True),
        "deltars": build_deltars_table(str(base / "deltars"), K.deltars_columns(),
                                       K.design_files(K.deltars_columns(), rng, 36)),
    }
    w = World(s, tables)
    w.seconds["tables"] = time.perf_counter() - t0
    for t in tables.values():
        make_view(spark, t)
    try:
        _run(w, spark)
        yield w
    finally:
        s.execute("RESET spark.sql.session.timeZone")
        for t in tables.values():
            if t.view:
                spark.catalog.dropTempView(t.view)
                t.df.unpersist()
        s.close()


def _partition_designs(columns, rng, n):
    """Files of rows sharing one partition tuple (a few tuples reused so partitions hold several files)."""
    tuples = [{c.name: rng.choice(c.pool) for c in columns if c.partition} for _ in range(12)]
    data_cols = [c for c in columns if not c.partition]
    designs = []
    for _ in range(n):
        tup = rng.choice(tuples)
        rows = []
        for _ in range(rng.choice([1, 2, 3])):
            row = dict(tup)
            for c in data_cols:
                row[c.name] = rng.choice(c.pool + [None])
            rows.append(row)
        designs.append(rows)
    return designs


def _set_zone(w: World, zone: str) -> None:
    w.session.execute(f"SET spark.sql.session.timeZone = {zone}")
    assert w.session.spark.conf.get("spark.sql.session.timeZone") == zone


def _run(w: World, spark) -> None:
    t0 = time.perf_counter()
    for z, zone in enumerate(K.ZONES):
        _set_zone(w, zone)
        for name, table in w.tables.items():
            gen = K.Generator(table.columns + [K.Column("rid", "INT", "int", [1, 2, 3], bits=32)], _stored(table),
                              _typed_stats(table), seed=SEED * 1000 + z * 10 + len(name))
            if z == 0:
                preds = gen.sweep() + K.long_range_edges(table.columns) + gen.many(PREDICATES[name])
            else:
                temporal = [c for c in table.columns if c.temporal]
                again = [p for p in w.preds[(name, K.ZONES[0])] if p.temporal]
                again = random.Random(SEED + z).sample(again, min(len(again), ZONE_PREDICATES[name]))
                preds = again + gen.sweep(12, focus=temporal) + gen.many(ZONE_PREDICATES[name], focus=temporal)
            preds = [K.Pred(p.sql, p.columns, p.temporal, k) for k, p in enumerate(preds)]
            w.preds[(name, zone)] = preds
            t1 = time.perf_counter()
            w.truth[(name, zone)] = oracle(spark, table, preds)
            w.seconds[f"oracle {name} {zone}"] = time.perf_counter() - t1
    w.seconds["oracle"] = time.perf_counter() - t0
    _set_zone(w, K.ZONES[0])
    t0 = time.perf_counter()
    for (name, zone), preds in w.preds.items():
        table = w.tables[name]
        truth = w.truth[(name, zone)]
        for p in preds:
            result = truth[p.index]
            if isinstance(result, str):
                w.refused[name] += 1
                continue
            key = (name, p.sql)
            if key not in w.answers:
                w.answers[key] = isolde_answers(table, p)
            answer = w.answers[key]
            if isinstance(answer, str):  # isolde raised: the statement would fail, match or not
                f = next((f for f in table.by_file if result.get(f)), next(iter(table.by_file)))
                w.failures.append(Failure(name, zone, p, f, result.get(f, []), answer))
                continue
            for f in table.by_file:
                rids = result.get(f)
                if rids and not answer[f]:
                    w.failures.append(Failure(name, zone, p, f, rids))
                if not rids:
                    w.pairs[(name, "no match")] += 1
                    w.pairs[(name, "skipped")] += not answer[f]
                    if len(p.columns) == 1:
                        w.pairs[("type", _column_types(table, p.columns).split(" ", 1)[1], "no match")] += 1
                        w.pairs[("type", _column_types(table, p.columns).split(" ", 1)[1], "skipped")] += not answer[f]
                else:
                    w.pairs[(name, "match")] += 1
    w.seconds["isolde"] = time.perf_counter() - t0


# --------------------------------------------------------------------------- reporting


def _show_value(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (bytes, bytearray)):
        return "X'" + bytes(v).hex() + "'"
    return repr(v) if isinstance(v, str) else str(v)


def _column_types(table: Table, names) -> str:
    types = {c.name: c.sql_type for c in table.columns}
    types["rid"] = "INT"
    return ", ".join(f"{n} {types.get(n, '?')}" for n in sorted(names))


def describe(w: World, f: Failure) -> str:
    table = w.tables[f.table]
    add = table.by_file[f.file]
    st = add.parsed_stats or {}
    cols = sorted(f.pred.columns)
    data_cols = [c for c in cols if c not in add.partition_values]
    stats = {k: {c: (st.get(k) or {}).get(c, "-") for c in data_cols} for k in ("minValues", "maxValues", "nullCount")}
    parts = {c: add.partition_values.get(c) for c in cols if c in add.partition_values}
    rows = [{"rid": r, **{c: _show_value(table.rows[r].get(c)) for c in cols if c != "rid"}} for r in f.rids[:3]]
    head = f"[{f.table} {f.zone}] ({_column_types(table, cols)})  WHERE {f.pred.sql}"
    if f.raised:
        head += f"\n    isolde raised {f.raised}"
    return (f"{head}\n    file ..{f.file[-60:]} stats {json.dumps(stats, ensure_ascii=False)}"
            + (f" partition {parts}" if parts else "")
            + f" numRecords {st.get('numRecords')}\n    matching rows {rows}")


def failure_report(w: World) -> str:
    groups = collections.defaultdict(list)
    for f in w.failures:
        key = (f.table, _column_types(w.tables[f.table], f.pred.columns), bool(f.raised))
        groups[key].append(f)
    lines = [f"{len(w.failures)} failures (a file holding a matching row skipped, or isolde raised); "
             f"{len({(f.table, f.pred.sql) for f in w.failures})} predicates, {len(groups)} groups by table and columns:"]
    for key, fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(fs):5d}  {key[0]}: {key[1]}{'  (isolde raised)' if key[2] else ''}")
    lines.append(f"the two shortest predicates of each group, one file each (first {SHOW}):")
    shown = 0
    for key, fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        seen = set()
        for f in sorted(fs, key=lambda f: len(f.pred.sql)):
            if shown >= SHOW or len(seen) >= 2:
                break
            if f.pred.sql in seen:
                continue
            seen.add(f.pred.sql)
            lines.append(describe(w, f))
            shown += 1
    return "\n".join(lines)


def pruning_report(w: World) -> str:
    lines = []
    for name in w.tables:
        nm, sk, m = w.pairs[(name, "no match")], w.pairs[(name, "skipped")], w.pairs[(name, "match")]
        checked = sum(len(v) for (t, _), v in w.preds.items() if t == name)
        lines.append(f"  {name}: {len(w.tables[name].files)} files, {len(w.tables[name].rows)} rows, {checked} predicates "
                     f"({w.refused[name]} refused by Spark); of {nm} (predicate, file) pairs without a match isolde "
                     f"skipped {sk} ({(sk / nm if nm else 0):.1%}); {m} pairs with a match")
    kinds = sorted({k[1] for k in w.pairs if k[0] == "type"})
    rates = [f"{t} {w.pairs[('type', t, 'skipped')] / max(w.pairs[('type', t, 'no match')], 1):.0%}" for t in kinds]
    lines.append("  skipped without a match, single-column predicates by type: " + ", ".join(rates))
    reasons = collections.Counter()
    for truth in w.truth.values():
        for result in truth.values():
            if isinstance(result, str):
                reasons[result.split("]")[0].strip("[") if result.startswith("[") else result[:60]] += 1
    if reasons:
        lines.append("  Spark refused: " + ", ".join(f"{r} x{n}" for r, n in reasons.most_common(6)))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the tests


def test_no_file_holding_a_matching_row_is_skipped(world):
    w = world
    checked = sum(len(v) for v in w.preds.values())
    refused = sum(w.refused.values())
    print(f"\ndata skipping differential, seed {SEED}: {checked} (predicate, zone) runs over "
          f"{sum(len(t.files) for t in w.tables.values())} files; times {({k: round(v, 1) for k, v in w.seconds.items()})}")
    print(pruning_report(w))
    # the generator must mostly write predicates Spark accepts, or the test tests nothing
    assert refused < 0.2 * checked, f"Spark refused {refused} of {checked} predicates: the generator drifted"
    assert all(w.pairs[(n, "match")] > 50 for n in w.tables), "too few matching pairs: the generator drifted"
    if w.failures:
        report = failure_report(w)
        print(report)
        pytest.fail(report, pytrace=False)


def test_pruning_still_prunes(world):
    """A weak floor, so that correctness is not bought by reading every file."""
    w = world
    nm = sum(w.pairs[(n, "no match")] for n in w.tables)
    sk = sum(w.pairs[(n, "skipped")] for n in w.tables)
    assert nm and sk / nm > 0.25, f"isolde skipped only {sk} of {nm} files without a match"


def _accepted(w: World, name: str, zone: str, need_match=None) -> list:
    truth = w.truth[(name, zone)]
    out = []
    for p in w.preds[(name, zone)]:
        result = truth[p.index]
        if isinstance(result, str):
            continue
        n = sum(len(v) for v in result.values())
        if need_match is None or (n > 0) == need_match:
            out.append(p)
    return out


def _oracle_rids(w: World, name: str, zone: str, p) -> set:
    return {r for rids in w.truth[(name, zone)][p.index].values() for r in rids}


def _sample(w: World, name: str, zone: str, n: int, rng: random.Random, with_match: bool = True) -> list:
    """Predicates the pruning check failed first (to see the statement-level effect), then random ones."""
    failed = {f.pred.sql for f in w.failures if f.table == name and f.zone == zone}
    pool = _accepted(w, name, zone, need_match=True if with_match else None)
    first = [p for p in pool if p.sql in failed]
    rng.shuffle(first)
    rest = [p for p in pool if p.sql not in failed]
    rng.shuffle(rest)
    return (first[: n // 2] + rest)[:n]


def _select_rids(w: World, table: Table, preds: list) -> dict:
    """index -> set of rids isolde's SELECT returned, or the error text (UNION ALL of many WHEREs)."""
    out = {}

    def run(chunk):
        sql = " UNION ALL ".join(f"SELECT {p.index} AS k, rid FROM {table.ref} WHERE {p.sql}" for p in chunk)
        try:
            rows = w.session.sql(sql).collect()
        except Exception as e:  # noqa: BLE001
            if len(chunk) == 1:
                out[chunk[0].index] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
                return
            run(chunk[: len(chunk) // 2])
            run(chunk[len(chunk) // 2:])
            return
        for p in chunk:
            out[p.index] = set()
        for r in rows:
            out[r["k"]].add(r["rid"])

    for i in range(0, len(preds), 25):
        run(preds[i:i + 25])
    return out


def _diagnose(w: World, table: Table, zone: str, p, got) -> str:
    """Where a wrong SELECT comes from: isolde's file pruning, or Spark's own Parquet read."""
    notes = []
    failed = any(f.pred.sql == p.sql and f.table == table.name for f in w.failures)
    notes.append("isolde's file pruning skipped a matching file" if failed else
                 "isolde's file pruning kept every matching file")
    if not table.partition_columns and not isinstance(got, str):
        from pyspark.sql import types as T

        spark = w.session.spark
        paths = [os.path.join(table.path, unquote(a.path)) for a in table.files]
        try:
            plain = {r[0] for r in spark.read.schema(T.StructType.fromJson(table.schema)).parquet(*paths)
                     .where(p.sql).select("rid").collect()}
        except Exception:  # noqa: BLE001
            plain = None
        if plain == got:
            notes.append("Spark reading all the files with its Parquet filter pushdown returns the same wrong rows "
                         "(row-group statistics: -0.0 / NaN)")
    return "\n    (" + "; ".join(notes) + ")"


def test_select_returns_the_oracle_rows(world):
    w = world
    rng = random.Random(SEED + 1)
    bad = []
    ran = 0
    for zone in K.ZONES:
        _set_zone(w, zone)
        for name, table in w.tables.items():
            n = 25 if zone == K.ZONES[0] else 8
            preds = _sample(w, name, zone, n, rng, with_match=False)
            if zone != K.ZONES[0]:
                preds = [p for p in preds if p.temporal]
            got = _select_rids(w, table, preds)
            for p in preds:
                ran += 1
                want = _oracle_rids(w, name, zone, p)
                if got[p.index] != want:
                    g = got[p.index]
                    detail = g if isinstance(g, str) else f"missing rids {sorted(want - g)[:8]} extra {sorted(g - want)[:8]}"
                    bad.append(f"[{name} {zone}] ({_column_types(table, p.columns)}) WHERE {p.sql}\n    {detail}"
                               + _diagnose(w, table, zone, p, g))
    _set_zone(w, K.ZONES[0])
    print(f"\n{ran} SELECTs through the isolde session, {len(bad)} differ from the oracle")
    if bad:
        pytest.fail(f"{len(bad)} of {ran} SELECTs differ from Spark without skipping:\n" + "\n".join(bad[:SHOW]),
                    pytrace=False)


def _copy(w: World, table: Table, tag: str) -> str:
    dst = os.path.join(os.path.dirname(table.path), f"{table.name}_{tag}_copy")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(table.path, dst)
    return dst


def _table_rids(w: World, path: str) -> list:
    return [r[0] for r in w.session.execute(f"SELECT rid FROM delta.`{path}`").rows]


def _state(r: int, rids) -> str:
    return "kept" if r in rids else "negated" if -r in rids else "deleted"


def _compare_table(w: World, path: str, model: set, all_rids, label: str) -> list:
    """The copy's rows against the model (rid kept, -rid for an updated row, absent if deleted)."""
    got = _table_rids(w, path)
    got_set = {r for r in got if r != 0}
    wrong = [f"{r}: {_state(r, model)} expected, {_state(r, got_set)} found" for r in sorted(all_rids)
             if _state(r, model) != _state(r, got_set)]
    return [f"{label}: the table's rows differ from the oracle's: {wrong[:10]}"] if wrong else []


def _metric(result, *names) -> int | None:
    metrics = getattr(result, "metrics", None) or {}
    for n in names:
        if n in metrics:
            return int(metrics[n])
    return None


def test_delete_and_update_touch_the_oracle_rows(world):
    """DELETE / UPDATE on copies: each statement's row count is the oracle's, and the table ends
    as the oracle's rows say (predicates without rid; UPDATE marks a row by negating its rid)."""
    w = world
    rng = random.Random(SEED + 2)
    bad = []
    ran = 0
    for name, table in w.tables.items():
        zone = K.ZONES[0]
        path = _copy(w, table, "dml")
        model = set(table.rows)  # rid: untouched, -rid: updated
        preds = [p for p in _sample(w, name, zone, 40, rng) if "rid" not in p.columns][:6]
        for k, p in enumerate(preds):
            want = _oracle_rids(w, name, zone, p)
            if k % 2 == 0:
                expected = {r for r in want if r in model or -r in model}
                stmt = f"DELETE FROM delta.`{path}` WHERE {p.sql}"
            else:
                expected = {r for r in want if r in model}
                stmt = f"UPDATE delta.`{path}` SET rid = -rid WHERE rid > 0 AND ({p.sql})"
            ran += 1
            label = f"[{name}] {stmt.replace(path, '<copy>')}"
            try:
                result = w.session.execute(stmt)
            except Exception as e:  # noqa: BLE001
                bad.append(f"{label}\n    isolde raised {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            for r in expected:
                model.discard(r)
                model.discard(-r)
                if k % 2:
                    model.add(-r)
            count = _metric(result, "numDeletedRows", "numUpdatedRows", "num_affected_rows")
            if count != len(expected):
                bad.append(f"{label}\n    {count} rows {'deleted' if k % 2 == 0 else 'updated'}, the oracle's "
                           f"{len(expected)}: {sorted(expected)[:8]}")
                bad += _compare_table(w, path, model, table.rows, "    after it")
                got = {r for r in _table_rids(w, path) if r != 0}
                model = got  # carry on from what the table holds
        bad += _compare_table(w, path, model, table.rows, f"[{name}] after {len(preds)} statements")
    print(f"\n{ran} DELETE/UPDATE statements on copies, {len(bad)} wrong")
    if bad:
        pytest.fail(f"{len(bad)} problems in {ran} DML statements:\n" + "\n".join(bad[:SHOW]), pytrace=False)


def test_merge_on_a_key_matches_the_oracle_rows(world):
    """MERGE with a one-row source keyed on a column (the issue's MERGE on a double key): the
    matched rows are updated, or one row is inserted when the oracle says none match."""
    w = world
    rng = random.Random(SEED + 3)
    bad = []
    ran = 0
    table = w.tables["wide"]
    path = _copy(w, table, "merge")
    stored = _stored(table)
    gen = K.Generator(table.columns, stored, _typed_stats(table), seed=SEED + 4)
    floating = [c for c in table.columns if c.kind in ("float", "double", "decimal")]
    others = [c for c in table.columns if c.kind in ("int", "string", "timestamp", "date")]
    probes = []
    for k in range(6):
        c = rng.choice(floating if k % 3 else others)
        lit = K.literal(rng.choice(stored[c.name]), c, rng) if rng.random() < 0.7 and stored[c.name] else gen.lit(c)
        probes.append((c, lit, K.Pred(f"{c.name} = {lit}", {c.name}, c.temporal, k)))
    truth = oracle(w.session.spark, table, [p for _, _, p in probes])
    model = set(table.rows)
    inserted = 0
    for c, lit, p in probes:
        if isinstance(truth[p.index], str):
            continue
        expected = {r for rids in truth[p.index].values() for r in rids if r in model}
        stmt = (f"MERGE INTO delta.`{path}` t USING (SELECT {lit} AS k) s ON t.{c.name} = s.k AND t.rid > 0 "
                f"WHEN MATCHED THEN UPDATE SET t.rid = -t.rid WHEN NOT MATCHED THEN INSERT (rid) VALUES (0)")
        ran += 1
        label = f"[wide] ({c.name} {c.sql_type}) MERGE ... ON t.{c.name} = {lit}"
        try:
            result = w.session.execute(stmt)
        except Exception as e:  # noqa: BLE001
            bad.append(f"{label}\n    isolde raised {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        model = (model - expected) | {-r for r in expected}
        inserted += 0 if expected else 1
        updated = _metric(result, "numTargetRowsUpdated")
        new = _metric(result, "numTargetRowsInserted")
        if (updated, new) != (len(expected), 0 if expected else 1):
            bad.append(f"{label}\n    updated {updated}, inserted {new}; the oracle matches {len(expected)} rows "
                       f"{sorted(expected)[:8]}, so updated {len(expected)}, inserted {0 if expected else 1}")
    bad += _compare_table(w, path, model, table.rows, f"[wide] after {ran} MERGEs")
    zeros = _table_rids(w, path).count(0)
    if zeros != inserted:
        bad.append(f"[wide] after {ran} MERGEs: {zeros} rows inserted, the oracle's {inserted}")
    print(f"\n{ran} MERGEs on a copy, {len(bad)} wrong")
    if bad:
        pytest.fail(f"{len(bad)} problems in {ran} MERGEs:\n" + "\n".join(bad[:SHOW]), pytrace=False)
