"""The table features of the interop matrix (tests/reference/test_interop_*.py), as data.

A feature is the piece of DDL it needs plus how its columns are filled and compared. Every table
of the matrix has ``id INT`` and ``v STRING`` (the columns the statements change); a feature adds
columns whose value is a function of ``id`` (so a Python model of ``id -> v`` is the whole
expected table), clauses, properties and statements run after CREATE. A *profile* is several
features on one table: the matrix runs profiles in ``make test`` (few tables, each Delta-Spark
statement costs 1-3 s here) and every feature alone under ``torture``.

    FEATURES[name]            one Feature
    PROFILES[name]            tuple of feature names sharing one table
    Table(features)           the DDL, INSERT / MERGE texts and the comparable SELECT of a table
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Column:
    ddl: str                 # "ts TIMESTAMP_NTZ"
    value: str | None        # SQL of the value from the source column `id` (None: the engine fills it)
    read: str                # SQL that reads it comparably (to_json for VARIANT ...)


@dataclass(frozen=True)
class Feature:
    name: str
    columns: tuple[Column, ...] = ()
    props: tuple[tuple[str, str], ...] = ()
    clause: str = ""                     # PARTITIONED BY (...) / CLUSTER BY (...)
    after_create: tuple[str, ...] = ()   # statements on `{t}` right after CREATE
    after_insert: tuple[str, ...] = ()   # statements on `{t}` after the first INSERT
    dvs: bool = True                     # deletion vectors allowed (UniForm forbids them)
    zorder: bool = True                  # OPTIMIZE ... ZORDER BY (v) allowed (not on clustered tables)
    table_features: tuple[str, ...] = ()  # names Delta must list in DESCRIBE DETAIL's tableFeatures


# (p, d) depends on pmod(id, 7) only: ids 1..14 put two rows in each of 7 partitions
# partition values file systems and URIs find awkward: space, '/', '%', '=', NULL, non-ASCII, ''
AWKWARD = ("a b", "x/y", "50%", "k=v", None, "ü€", "")


def _awkward_sql() -> str:
    items = ", ".join("CAST(NULL AS STRING)" if a is None else "'" + a + "'" for a in AWKWARD)
    return f"element_at(array({items}), pmod(id, {len(AWKWARD)}) + 1)"


FEATURES: dict[str, Feature] = {f.name: f for f in [
    Feature("plain"),
    Feature("partitioned",
            columns=(Column("p STRING", _awkward_sql(), "p"),
                     Column("d DATE", "date_add(DATE'2024-02-28', pmod(id, 7) % 3)", "d")),
            clause="PARTITIONED BY (p, d)"),
    Feature("column_mapping_name", props=(("delta.columnMapping.mode", "name"),),
            table_features=("columnMapping",)),
    Feature("column_mapping_id", props=(("delta.columnMapping.mode", "id"),),
            table_features=("columnMapping",)),
    Feature("row_tracking", props=(("delta.enableRowTracking", "true"),),
            table_features=("rowTracking", "domainMetadata")),
    Feature("liquid_clustering", clause="CLUSTER BY (id)", zorder=False,
            table_features=("clustering",)),
    Feature("change_data_feed", props=(("delta.enableChangeDataFeed", "true"),),
            table_features=("changeDataFeed",)),
    Feature("identity_generated",
            columns=(Column("k BIGINT GENERATED ALWAYS AS IDENTITY", None, "k"),
                     Column("g INT GENERATED ALWAYS AS (id * 2)", None, "g")),
            table_features=("identityColumns", "generatedColumns")),
    Feature("check_constraint", after_create=("ALTER TABLE {t} ADD CONSTRAINT id_positive CHECK (id > 0)",),
            table_features=("checkConstraints",)),
    Feature("timestamp_ntz",
            columns=(Column("ts TIMESTAMP_NTZ", "make_timestamp_ntz(2024, 1, pmod(id, 28) + 1, 10, 30, 0)", "ts"),),
            table_features=("timestampNtz",)),
    Feature("type_widening",
            columns=(Column("w INT", "id * 1000", "w"),),
            props=(("delta.enableTypeWidening", "true"),),
            after_insert=("ALTER TABLE {t} ALTER COLUMN w TYPE BIGINT",),
            table_features=("typeWidening",)),
    Feature("variant",
            columns=(Column("j VARIANT", "parse_json(concat('{\"id\":', id, '}'))", "to_json(j)"),),
            table_features=("variantType",)),
    Feature("v2_checkpoints", props=(("delta.checkpointPolicy", "v2"), ("delta.checkpointInterval", "3")),
            table_features=("v2Checkpoint",)),
    Feature("in_commit_timestamps", props=(("delta.enableInCommitTimestamps", "true"),),
            table_features=("inCommitTimestamp",)),
    Feature("uniform", dvs=False,
            props=(("delta.enableDeletionVectors", "false"), ("delta.columnMapping.mode", "name"),
                   ("delta.enableIcebergCompatV2", "true"),
                   ("delta.universalFormat.enabledFormats", "iceberg")),
            table_features=("icebergCompatV2", "columnMapping")),
]}

# several features on one table: what make test runs (each feature alone, and UniForm, which
# forbids deletion vectors, are the torture variants)
PROFILES: dict[str, tuple[str, ...]] = {
    "partitioned_name_mapping_cdf": ("partitioned", "change_data_feed", "check_constraint", "column_mapping_name",
                                     "row_tracking", "identity_generated", "timestamp_ntz",
                                     "in_commit_timestamps"),
    "clustered_id_mapping_variant_v2": ("column_mapping_id", "liquid_clustering", "variant", "v2_checkpoints",
                                        "type_widening"),
}


@dataclass
class Table:
    """The SQL texts of one matrix table made of ``features`` (names of FEATURES)."""

    features: tuple[str, ...]
    feats: list = field(init=False)

    def __post_init__(self):
        self.feats = [FEATURES[n] for n in self.features]

    @property
    def columns(self) -> list[Column]:
        return [Column("id INT", "id", "id"), Column("v STRING", "v", "v")] + [c for f in self.feats for c in f.columns]

    @property
    def dvs(self) -> bool:
        return all(f.dvs for f in self.feats)

    @property
    def zorder(self) -> bool:
        return all(f.zorder for f in self.feats)

    @property
    def props(self) -> dict:
        props = {"delta.enableDeletionVectors": "true"} if self.dvs else {}
        for f in self.feats:
            props.update(dict(f.props))
        return props

    def has(self, name: str) -> bool:
        return name in self.features

    def create(self, ref: str, using: bool = False) -> str:
        """CREATE TABLE; ``using``: with ``USING DELTA`` (Delta-Spark needs it for a path name)."""
        cols = ", ".join(c.ddl for c in self.columns)
        clause = " ".join(f.clause for f in self.feats if f.clause)
        props = ", ".join(f"'{k}' = '{v}'" for k, v in self.props.items())
        return f"CREATE TABLE {ref} ({cols}) {'USING DELTA ' if using else ''}{clause} TBLPROPERTIES ({props})"

    def after_create(self, ref: str) -> list[str]:
        return [s.format(t=ref) for f in self.feats for s in f.after_create]

    def after_insert(self, ref: str) -> list[str]:
        return [s.format(t=ref) for f in self.feats for s in f.after_insert]

    def _written(self) -> list[Column]:
        return [c for c in self.columns if c.value is not None]

    def source(self, rows: dict[int, str]) -> str:
        """A query of the rows ``{id: v}`` with every column this table is written with."""
        values = ", ".join(f"({i}, '{v}')" for i, v in sorted(rows.items()))
        exprs = ", ".join(f"{c.value} AS {c.ddl.split()[0]}" for c in self._written())
        return f"SELECT {exprs} FROM VALUES {values} AS src(id, v)"

    def insert(self, ref: str, rows: dict[int, str]) -> str:
        names = ", ".join(c.ddl.split()[0] for c in self._written())
        return f"INSERT INTO {ref} ({names}) {self.source(rows)}"

    def merge(self, ref: str, rows: dict[int, str]) -> str:
        """Upsert ``rows``: matched ids get the new v, the others are inserted."""
        names = [c.ddl.split()[0] for c in self._written()]
        return (f"MERGE INTO {ref} AS t USING ({self.source(rows)}) AS s ON t.id = s.id "
                f"WHEN MATCHED THEN UPDATE SET v = s.v "
                f"WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})")

    def position(self, column: str) -> int:
        """Where ``column`` is in a row of ``select``."""
        return [c.ddl.split()[0] for c in self.columns].index(column)

    def select(self, ref: str) -> str:
        """Every column, read the same way by both engines (VARIANT as JSON)."""
        return f"SELECT {', '.join(c.read for c in self.columns)} FROM {ref}"
