"""VACUUM t [RETAIN n HOURS] [DRY RUN] [LITE | FULL]: delete files the table no longer needs.

A file is deleted only when all of these hold (Delta's rules):

* no live file of the current snapshot is it (data file or deletion-vector file);
* no tombstone younger than the retention (``remove.deletionTimestamp > now - retention``)
  names it -- so every version a reader may still time-travel to within the retention keeps
  its files;
* its own modification time is older than the retention, and no prepared write holds a lease
  on it (executor/catalog/leases.py): files a concurrent writer staged but has not committed are
  never touched, even under ``RETAIN 0 HOURS`` or when a copy kept an old modification time;
* the Delta protocol makes it the table's own: a data file (``*.parquet``) or deletion vector
  (``deletion_vector_<uuid>.bin``) in the table folder or in a partition folder
  (``col=value`` in the table's partition order), a deletion vector in a short prefix folder,
  or anything in a writer's staging folder (``.isolde-staging-*``, ``_temporary``). A user's
  own files, sub-folders, hidden files and folders, ``_delta_log``, the Iceberg ``metadata/``
  folder and the leases are never walked, whatever they hold (stricter than Delta, whose
  VACUUM deletes every untracked file in the table folder). ``.crc`` checksums go only with
  their data file.

FULL (default) lists the table directory; LITE takes the candidates from the tombstones in
the log only (no listing, so it never finds files no commit ever referenced).

Protocol: before it lists or deletes anything (DRY RUN too) VACUUM checks that isolde can read
AND write the table's protocol -- unconditionally, as PROTOCOL.md's ``vacuumProtocolCheck``
feature asks of writers (a table with a writer feature isolde does not implement may own files
VACUUM would otherwise take for garbage).

Retention: defaults to ``delta.deletedFileRetentionDuration`` (7 days); anything shorter is
refused unless ``spark.databricks.delta.retentionDurationCheck.enabled`` is ``false``.

DRY RUN returns the files (column ``path``) and commits nothing. Otherwise the run records
``VACUUM START`` (parameters and numFilesToDelete / sizeOfDataToDelete), deletes, and
records ``VACUUM END`` (numDeletedFiles / numVacuumedDirectories), as Delta does; the
files are deleted at ``commit()`` time, after re-reading the latest version so a file a
commit re-added meanwhile (RESTORE) is kept.
"""

from __future__ import annotations

import os
import re
import time
from urllib.parse import unquote

from ..log.actions import now_ms as _now_ms

from isolde.errors import AnalysisError, ExecutionError
from ..catalog import leases
from ..catalog import properties as P
from . import executes
from ..log import table_files
from ..log.deletion_vectors import dv_file_path
from ..log.features import assert_writable
from ..session.results import CommitResult, PreparedWrite, QueryResult
from isolde.grammar import ast

#: Folders whose every file is a writer's leftover: isolde's staging folders, Spark's _temporary.
STAGING_PREFIXES = (".isolde-staging-", "_temporary")
#: What a Delta writer names its files: data files and deletion vectors (and .crc siblings).
_DATA_FILE = re.compile(r"^[^._].*\.parquet$")
_DV_FILE = re.compile(r"^deletion_vector_[0-9a-fA-F-]{36}\.bin$")
#: a deletion vector's random prefix folder (delta.randomizeFilePrefixes-style, at the table root)
_DV_PREFIX_DIR = re.compile(r"^[A-Za-z0-9]{1,3}$")


def _is_staging(name: str) -> bool:
    return name.startswith(STAGING_PREFIXES)


def _owned_files(root: str, partition_columns: list[str]):
    """(folder, file names VACUUM may consider, staging?) for every folder of the table that the
    Delta protocol makes the table's own: the root and the partition folders (``col=value`` in
    the table's partition order) hold data files and deletion vectors; short prefix folders at
    the root hold deletion vectors; writers' staging folders hold only leftovers. Nothing else
    is walked: a user's sub-folder, hidden files and folders, ``_delta_log`` and the leases
    are never touched, whatever they hold."""
    parts = [p.lower() for p in partition_columns]
    if table_files.is_remote(root):
        yield from _owned_objects(root, parts)
        return
    stack = [(root, 0, False)]
    while stack:
        folder, depth, staging = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = []
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if staging or _is_staging(name):
                    stack.append((entry.path, depth, True))
                elif depth < len(parts) and "=" in name and unquote(name.split("=", 1)[0]).lower() == parts[depth]:
                    stack.append((entry.path, depth + 1, False))
                elif depth == 0 and _DV_PREFIX_DIR.match(name):
                    stack.append((entry.path, -1, False))  # deletion vectors only
            elif entry.is_file(follow_symlinks=False):
                names.append(name)
        yield _owned_in(folder, names, depth, staging)


def _owned_in(folder: str, names: list, depth: int, staging: bool, stats=None):
    if staging:
        return folder, names, True, stats
    ok = [n for n in names if _DV_FILE.match(n) or (depth >= 0 and _DATA_FILE.match(n))]
    return folder, ok + [f".{n}.crc" for n in ok if f".{n}.crc" in names], False, stats


def _owned_objects(root: str, parts: list[str]):
    """``_owned_files`` on S3: one listing of the table's prefix (S3 has no folders to walk), each
    key's folders judged by the same rules, with the sizes and times the listing gave."""
    folders: dict = {}
    for entry in table_files.files_for(root).walk(root):
        depth, staging = 0, False
        for seg in [d for d in entry.rel_dir.split("/") if d]:
            if staging or _is_staging(seg):
                staging = True
            elif 0 <= depth < len(parts) and "=" in seg and unquote(seg.split("=", 1)[0]).lower() == parts[depth]:
                depth += 1
            elif depth == 0 and _DV_PREFIX_DIR.match(seg):
                depth = -1
            else:
                break  # a folder the table does not own (_delta_log, a user's folder, hidden ones)
        else:
            folder = table_files.join(root, entry.rel_dir)
            names, stats, _, _ = folders.setdefault(folder, ([], {}, depth, staging))
            if not entry.name.startswith(".") or entry.name.endswith(".crc"):
                names.append(entry.name)
            stats[entry.name] = (entry.size, entry.modification_time)
    for folder, (names, stats, depth, staging) in folders.items():
        yield _owned_in(folder, names, depth, staging, stats)


def _dv_paths(table_path: str, action) -> list[str]:
    dv = getattr(action, "deletion_vector", None)
    if dv is None or dv.storage_type == "i":
        return []
    try:
        return [table_files.absolute(dv_file_path(table_path, dv))]
    except Exception:
        return []


def referenced_files(table_path: str, snapshot, threshold_ms: int) -> set[str]:
    """Absolute local paths the table still needs: live files and tombstones within retention."""
    keep: set[str] = set()
    for add in snapshot.all_files:
        keep.add(table_files.absolute(P.local_path(table_path, add.path)))
        keep.update(_dv_paths(table_path, add))
    for rm in snapshot.tombstones:
        ts = rm.deletion_timestamp
        if ts is None or ts > threshold_ms:
            keep.add(table_files.absolute(P.local_path(table_path, rm.path)))
            keep.update(_dv_paths(table_path, rm))
    return keep


def _physical_partition_columns(metadata) -> list[str]:
    """The partition columns in order, as their folders name them (physical names under column mapping)."""
    if metadata is None:
        return []
    mapped = metadata.configuration.get("delta.columnMapping.mode", "none").lower() != "none"
    by_name = {f["name"].lower(): f for f in (metadata.schema or {}).get("fields", [])}
    out = []
    for c in metadata.partition_columns:
        field = by_name.get(c.lower(), {})
        out.append(str(field.get("metadata", {}).get("delta.columnMapping.physicalName", c)) if mapped else c)
    return out


def _list_candidates(root: str, keep: set[str], threshold_ms: int, partition_columns: list[str],
                     leased: list[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """(files to delete with sizes, scanned directories) under ``root``."""
    out: list[tuple[str, int]] = []
    dirs: list[str] = []
    for folder, names, _, stats in _owned_files(root, partition_columns):
        if folder != root and stats is None:  # (S3 has no folders to remove)
            dirs.append(folder)
        listed = set(names)
        for name in names:
            if name.startswith(".") and name.endswith(".crc") and name[1:-4] in listed:
                continue  # goes with its data file
            full = table_files.join(folder, name)
            if full in keep or leases.is_leased(full, leased):
                continue
            if stats is not None:
                size, mtime = stats[name]
            else:
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                size, mtime = st.st_size, st.st_mtime * 1000
            if mtime >= threshold_ms:
                continue  # young: maybe a concurrent writer's file not yet committed
            out.append((full, size))
            crc = f".{name}.crc"
            if crc in listed:
                out.append((table_files.join(folder, crc), 0))
    return out, dirs


def _lite_candidates(table_path: str, snapshot, keep: set[str], threshold_ms: int) -> list[tuple[str, int]]:
    out = []
    seen = set()
    for rm in snapshot.tombstones:
        ts = rm.deletion_timestamp
        if ts is None or ts > threshold_ms:
            continue
        for path in [table_files.absolute(P.local_path(table_path, rm.path))] + _dv_paths(table_path, rm):
            if path in keep or path in seen or not path.startswith(table_path.rstrip("/") + "/"):
                continue
            seen.add(path)
            try:
                size, mtime = table_files.files_for(path).stat(path)
            except FileNotFoundError:
                continue
            if mtime < threshold_ms:
                out.append((path, size))
    return out


def _retention(ctx, metadata, retain_hours) -> tuple[int, int, bool]:
    """(retention ms, table default ms, check enabled) after the safety check."""
    default_ms = P.deleted_file_retention_ms(metadata)
    check = str(P.conf_get(ctx, P.RETENTION_CHECK_CONF, "true")).strip().lower() != "false"
    if retain_hours is None:
        return default_ms, default_ms, check
    if retain_hours < 0:
        raise AnalysisError(f"VACUUM RETAIN {retain_hours:g} HOURS: the retention cannot be negative.",
                            error_class="DELTA_VACUUM_RETENTION_PERIOD_NEGATIVE")
    retention_ms = int(retain_hours * 3_600_000)
    if check and retention_ms < default_ms:
        raise AnalysisError(
            f"VACUUM RETAIN {retain_hours:g} HOURS is shorter than the table's retention of "
            f"{default_ms / 3_600_000:g} hours (delta.deletedFileRetentionDuration). Deleting files that recent can "
            "break concurrent writers and time travel. If you are certain that no operation is running on this "
            f"table, turn the check off with: SET {P.RETENTION_CHECK_CONF} = false",
            error_class="DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT", sqlstate="42K0A")
    return retention_ms, default_ms, check


def check_protocol(snap) -> None:
    """VACUUM's protocol check (vacuumProtocolCheck): refuse a table whose protocol isolde cannot
    read or cannot write (UnsupportedFeatureError naming the feature), whatever features it lists."""
    if snap.version < 0:
        return
    snap.assert_readable()
    if snap.protocol is not None:
        assert_writable(snap.protocol, snap.metadata, snap.table_path, snap.version)


def plan_vacuum(ctx, handle, retain_hours=None, lite: bool = False, now_ms: int | None = None):
    """(candidates [(path, size)], scanned dirs, parameters, snapshot) without deleting anything."""
    snap = handle.log.update()
    check_protocol(snap)
    retention_ms, default_ms, check = _retention(ctx, snap.metadata, retain_hours)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    threshold = now_ms - retention_ms
    root = table_files.absolute(handle.path)
    keep = referenced_files(root, snap, threshold)
    if lite:
        candidates, dirs = _lite_candidates(root, snap, keep, threshold), []
    else:
        # UniForm: the Iceberg metadata beside the log (``metadata/``) is not referenced by the Delta log
        candidates, dirs = _list_candidates(root, keep, threshold, _physical_partition_columns(snap.metadata),
                                            leases.leased_paths(root, now_ms))
    params = {
        "retentionCheckEnabled": check,
        "specifiedRetentionMillis": retention_ms if retain_hours is not None else None,
        "defaultRetentionMillis": default_ms,
        "vacuumType": "LITE" if lite else "FULL",
    }
    return candidates, dirs, params, snap, threshold


@executes(ast.Vacuum)
def run(ctx, stmt: ast.Vacuum):
    handle = P.resolve(ctx, stmt.table)
    lite = (stmt.mode or "FULL").upper() == "LITE"
    candidates, dirs, params, snap, threshold = plan_vacuum(ctx, handle, stmt.retain_hours, lite)
    if stmt.dry_run:
        return QueryResult(columns=["path"], rows=[(p,) for p, _ in candidates if not os.path.basename(p).startswith(".")],
                           message=f"Found {len(candidates)} files to delete in {handle.name}")
    started = time.perf_counter()
    data_files = [(p, s) for p, s in candidates if not os.path.basename(p).startswith(".")]

    def commit() -> CommitResult:
        log = handle.log
        check_protocol(log.update())  # the protocol may have changed since planning
        start_version = P.txn_commit(ctx.start_transaction(log), [], "VACUUM START", params, {
            "numFilesToDelete": len(data_files), "sizeOfDataToDelete": sum(s for _, s in data_files)})
        # a commit since planning may have re-added a file (RESTORE): keep what the latest version needs
        latest = log.update()
        keep = referenced_files(table_files.absolute(handle.path), latest, threshold)
        dir_mtimes = {}
        for d in dirs:
            try:
                dir_mtimes[d] = os.stat(d).st_mtime * 1000
            except OSError:
                pass
        deleted = 0
        try:
            for path, _ in candidates:
                if path in keep:
                    continue
                try:
                    if table_files.is_remote(path):
                        table_files.files_for(path).delete(path)
                    else:
                        os.remove(path)
                    if not os.path.basename(path).startswith("."):
                        deleted += 1
                except FileNotFoundError:
                    pass
        except OSError as e:  # record the failed run as Delta does, then report it
            P.txn_commit(ctx.start_transaction(log), [], "VACUUM END", {"status": "FAILED"},
                         {"numDeletedFiles": deleted, "numVacuumedDirectories": len(dirs)})
            raise ExecutionError(f"VACUUM {handle.name} failed after deleting {deleted} file(s): {e}",
                                 error_class="DELTA_VACUUM_FAILED") from e
        vacuumed_dirs = 0
        for d in sorted(dirs, key=len, reverse=True):  # deepest first; only folders untouched for the retention
            try:
                if not os.listdir(d) and dir_mtimes.get(d, _now_ms()) < threshold:
                    os.rmdir(d)
                    vacuumed_dirs += 1
            except OSError:
                pass
        metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": len(dirs)}
        end_version = P.txn_commit(ctx.start_transaction(log), [], "VACUUM END", {"status": "COMPLETED"}, metrics)
        metrics["vacuumStartVersion"] = start_version
        metrics["numDeletedDirectories"] = vacuumed_dirs
        return CommitResult(version=end_version, operation="VACUUM END", metrics=metrics, table=handle.name,
                            elapsed_s=time.perf_counter() - started)

    return PreparedWrite(operation="VACUUM", table=handle.name, commit_fn=commit, staged_paths=[],
                         metrics={"numFilesToDelete": len(data_files)})


# Pure log work: the session need not wait for Spark to start (no Spark job group).
run.needs_spark = False
