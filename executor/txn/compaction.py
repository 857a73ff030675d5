"""Deletion vectors carried through a compaction (DESIGN.md section 4, "OPTIMIZE and REORG").

A bin-packing compaction (OPTIMIZE, REORG ... APPLY (PURGE)) writes each output file from the
live rows of its inputs in a known order: input by input, as its ``tags["isolde.compactedFrom"]``
lists them (each with the deletion vector it was compacted at), each input's rows by
position. A row's position in the output is the number of live rows before it. With that
map a concurrent deletion crosses the rewrite in both directions:

* the compaction loses to a commit W that deleted rows of an input (a larger deletion vector,
  or the input removed outright): the compaction commits the matching deletion vector on its
  output and removes W's version of the input, instead of ConcurrentDeleteReadException;
* a transaction T that deleted or updated rows of an input loses to the compaction: T's new
  positions move to the output (it removes the output as committed and adds it with the
  union, or removes it outright when no live row is left), instead of
  ConcurrentDeleteDeleteException. An input T removed outright (every live row deleted)
  moves as all of its rows.

A Z-ordering or clustering rewrite (rows reordered across many outputs) carries the same way
on a table with row tracking: its outputs keep each row's stable row id in the materialised
column, which maps an input position to an output position (row_id_layout.py). Without row
tracking it records no layout and the reference's conflicts stand.

Carried only when the deletion vector each side started from is the same one (the winner's
and this transaction's remove of the input name the same vector) and the rows only grew
more deleted; anything else keeps the conflict. A copy-on-write rewrite by T (no deletion
vector) is not carried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Iterable, Optional

from pyroaring import BitMap64

from ..log.actions import Action, AddFile, DeletionVectorDescriptor, RemoveFile
from ..log.deletion_vectors import dv_file_path, write_deletion_vectors

LAYOUT_TAG = "isolde.compactedFrom"


def layout_tag(inputs: Iterable[AddFile]) -> str:
    """The tag an output file carries: its inputs in row order, each with its vector and size."""
    return json.dumps([{"path": f.path, "numRecords": (f.parsed_stats or {}).get("numRecords"),
                        "deletionVector": f.deletion_vector.to_dict() if f.deletion_vector is not None else None}
                       for f in inputs], separators=(",", ":"))


def _dv_key(dv: Optional[DeletionVectorDescriptor]):
    return None if dv is None else dv.unique_id


@dataclass
class Layout:
    """One compacted output file: the live rows of ``inputs`` (path, live positions), in order."""

    output: AddFile
    inputs: list[tuple[str, BitMap64]]

    @classmethod
    def of(cls, add: AddFile, files) -> Optional["Layout"]:
        """The layout an AddFile's tag records, or None (no tag, or one that cannot be read)."""
        text = (add.tags or {}).get(LAYOUT_TAG)
        if not text:
            return None
        try:
            entries = json.loads(text)
            inputs = []
            for e in entries:
                n = e.get("numRecords")
                if not isinstance(n, int):
                    return None
                dv = DeletionVectorDescriptor.from_dict(e.get("deletionVector"))
                inputs.append((e["path"], BitMap64(range(n)) - files.deleted_rows(dv)))
        except (ValueError, KeyError, TypeError, OSError):
            return None
        return cls(add, inputs)

    @property
    def outputs(self) -> dict[str, AddFile]:
        return {self.output.path: self.output}

    def map(self, path: str, positions: BitMap64) -> Optional[dict[str, BitMap64]]:
        """Output path -> positions of input ``path``'s rows there; None if any cannot be found."""
        rows = self.to_output(path, positions)
        return None if rows is None else {self.output.path: rows}

    def to_output(self, path: str, positions: BitMap64) -> Optional[BitMap64]:
        """Positions of input ``path``'s rows in the output; None if any was not compacted live."""
        base = 0
        for p, live in self.inputs:
            if p == path:
                if not positions <= live:
                    return None
                return BitMap64(base + live.rank(x) - 1 for x in positions)
            base += len(live)
        return None


def layouts_in(actions: Iterable[Action], files) -> dict:
    """Input path -> how its rows were laid out in the commit's outputs: a bin-packing's
    ``Layout``, or a clustering rewrite's ``RowIdLayout`` (row_id_layout.py)."""
    from .row_id_layout import row_id_layouts

    actions = list(actions)
    out: dict = row_id_layouts(actions, files)
    for a in actions:
        if isinstance(a, AddFile) and not a.data_change and a.tags and LAYOUT_TAG in a.tags:
            layout = Layout.of(a, files)
            if layout is None:
                continue
            for path, _ in layout.inputs:
                out[path] = layout
    return out


def _with_vector(add: AddFile, dv: DeletionVectorDescriptor, data_change: bool) -> AddFile:
    return replace(add, deletion_vector=dv, data_change=data_change,
                   extra=dict(add.extra) if getattr(add, "extra", None) is not None else add.extra)


def carry_winner_deletes(actions: list[Action], winner, files) -> tuple[list, set, list]:
    """This compaction lost to ``winner``: carry the rows W deleted from its inputs onto its
    outputs. Returns (actions, input paths carried, deletion-vector files written); nothing
    carried (the conflict stands) unless every input W touched can be carried."""
    mine = layouts_in(actions, files)
    removed = {r.path: r for r in winner.removed_files if r.data_change and r.path in mine}
    if not removed:
        return actions, set(), []
    readded = {a.path: a for a in winner.added_files if a.path in removed}
    my_removes = {a.path: a for a in actions if isinstance(a, RemoveFile)}
    extra: dict[str, BitMap64] = {}
    replaced: dict[str, Optional[RemoveFile]] = {}
    for path, theirs in removed.items():
        own = my_removes.get(path)
        if own is None or _dv_key(own.deletion_vector) != _dv_key(theirs.deletion_vector):
            return actions, set(), []
        before = files.deleted_rows(own.deletion_vector)
        new = readded.get(path)
        after = files.deleted_rows(new.deletion_vector) if new is not None else BitMap64(range(files.num_records(own)))
        if not before <= after:  # rows came back (RESTORE): not a deletion
            return actions, set(), []
        mapped = mine[path].map(path, after - before)
        if mapped is None:
            return actions, set(), []
        for out, rows in mapped.items():
            extra[out] = extra.get(out, BitMap64()) | rows
        replaced[path] = new.remove(deletion_timestamp=own.deletion_timestamp, data_change=False) if new else None
    outputs = {a.path: a for a in actions if isinstance(a, AddFile) and a.path in extra}
    vectors = {p: files.deleted_rows(outputs[p].deletion_vector) | rows for p, rows in extra.items()}
    descriptors = write_deletion_vectors(files.table_path, vectors)
    new_actions: list = []
    for a in actions:
        if isinstance(a, RemoveFile) and a.path in replaced:
            if replaced[a.path] is not None:
                new_actions.append(replaced[a.path])
        elif isinstance(a, AddFile) and a.path in descriptors:
            new_actions.append(_with_vector(a, descriptors[a.path], data_change=False))
        else:
            new_actions.append(a)
    written = sorted({dv_file_path(files.table_path, d) for d in descriptors.values()})
    return new_actions, set(removed), written


def carry_own_changes(actions: list[Action], winner, files) -> tuple[list, set, list]:
    """``winner`` compacted files whose rows this transaction deleted or updated (by deletion
    vector): move those positions onto the compacted outputs. Returns (actions, input paths
    carried, deletion-vector files written); nothing carried unless all of them can be."""
    compacted = {r.path: r for r in winner.removed_files if not r.data_change}
    if not compacted:
        return actions, set(), []
    my_removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.path in compacted}
    if not my_removes:
        return actions, set(), []
    theirs = layouts_in(winner.actions, files)
    my_adds = {a.path: a for a in actions if isinstance(a, AddFile)}
    extra: dict[str, BitMap64] = {}
    outputs: dict[str, AddFile] = {}
    for path, own in my_removes.items():
        new = my_adds.get(path)
        layout = theirs.get(path)
        if (new is None and not own.data_change) or layout is None \
                or _dv_key(own.deletion_vector) != _dv_key(compacted[path].deletion_vector):
            return actions, set(), []
        before = files.deleted_rows(own.deletion_vector)
        # removed outright (a DELETE that left no live row in it): every row of it deleted
        after = files.deleted_rows(new.deletion_vector) if new is not None else BitMap64(range(files.num_records(own)))
        if not before <= after:
            return actions, set(), []
        mapped = layout.map(path, after - before)
        if mapped is None:
            return actions, set(), []
        for out, rows in mapped.items():
            outputs[out] = layout.outputs[out]
            extra[out] = extra.get(out, BitMap64()) | rows
    vectors = {p: files.deleted_rows(outputs[p].deletion_vector) | rows for p, rows in extra.items()}
    emptied = {p for p, rows in vectors.items() if len(rows) >= files.num_records(outputs[p])}
    kept = {p: v for p, v in vectors.items() if p not in emptied}
    descriptors = write_deletion_vectors(files.table_path, kept) if kept else {}
    new_actions: list = [a for a in actions if not (isinstance(a, (AddFile, RemoveFile)) and a.path in my_removes)]
    for p, out in outputs.items():
        ts = next(iter(my_removes.values())).deletion_timestamp
        new_actions.append(out.remove(deletion_timestamp=ts, data_change=True))
        if p not in emptied:  # an output left with no live row is removed outright
            new_actions.append(_with_vector(out, descriptors[p], data_change=True))
    written = sorted({dv_file_path(files.table_path, d) for d in descriptors.values()})
    return new_actions, set(my_removes), written
