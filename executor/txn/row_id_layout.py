"""Where a clustering rewrite (OPTIMIZE ZORDER BY, liquid clustering) put each input row, by
stable row id (PROTOCOL.md "Row IDs").

Such a rewrite reorders rows across many output files, so the positional layout of a
bin-packing (compaction.py) does not exist. On a table with row tracking enabled the outputs
materialise each row's stable id (the input's materialised id, else its ``baseRowId`` plus
its position) and carry ``tags[STABLE_IDS_TAG]``; an input row's id then names its output
file and position. Inputs are the commit's dataChange=false removes in the partition of the
tagged outputs. Anything unreadable maps to None: the conflict stands rather than a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
from pyroaring import BitMap64

from ..log import table_files
from ..log.actions import Action, AddFile, RemoveFile

STABLE_IDS_TAG = "isolde.stableRowIds"


def _partition(values) -> str:
    return json.dumps(sorted((values or {}).items()), default=str)


def _id_column(path: str, column: str) -> Optional[np.ndarray]:
    """A file's materialised row-id column as int64 with -1 for null; None if the file has none."""
    import pyarrow.compute as pc
    if column not in table_files.parquet_file(path).schema_arrow.names:
        return None
    values = table_files.read_parquet(path, columns=[column]).column(0)
    return pc.fill_null(values, -1).to_numpy().astype(np.int64)


@dataclass
class RowIdLayout:
    """One partition of a clustering rewrite: its inputs (as removed) and its outputs."""

    column: str
    inputs: dict[str, RemoveFile]
    outputs: dict[str, AddFile]
    files: object  # row_level.TableFiles
    _index: Optional[tuple] = field(default=None, repr=False)

    def _stable_ids(self, path: str, positions: BitMap64) -> Optional[np.ndarray]:
        src = self.inputs.get(path)
        if src is None or src.base_row_id is None:
            return None
        pos = np.fromiter(positions, dtype=np.int64, count=len(positions))
        ids = src.base_row_id + pos
        materialised = _id_column(self.files.local(path), self.column)
        if materialised is not None:
            if len(pos) and pos.max() >= len(materialised):
                return None
            kept = materialised[pos]
            ids = np.where(kept >= 0, kept, ids)
        return ids

    def _output_index(self) -> Optional[tuple]:
        if self._index is None:
            ids, owner, where = [], [], []
            paths = sorted(self.outputs)
            for i, p in enumerate(paths):
                col = _id_column(self.files.local(p), self.column)
                if col is None or (col < 0).any():
                    return None
                ids.append(col)
                owner.append(np.full(len(col), i, dtype=np.int32))
                where.append(np.arange(len(col), dtype=np.int64))
            all_ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
            order = np.argsort(all_ids, kind="stable")
            self._index = (paths, all_ids[order], np.concatenate(owner)[order] if owner else np.empty(0, np.int32),
                           np.concatenate(where)[order] if where else np.empty(0, np.int64))
        return self._index

    def map(self, path: str, positions: BitMap64) -> Optional[dict[str, BitMap64]]:
        """Output path -> positions of input ``path``'s rows there; None if any is not found."""
        ids = self._stable_ids(path, positions)
        index = self._output_index() if ids is not None else None
        if index is None:
            return None
        paths, sorted_ids, owner, where = index
        at = np.searchsorted(sorted_ids, ids)
        if len(ids) and ((at >= len(sorted_ids)).any() or (sorted_ids[np.minimum(at, len(sorted_ids) - 1)] != ids).any()):
            return None
        out: dict[str, BitMap64] = {}
        for o, w in zip(owner[at].tolist(), where[at].tolist()):
            out.setdefault(paths[o], BitMap64()).add(w)
        return out


def row_id_layouts(actions: Iterable[Action], files) -> dict[str, RowIdLayout]:
    """Input path -> its partition's RowIdLayout, for a commit that rewrote rows with their ids."""
    column = getattr(files, "row_id_column", None)
    if not column:
        return {}
    actions = list(actions)
    outputs: dict[str, dict[str, AddFile]] = {}
    for a in actions:
        if isinstance(a, AddFile) and not a.data_change and (a.tags or {}).get(STABLE_IDS_TAG) == "true":
            outputs.setdefault(_partition(a.partition_values), {})[a.path] = a
    if not outputs:
        return {}
    layouts = {k: RowIdLayout(column, {}, v, files) for k, v in outputs.items()}
    out: dict[str, RowIdLayout] = {}
    for r in actions:
        if isinstance(r, RemoveFile) and not r.data_change:
            layout = layouts.get(_partition(r.partition_values))
            if layout is not None:
                layout.inputs[r.path] = r
                out[r.path] = layout
    return out
