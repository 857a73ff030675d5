"""What ``\\dt`` and ``\\d`` show: pure functions over what the Session answers (no Spark job).

``table_listing``   per table: its type (MANAGED / EXTERNAL), provider, version, number of
                    live data files and their size, from the table's Delta log (the catalog
                    keeps one log per table per process, so a second ``\\dt`` reads only the
                    new commits) -- psql's ``\\dt+``
``column_listing``  DESCRIBE TABLE's rows as one row per column, the partition, clustering,
                    identity and generated columns marked (DESCRIBE repeats them in its
                    ``# Partition Information`` ... sections)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .formatting import size_pretty

LISTING_COLUMNS = ["table", "type", "provider", "version", "files", "size"]


@dataclass(frozen=True)
class TableInfo:
    name: str
    kind: Optional[str] = None  # MANAGED / EXTERNAL
    provider: Optional[str] = None
    version: Optional[int] = None
    files: Optional[int] = None
    size: Optional[int] = None
    problem: Optional[str] = None  # why the log could not be read

    def row(self) -> tuple:
        return (self.name, self.kind, self.provider, self.version, self.files,
                size_pretty(self.size) if self.size is not None else None)


def table_info(session: Any, database: str, name: str) -> TableInfo:
    """One table's listing facts from its Delta log; never raises (``problem`` says why not)."""
    catalog = getattr(session, "catalog", None)
    if catalog is None or not hasattr(catalog, "resolve"):
        return TableInfo(name)
    try:
        from isolde.grammar import ast

        handle = catalog.resolve(ast.TableRef(parts=(database, name)), database)
        kind = "EXTERNAL" if (getattr(handle, "external", False) or getattr(handle, "by_path", False)) else "MANAGED"
    except Exception as exc:  # noqa: BLE001 - a listing never fails for one table
        return TableInfo(name, problem=_first_line(exc))
    try:
        snap = handle.log.update()
        files = snap.all_files
        return TableInfo(name, kind, "delta", snap.version, len(files), sum(int(f.size or 0) for f in files))
    except Exception as exc:  # noqa: BLE001
        return TableInfo(name, kind, "delta", problem=_first_line(exc))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def table_listing(session: Any, names: Sequence[str], database: Optional[str] = None) -> tuple[list, list, list]:
    """(columns, rows, problems) for ``\\dt``: one row per table of ``names`` (in
    ``database``, default the session's current one); ``problems`` are 'name: why' lines for
    tables whose log could not be read. Only a name column when the session has no catalog
    (a stand-in session)."""
    db = database or getattr(session, "current_database", None) or "default"
    infos = [table_info(session, db, n) for n in names]
    problems = [f"{i.name}: {i.problem}" for i in infos if i.problem]
    if not any(i.kind or i.problem for i in infos):
        return ["table"], [(i.name,) for i in infos], problems
    return list(LISTING_COLUMNS), [i.row() for i in infos], problems


# --------------------------------------------------------------------------- \d


_SECTION_NOTES = {
    "# Partition Information": "partition key",
    "# Clustering Information": "clustering key",
}
_DEFINITION_SECTIONS = ("# Identity Columns", "# Generated Columns")


def column_listing(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> tuple[list, list]:
    """DESCRIBE TABLE's (col_name, data_type, comment) rows as one row per column, with a
    ``notes`` column ('partition key', 'clustering key', the identity or generation
    definition) when any column has one, and ``comment`` only when any column has one."""
    header = [str(c) for c in columns][:3]
    cols: list[list[Any]] = []
    notes: dict[str, list[str]] = {}
    section: Optional[str] = None
    for row in rows:
        row = list(row) + [None] * (3 - len(row))
        first = "" if row[0] is None else str(row[0])
        header_row = first.startswith("# ") and not row[1]  # '# Partition Information', ...
        if section is None and first and not header_row:
            cols.append(row[:3])  # the columns come first, up to the first section
            continue
        if header_row:
            section = first
            continue
        if not first:  # a blank line ends a section
            section = "#"
            continue
        if first == "# col_name":
            continue
        key = first.lower()
        if section in _SECTION_NOTES:
            notes.setdefault(key, []).append(_SECTION_NOTES[section])
        elif section in _DEFINITION_SECTIONS and row[1]:
            notes.setdefault(key, []).append(str(row[1]))
        # other sections (# Constraints, # Detailed Table Information) are not about columns
    with_comment = any(c[2] not in (None, "") for c in cols)
    out_header = header[:2] + (header[2:3] if with_comment else [])
    out_rows = [tuple(c[:2] + ([c[2] or ""] if with_comment else [])) for c in cols]
    if notes:
        out_header.append("notes")
        out_rows = [r + (", ".join(notes.get(str(r[0]).lower(), [])),) for r in out_rows]
    return out_header, out_rows
