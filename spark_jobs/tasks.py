"""What one Spark task does: read a bucket's (or a file's) stored rows, transform, write new files.

Everything a task needs travels in picklable plain data (JobContext, units with
Arrow IPC payloads); the task opens the store itself through pyarrow/boto3, so the
same code runs in local mode and on a cluster whose executors reach the store.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.changes.events import ChangeEvents, deletes, empty_events, pair_changes, updates
from destination.changes.files import ChangeTarget, format_staged, write_events, write_snapshot
from destination.changes.metadata import ROWS, SNAPSHOT
from destination.conversion import FailureKey, convert_column
from spark_jobs.operations import BatchFileRef, file_operations, from_ipc, split_by_bucket
from destination.storage.base import Storage, StorageSpec, open_storage
from destination.table_model import TableDef
from destination.table_store.datafiles import (BucketFiles, DataFile, align, may_hold, read_data_file,
                                                write_data_file)
from destination.table_store.layout import data_file_name
from spark_jobs.alter import convert_table
from destination.keys import key_tokens
from spark_jobs.history import merge_history_bucket
from spark_jobs.history_migrations import latest_versions, to_history, version_at
from spark_jobs.merge import EARLIEST, HASH, KEY, OP, MergeCounts, key_columns, merge_bucket

MAX_FILES_PER_BUCKET = 8  # compaction policy: a touched bucket with more files is rewritten as one
META = 0  # the shuffle key of a write's per-file counts; bucket b travels under key b + 1


@dataclass(frozen=True)
class JobContext:
    storage: StorageSpec
    base_dir: str | None  # the base version's directory (files are read from here)
    target_dir: str  # where new files are written
    table: dict[str, Any]  # TableDef JSON of the new version
    version: int
    changes: dict[str, Any] | None = None  # ChangeTarget JSON when the version writes change files

    @property
    def table_def(self) -> TableDef:
        return TableDef.from_json(self.table)

    @property
    def change_target(self) -> ChangeTarget | None:
        return ChangeTarget.from_json(self.changes) if self.changes else None

    @property
    def tracks_row_changes(self) -> bool:
        return self.changes is not None and self.changes["kind"] == ROWS


@dataclass
class TaskResult:
    new_files: list[dict[str, Any]] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # names of base files rewritten (not carried)
    counts: dict[str, int] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)  # change files written (destination.changes.files)


def _finish(storage: Storage, ctx: JobContext, table: pa.Table, table_def: TableDef, bucket: int | None,
            replaced: list[str], counts: dict[str, int], events: ChangeEvents | None = None) -> dict[str, Any]:
    """A task's result: `table` written as one new data file of `bucket` (none when it is empty), and with
    change files on, the task's events (a row-level version) or `table` itself (a snapshot version)."""
    out = TaskResult(replaced=replaced, counts=counts)
    if table.num_rows:
        out.new_files.append(write_data_file(storage, ctx.target_dir, data_file_name(bucket), table, table_def,
                                             bucket).to_json())
    target = ctx.change_target
    if target is not None:
        if target.kind == SNAPSHOT:
            part = write_snapshot(storage, target, table_def, bucket, table)
        else:
            part = write_events(storage, target, table_def, bucket, events or empty_events(table_def))
        out.changes += [part] if part else []
    return out.__dict__


def release_memory() -> None:
    """Give the memory a finished task freed back to the system: Arrow's allocator keeps it otherwise, and a
    reused Python worker would carry it into the next task (two workers' leftovers added to the server's peak)."""
    pa.default_memory_pool().release_unused()


def decode_file_task(ctx: JobContext, unit: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """Map side of a write: unit {ref: BatchFileRef, fmt: FileFormat}. Decodes the file and emits
    (bucket + 1, Arrow IPC chunk of that bucket's operations), then (META, the file's counts)."""
    ref: BatchFileRef = unit["ref"]
    started = time.perf_counter()
    ops = file_operations(ctx.table_def, ref, unit["fmt"])
    chunks = ops.chunks()
    ops_rows, failures = ops.rows, ops.failures_by_column
    seconds = time.perf_counter() - started
    del ops
    yield from ((bucket + 1, chunk) for bucket, chunk in chunks)
    yield META, {"rows": ops_rows, "failures_by_column": failures, "seconds": seconds}
    release_memory()


def merge_shuffled_task(files_by_bucket: dict[int, list[dict[str, Any]]], ctx: JobContext, key: int,
                        payloads: list[Any]) -> dict[str, Any]:
    """Reduce side of a write: the request's counts (key META), or one bucket's merge over its chunks."""
    if key == META:
        failures: Counter[FailureKey] = Counter()
        for meta in payloads:
            failures.update(meta["failures_by_column"])
        return {"meta": {"rows": sum(m["rows"] for m in payloads), "files": len(payloads),
                         "failures_by_column": dict(failures), "decode_seconds": sum(m["seconds"] for m in payloads)}}
    bucket = key - 1
    started = time.perf_counter()
    result = merge_bucket_task(ctx, {"bucket": bucket, "chunks": payloads, "files": files_by_bucket.get(bucket, [])})
    result["seconds"] = time.perf_counter() - started
    return result


def load_files_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {refs: [BatchFileRef], fmt}. A write into an empty table without updates or deletes: each file's
    operations are merged per bucket here (against no stored rows) and appended to one data file per bucket,
    with no shuffle. Keys repeated within a file merge as usual; the driver checks with the returned key
    hashes that no key is in two files (else it redoes the request through the shuffle)."""
    started = time.perf_counter()
    storage = open_storage(ctx.storage)
    table_def = ctx.table_def
    merge = merge_history_bucket if table_def.is_history else merge_bucket
    target = ctx.change_target
    files = BucketFiles(storage, ctx.target_dir, table_def)
    counts = MergeCounts()
    changes: list[dict[str, Any]] = []
    hashes: list[np.ndarray] = []
    failures: Counter[FailureKey] = Counter()
    rows = noops = 0
    for ref in unit["refs"]:
        ops = file_operations(table_def, ref, unit["fmt"])
        rows += ops.rows
        failures.update(ops.failures_by_column)
        if not ops.parts:
            continue
        table = pa.concat_tables(ops.parts)
        table = table.filter(pc.not_equal(table.column(OP), EARLIEST))  # no stored versions to close
        hashes.append(distinct(table.column(HASH).to_numpy()))
        for bucket, part in split_by_bucket(table):
            result = merge(align(pa.table({}), table_def), part, table_def, ctx.version,
                           track_changes=target is not None)
            files.add(bucket, result.table)
            counts.add(result.counts)
            if target is not None and result.before is not None and result.after is not None:
                paired = pair_changes(result.before, result.after, table_def, target.change_settings.emit_noop_updates)
                noops += paired.noop_updates
                written = write_events(storage, target, table_def, bucket, paired.events)
                changes += [written] if written else []
    out = TaskResult(new_files=[f.to_json() for f in files.close()], counts={**counts.as_dict(), "noop_updates": noops},
                     changes=changes).__dict__
    out["load"] = {"rows": rows, "failures_by_column": dict(failures),
                   "key_hashes": np.concatenate(hashes).tobytes() if hashes else b"",
                   "seconds": time.perf_counter() - started}
    return out


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort is several times faster than np.unique's hash table here)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def merge_bucket_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {bucket, chunks (Arrow IPC of the bucket's operations), files: [DataFile json of this bucket in the
    base]}."""
    storage = open_storage(ctx.storage)
    table_def = ctx.table_def
    ops = pa.concat_tables([from_ipc(c) for c in unit["chunks"]]).combine_chunks()
    files = [DataFile.from_json(f) for f in unit["files"]]
    op_keys = ops.column(KEY).combine_chunks()
    kcols = key_columns(table_def)
    compact = len(files) + 1 > MAX_FILES_PER_BUCKET
    rewrite: list[DataFile] = []
    stored_parts: list[pa.Table] = []
    for f in files:
        if not compact:
            if not may_hold(ops, f.key_range, table_def):
                continue  # no key of the request is in the file's key range: not even its keys are read
            # every file of a version has the version's columns (AlterTable rewrites them all)
            keys_only = read_data_file(storage, ctx.base_dir or "", f.name, [c.name for c in kcols])
            if not pc.any(pc.is_in(key_tokens(keys_only, kcols), value_set=op_keys)).as_py():
                continue
        rewrite.append(f)
        stored_parts.append(align(read_data_file(storage, ctx.base_dir or "", f.name), table_def))
    stored = pa.concat_tables(stored_parts) if stored_parts else align(pa.table({}), table_def)
    merge = merge_history_bucket if table_def.is_history else merge_bucket
    result = merge(stored, ops, table_def, ctx.version, track_changes=ctx.tracks_row_changes)
    counts = result.counts.as_dict()
    events = None
    if ctx.tracks_row_changes and result.before is not None and result.after is not None:
        target = ctx.change_target
        assert target is not None
        paired = pair_changes(result.before, result.after, table_def, target.change_settings.emit_noop_updates)
        events, counts["noop_updates"] = paired.events, paired.noop_updates
    return _finish(storage, ctx, result.table, table_def, unit["bucket"], [f.name for f in rewrite], counts, events)


def before_cutoff_ms(synced: pa.Array, cutoff_us: int) -> pa.Array:
    """synced < cutoff compared at millisecond precision, in exact int64 arithmetic (µs values of
    distant years do not fit a float64) with floor division (right for instants before 1970)."""
    micros = synced.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    millis = np.floor_divide(pc.fill_null(micros, 0).to_numpy(), 1000)
    return pc.and_(pc.is_valid(micros), pa.array(millis < cutoff_us // 1000))


def truncate_file_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {file, cutoff_us, synced_column, deleted_column or None}. Rows with synced (at ms) < cutoff go."""
    storage = open_storage(ctx.storage)
    table_def = ctx.table_def
    f = DataFile.from_json(unit["file"])
    table = align(read_data_file(storage, ctx.base_dir or "", f.name), table_def)
    hit = before_cutoff_ms(table.column(unit["synced_column"]).combine_chunks(), unit["cutoff_us"])
    deleted_col = unit.get("deleted_column")
    if deleted_col:  # the driver added the column to the table first if it was missing
        current = table.column(deleted_col)
        newly = pc.and_(hit, pc.invert(pc.fill_null(current, False)))
        updated = table.set_column(table.column_names.index(deleted_col), deleted_col, pc.if_else(hit, True, current))
        events = updates(table.filter(newly), updated.filter(newly), table_def) if ctx.tracks_row_changes else None
        table, counts = updated, {"updated": pc.sum(newly).as_py() or 0}
    else:
        events = deletes(table.filter(hit), table_def) if ctx.tracks_row_changes else None
        table, counts = table.filter(pc.invert(hit)), {"deleted": pc.sum(hit).as_py() or 0}
    return _finish(storage, ctx, table, table_def, f.bucket, [f.name], counts, events)


def rewrite_file_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {file, old_table, sources?, constants?}. Re-encode a stored file under a new definition
    (AlterTable, and the column migrations).

    Columns keep their values; a changed type converts each value, and a value that does
    not convert becomes NULL with the change recorded in `_destination_meta`.
    """
    storage = open_storage(ctx.storage)
    f = DataFile.from_json(unit["file"])
    old_def = TableDef.from_json(unit["old_table"])
    old = align(read_data_file(storage, ctx.base_dir or "", f.name), old_def)
    table, failures = convert_table(old, old_def, ctx.table_def, ctx.version, unit.get("sources"), unit.get("constants"))
    return _finish(storage, ctx, table, ctx.table_def, f.bucket, [f.name], {"converted_failures": failures})



def history_rewrite_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {file, old_table, step}. Convert a stored file to the new definition, then apply a row-local
    history migration step (spark_jobs.history_migrations):
    {"kind": "version_at", column, value (text or None), ts_us, only_with_value} or
    {"kind": "to_history", deleted_column (or None), start_us}."""
    storage = open_storage(ctx.storage)
    f = DataFile.from_json(unit["file"])
    old_def = TableDef.from_json(unit["old_table"])
    new_def = ctx.table_def
    old = align(read_data_file(storage, ctx.base_dir or "", f.name), old_def)
    table, failures = convert_table(old, old_def, new_def, ctx.version)
    step = unit["step"]
    counts = {"converted_failures": failures}
    if step["kind"] == "version_at":
        column = new_def.column(step["column"])
        assert column is not None
        value, value_failures = convert_column(pa.array([step["value"]], pa.string()), column)
        table, opened = version_at(table, column.name, value, value_failures[0] if value_failures else None,
                                   step["ts_us"], ctx.version, step["only_with_value"])
        counts["versions_opened"] = opened
    else:
        deleted_column = step["deleted_column"]
        if deleted_column and deleted_column in old.column_names:
            deleted = pc.fill_null(old.column(deleted_column), False).to_numpy(zero_copy_only=False)
        else:
            deleted = np.zeros(old.num_rows, dtype=bool)
        table = to_history(table, deleted, step["start_us"])
    return _finish(storage, ctx, table, new_def, f.bucket, [f.name], counts)


def latest_versions_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {bucket, files, old_table, deleted_column, keep_deleted_rows}. HISTORY_TO_SOFT_DELETE for one
    bucket: the latest version of every key, deleted = not active (dropped unless deleted rows are kept)."""
    storage = open_storage(ctx.storage)
    old_def = TableDef.from_json(unit["old_table"])
    files = [DataFile.from_json(f) for f in unit["files"]]
    parts = [align(read_data_file(storage, ctx.base_dir or "", f.name), old_def) for f in files]
    versions = pa.concat_tables(parts) if parts else align(pa.table({}), old_def)
    latest, deleted = latest_versions(versions, old_def)
    table, failures = convert_table(latest, old_def, ctx.table_def, ctx.version)
    name = unit["deleted_column"]
    table = table.set_column(table.column_names.index(name), name, pa.array(deleted))
    if not unit["keep_deleted_rows"]:
        table = table.filter(pa.array(~deleted))
    return _finish(storage, ctx, table, ctx.table_def, unit["bucket"], [f.name for f in files],
                   {"versions_dropped": versions.num_rows - latest.num_rows, "deleted": int(deleted.sum()),
                    "converted_failures": failures})


def format_changes_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {part, totals_before}. Phase 2 of an Arcion change directory: format one staged file."""
    target = ctx.change_target
    assert target is not None
    part = format_staged(open_storage(ctx.storage), target, ctx.table_def, unit["part"], unit["totals_before"])
    return TaskResult(changes=[part]).__dict__


def snapshot_changes_task(ctx: JobContext, unit: dict[str, Any]) -> dict[str, Any]:
    """unit: {directory, file}. The snapshot change file of one data file of the new version (for versions
    whose files were not written by a Spark task: table copies)."""
    target = ctx.change_target
    assert target is not None
    storage = open_storage(ctx.storage)
    f = DataFile.from_json(unit["file"])
    rows = align(read_data_file(storage, unit["directory"], f.name), ctx.table_def)
    part = write_snapshot(storage, target, ctx.table_def, f.bucket, rows)
    return TaskResult(changes=[part] if part else []).__dict__
