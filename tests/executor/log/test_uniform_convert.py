"""The UniForm converter (executor/log/uniform.py) over hand-made IcebergCompatV2 Delta logs
(column mapping id mode, field ids in the Parquet files): after each conversion pyiceberg's
StaticTable returns exactly the rows of the live Delta files. No Spark."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.executor.log import uniform as C
from isolde.executor.log.actions import AddFile, CommitInfo, Metadata, Protocol, serialize_commit
from isolde.executor.log.delta_log import DeltaLog
from isolde.executor.log.stats import stats_from_metadata

# logical name, Delta type, arrow type
COLUMNS = [
    ("id", "integer", pa.int32()),
    ("big", "long", pa.int64()),
    ("s", "string", pa.string()),
    ("d", "double", pa.float64()),
    ("day", "date", pa.date32()),
    ("ts", "timestamp", pa.timestamp("us", tz="UTC")),
    ("ntz", "timestamp_ntz", pa.timestamp("us")),
    ("amount", "decimal(10,2)", pa.decimal128(10, 2)),
    ("flag", "boolean", pa.bool_()),
    ("blob", "binary", pa.binary()),
    ("tiny", "byte", pa.int8()),
    ("small", "short", pa.int16()),
    ("f", "float", pa.float32()),
    ("point", {"type": "struct", "fields": []}, None),  # filled below
    ("labels", {"type": "array", "elementType": "string", "containsNull": True}, None),
    ("attrs", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, None),
]


def delta_schema():
    fields, ident = [], 0

    def field(name, typ):
        nonlocal ident
        ident += 1
        my = ident
        if isinstance(typ, dict) and typ["type"] == "struct":
            sub = [field("x", "double"), field("y", "double")]
            typ = {"type": "struct", "fields": sub}
        return {"name": name, "type": typ, "nullable": True,
                "metadata": {"delta.columnMapping.id": my, "delta.columnMapping.physicalName": f"col-{my}-{name}"}}

    for name, typ, _ in COLUMNS:
        fields.append(field(name, typ))
    for f in fields:  # nested ids of array elements / map keys and values (IcebergCompatV2)
        t, phys = f["type"], f["metadata"]["delta.columnMapping.physicalName"]
        if isinstance(t, dict) and t["type"] == "array":
            ident += 1
            f["metadata"]["delta.columnMapping.nested.ids"] = {f"{phys}.element": ident}
        if isinstance(t, dict) and t["type"] == "map":
            f["metadata"]["delta.columnMapping.nested.ids"] = {f"{phys}.key": ident + 1, f"{phys}.value": ident + 2}
            ident += 2
    return {"type": "struct", "fields": fields}, ident


def arrow_physical_schema(schema: dict) -> pa.Schema:
    arrow_of = {n: t for n, _, t in COLUMNS} | {"region": pa.string(), "extra": pa.int64()}

    def to_arrow(f, arrow_type=None):
        m = f["metadata"]
        nested = {k.rsplit(".", 1)[1]: v for k, v in m.get("delta.columnMapping.nested.ids", {}).items()}
        fid = lambda k: {"PARQUET:field_id": str(nested[k])}  # noqa: E731
        if isinstance(f["type"], dict) and f["type"]["type"] == "array":
            t = pa.list_(pa.field("element", pa.string(), metadata=fid("element")))
        elif isinstance(f["type"], dict) and f["type"]["type"] == "map":
            t = pa.map_(pa.field("key", pa.string(), nullable=False, metadata=fid("key")),
                        pa.field("value", pa.int32(), metadata=fid("value")))
        elif isinstance(f["type"], dict):
            t = pa.struct([to_arrow(s, pa.float64()) for s in f["type"]["fields"]])
        else:
            t = arrow_type
        return pa.field(m["delta.columnMapping.physicalName"], t, metadata={"PARQUET:field_id": str(m["delta.columnMapping.id"])})

    return pa.schema([to_arrow(f, arrow_of.get(f["name"])) for f in schema["fields"]])


def rows(start, n, region=None):
    out = []
    for i in range(start, start + n):
        out.append({
            "id": i, "big": i * 10_000_000_000, "s": None if i % 5 == 0 else f"name-{i}",
            "d": i / 3, "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
            "ts": dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i),
            "ntz": dt.datetime(2024, 6, 1, 8, 30, 0, 654321) + dt.timedelta(minutes=i),
            "amount": decimal.Decimal(i * 100 + 1) / 100, "flag": i % 2 == 0, "blob": bytes([i % 256, 7]),
            "tiny": i % 100, "small": i * 3, "f": float(i) / 2, "point": {"x": float(i), "y": -float(i)},
            "labels": None if i % 4 == 0 else [f"l{i}", None], "attrs": [("k", i), ("z", None)],
            **({"region": region} if region is not None else {}),
        })
    return out


class HandMadeTable:
    def __init__(self, root, name, partitioned=False, materialise=True):
        self.path = os.path.join(str(root), name)
        shutil.rmtree(self.path, ignore_errors=True)
        os.makedirs(os.path.join(self.path, "_delta_log"))
        self.partitioned, self.materialise = partitioned, materialise
        schema, max_id = delta_schema()
        if partitioned:
            max_id += 1
            schema["fields"].append({"name": "region", "type": "string", "nullable": True, "metadata": {
                "delta.columnMapping.id": max_id, "delta.columnMapping.physicalName": f"col-{max_id}-region"}})
        self.schema, self.version, self.n = schema, -1, 0
        conf = {"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId": str(max_id),
                "delta.enableIcebergCompatV2": "true", "delta.universalFormat.enabledFormats": "iceberg"}
        self.metadata = Metadata(json.dumps(schema), ["region"] if partitioned else [], conf)
        self.protocol = Protocol(3, 7, ["columnMapping", "timestampNtz"], ["columnMapping", "icebergCompatV2", "timestampNtz"])

    def write_file(self, data: list[dict], region=None) -> AddFile:
        self.n += 1
        phys = arrow_physical_schema(self.schema)
        if self.partitioned and not self.materialise:
            phys = pa.schema([f for f in phys if not f.name.endswith("-region")])
        by_phys = {f["metadata"]["delta.columnMapping.physicalName"]: f["name"] for f in self.schema["fields"]}
        cols = {p.name: [r.get(by_phys[p.name]) for r in data] for p in phys}
        rel = f"part-{self.n:05d}.parquet"
        pvals = {}
        if self.partitioned:
            pcol = "col-%d-region" % self.schema["fields"][-1]["metadata"]["delta.columnMapping.id"]
            pvals = {pcol: region}
            rel = f"{pcol}={'__HIVE_DEFAULT_PARTITION__' if region is None else region}/{rel}"
        full = os.path.join(self.path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        pq.write_table(pa.table(cols, schema=phys), full)
        stats = stats_from_metadata(pq.read_metadata(full))
        return AddFile(urllib.parse.quote(rel), pvals, os.path.getsize(full), 1, True, json.dumps(stats))

    def commit(self, actions, op):
        self.version += 1
        first = [self.protocol, self.metadata] if self.version == 0 else []
        with open(os.path.join(self.path, "_delta_log", f"{self.version:020d}.json"), "wb") as fh:
            fh.write(serialize_commit([CommitInfo(timestamp=1_700_000_000_000 + self.version, operation=op)] + first + actions))
        return self.version


# --------------------------------------------------------------------------- truth and comparison


def delta_rows(path, version=None):
    """The rows of the Delta table at `version`, read straight from its live files (physical ->
    logical names; partition values from the log when the files lack them)."""
    snap = DeltaLog(path).snapshot(version) if version is not None else DeltaLog(path).update()
    fields = snap.metadata.schema["fields"]
    logical = {f["metadata"]["delta.columnMapping.physicalName"]: f["name"] for f in fields}
    out = []
    for a in snap.all_files:
        t = pq.read_table(os.path.join(path, urllib.parse.unquote(a.path)))
        recs = t.to_pylist()
        for r in recs:
            row = {logical[k]: (v if not isinstance(v, dict) else {"x": v[next(iter(v))], "y": list(v.values())[1]})
                   for k, v in r.items()}
            for pk, pv in (a.partition_values or {}).items():
                row.setdefault(logical[pk], pv)
            out.append(row)
    return out


def norm(rows_):
    def fix(v):
        if isinstance(v, float):
            return round(v, 6)
        return v
    return sorted(({k: fix(v) for k, v in r.items()} for r in rows_), key=lambda r: r["id"])


def verify(path, label, version=None):
    tbl = C.read_iceberg(path)
    got = tbl.scan().to_arrow()
    exp = delta_rows(path, version)
    g, e = norm(got.to_pylist()), norm(exp)
    md = tbl.metadata
    snap = md.current_snapshot()
    ok = g == e
    print(f"[{label}] {os.path.basename(C.latest_metadata_location(path))}: delta-version="
          f"{md.properties.get('delta-version')} snapshots={len(md.snapshots)} op={snap.summary.operation.value if snap else None} "
          f"iceberg rows={len(g)} delta rows={len(e)} -> {'MATCH' if ok else 'MISMATCH'}")
    if not ok:
        for a, b in zip(g, e):
            if a != b:
                print("  iceberg:", a, "\n  delta:  ", b)
                break
        raise AssertionError(f"{label}: iceberg rows differ from the Delta rows")
    return tbl



def _ops(tbl):
    return [(s.summary.operation.value, s.summary.additional_properties.get("delta-version"))
            for s in tbl.metadata.snapshots]


def test_unpartitioned_incremental_catch_up_and_replace(tmp_path, monkeypatch):
    t = HandMadeTable(tmp_path, "flat")
    a, b = t.write_file(rows(0, 5)), t.write_file(rows(5, 5))
    t.commit([a, b], "WRITE")
    r = C.convert_table(t.path)
    assert (r.mode, r.delta_version, r.snapshots_added) == ("create", 0, 1)
    tbl = verify(t.path, "v0 create")
    schema = tbl.schema()
    for f in t.schema["fields"]:  # column-mapping ids are the Iceberg field ids
        assert schema.find_field(f["name"]).field_id == f["metadata"]["delta.columnMapping.id"]

    c = t.write_file([{**x, "s": "updated"} for x in rows(0, 5)])
    t.commit([a.remove(), c], "UPDATE")
    assert C.convert_table(t.path).mode == "incremental"
    verify(t.path, "v1 overwrite")
    t.commit([b.remove()], "DELETE")
    C.convert_table(t.path)
    verify(t.path, "v2 delete")

    # v3 append, v4 OPTIMIZE-like rewrite, v5 metadata only; the first conversion attempt fails
    d = t.write_file(rows(100, 3))
    t.commit([d], "WRITE")
    e = t.write_file([{**x, "s": "updated"} for x in rows(0, 5)] + rows(100, 3))
    e.data_change = False
    t.commit([c.remove(data_change=False), d.remove(data_change=False), e], "OPTIMIZE")
    conf = dict(t.metadata.configuration)
    conf["delta.universalformat.config.iceberg.write.metadata.previous-versions-max"] = "50"
    t.metadata = Metadata(t.metadata.schema_string, t.metadata.partition_columns, conf, id=t.metadata.id)
    t.commit([t.metadata], "SET TBLPROPERTIES")
    before = C.latest_metadata_location(t.path)
    with pytest.raises(RuntimeError):
        C.convert_table(t.path, fail_after_snapshots=1)
    assert C.latest_metadata_location(t.path) == before
    r = C.convert_table(t.path)
    assert (r.mode, r.delta_version, r.snapshots_added) == ("incremental", 5, 2)
    tbl = verify(t.path, "v5 catch-up")
    assert _ops(tbl) == [("append", "0"), ("overwrite", "1"), ("delete", "2"), ("append", "3"), ("replace", "4")]
    props = tbl.metadata.properties
    assert props["delta-version"] == "5" and props["base-delta-version"] == "2"
    assert props["write.metadata.previous-versions-max"] == "50"
    assert props["delta-timestamp"] == str(DeltaLog(t.path).commit_timestamp(5))
    assert C.convert_table(t.path).mode == "noop"
    assert len(tbl.scan(snapshot_id=tbl.metadata.snapshots[0].snapshot_id).to_arrow()) == 10  # time travel

    # REPLACE: the log since the last converted version is "too long" -> whole state, one snapshot
    t.commit([t.write_file(rows(200, 2))], "WRITE")
    monkeypatch.setattr(C, "MAX_COMMITS_TO_CONVERT", 0)
    assert C.convert_table(t.path).mode == "replace"
    tbl = verify(t.path, "v6 replace")

    from pyiceberg.expressions import EqualTo, GreaterThanOrEqual

    total = len(list(tbl.scan().plan_files()))
    assert total == 2
    assert len(list(tbl.scan(row_filter=GreaterThanOrEqual("id", 150)).plan_files())) == 1
    assert len(list(tbl.scan(row_filter=EqualTo("amount", "2.01")).plan_files())) == 1
    got = tbl.scan(row_filter=EqualTo("ts", "2024-01-09T21:00:00.123456+00:00")).to_arrow()
    assert got.column("id").to_pylist() == [201]  # upper bounds widened past Delta's milliseconds


@pytest.mark.parametrize("materialise", [True, False])
def test_partitioned(tmp_path, materialise):
    t = HandMadeTable(tmp_path, "part", partitioned=True, materialise=materialise)
    a = t.write_file(rows(0, 4, "eu"), "eu")
    b = t.write_file(rows(4, 4, "us"), "us")
    n = t.write_file(rows(8, 2, None), None)
    sp = t.write_file(rows(10, 2, "a b/c"), "a b/c")  # URL-encoded Delta path
    t.commit([a, b, n, sp], "WRITE")
    C.convert_table(t.path)
    tbl = verify(t.path, "v0 create")
    assert [f.name for f in tbl.spec().fields] == ["region"]
    c = t.write_file(rows(20, 3, "us"), "us")
    t.commit([b.remove(), c], "MERGE")
    C.convert_table(t.path)
    tbl = verify(t.path, "v1 overwrite")
    from pyiceberg.expressions import EqualTo

    plan = list(tbl.scan(row_filter=EqualTo("region", "eu")).plan_files())
    assert [p.file.partition[0] for p in plan] == ["eu"]


def test_missing_stats_are_refused(tmp_path):
    t = HandMadeTable(tmp_path, "bad")
    a = t.write_file(rows(0, 2))
    a.stats = json.dumps({"minValues": {}})
    t.commit([a], "WRITE")
    with pytest.raises(ValueError, match="numRecords"):
        C.convert_table(t.path)
    assert C.latest_metadata_location(t.path) is None


def test_enabled_helpers():
    assert C.uniform_iceberg_enabled({"delta.universalFormat.enabledFormats": "iceberg"})
    assert C.uniform_iceberg_enabled({"DELTA.UNIVERSALFORMAT.ENABLEDFORMATS": "hudi, iceberg"})
    assert not C.uniform_iceberg_enabled({"delta.enableIcebergCompatV2": "true"})
    assert C.enabled_formats({"delta.universalFormat.enabledFormats": "iceberg"}) == ["iceberg"]


def test_converter_does_not_import_pyspark():
    import subprocess
    import sys

    code = ("import sys, isolde.executor.log.uniform; "
            "assert 'pyspark' not in sys.modules, sorted(m for m in sys.modules if 'pyspark' in m)[:3]")
    subprocess.run([sys.executable, "-c", code], check=True)
