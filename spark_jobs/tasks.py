"""What one Spark task does: read a bucket's (or a file's) stored rows, transform, write new files.

Everything a task needs travels in its typed unit and the job's context (spark_jobs.contracts); the task opens
the store itself through pyarrow/boto3, so the same code runs in local mode and on a cluster whose executors
reach the store. Each task function takes (JobContext, unit) and returns its result dataclass.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.changes.events import ChangeEvents, deletes, empty_events, pair_changes, updates
from destination.changes.files import format_staged, write_events, write_snapshot
from destination.changes.metadata import KIND_SNAPSHOT, ChangeFile
from destination.conversion import FailureKey, convert_column
from destination.keys import key_tokens
from destination.storage.base import Storage, open_storage
from destination.table_model import TableDef
from destination.table_store.datafiles import BucketFiles, DataFile, align, may_hold, read_data_file, write_data_file
from destination.table_store.layout import data_file_name
from destination.table_store.locations import file_dir
from spark_jobs.alter import convert_table
from spark_jobs.contracts import (
    DecodedCounts,
    DecodeUnit,
    FilesWritten,
    FormatChangesUnit,
    HistoryRewriteUnit,
    JobContext,
    LatestVersionsUnit,
    Loaded,
    LoadUnit,
    MergeUnit,
    RequestCounts,
    RewriteUnit,
    SnapshotChangesUnit,
    TruncateUnit,
    VersionAtStep,
)
from spark_jobs.history import merge_history_bucket
from spark_jobs.history_migrations import latest_versions, to_history, version_at
from spark_jobs.merge import MergeCounts, merge_bucket
from spark_jobs.operations import HASH, KEY, OP, OP_EARLIEST, file_operations, from_ipc, split_by_bucket

MAX_FILES_PER_BUCKET = 8  # compaction policy: a touched bucket with more files is rewritten as one
META = 0  # the shuffle key of a write's per-file counts; bucket b travels under key b + 1


def _finish(storage: Storage, ctx: JobContext, table: pa.Table, table_def: TableDef, bucket: int | None,
            replaced: list[str], counts: dict[str, int], events: ChangeEvents | None = None) -> FilesWritten:
    """A task's result: `table` written as one new data file of `bucket` (none when it is empty), and with
    change files on, the task's events (a row-level version) or `table` itself (a snapshot version)."""
    new_files: tuple[DataFile, ...] = ()
    if table.num_rows:
        new_files = (write_data_file(storage, ctx.target_dir, data_file_name(bucket), table, table_def, bucket),)
    changes: tuple[ChangeFile, ...] = ()
    target = ctx.changes
    if target is not None:
        if target.kind == KIND_SNAPSHOT:
            part = write_snapshot(storage, target, table_def, bucket, table)
        else:
            part = write_events(storage, target, table_def, bucket, events or empty_events(table_def))
        changes = (part,) if part else ()
    return FilesWritten(new_files=new_files, replaced=tuple(replaced), counts=counts, changes=changes)


def decode_file_task(ctx: JobContext, unit: DecodeUnit) -> Iterator[tuple[int, bytes | DecodedCounts]]:
    """Map side of a write: decodes the file and emits (bucket + 1, Arrow IPC chunk of that bucket's operations),
    then (META, the file's counts)."""
    started = time.perf_counter()
    ops = file_operations(ctx.table, unit.ref, unit.fmt)
    chunks = ops.chunks()
    counts = DecodedCounts(rows=ops.rows, failures_by_column=ops.failures_by_column,
                           seconds=time.perf_counter() - started)
    del ops
    yield from ((bucket + 1, chunk) for bucket, chunk in chunks)
    yield META, counts


def merge_shuffled_task(files_by_bucket: dict[int, tuple[DataFile, ...]], ctx: JobContext, key: int,
                        payloads: list[bytes | DecodedCounts]) -> FilesWritten | RequestCounts:
    """Reduce side of a write: the request's counts (key META), or one bucket's merge over its chunks."""
    if key == META:
        decoded = [p for p in payloads if isinstance(p, DecodedCounts)]
        failures: Counter[FailureKey] = Counter()
        for counts in decoded:
            failures.update(counts.failures_by_column)
        return RequestCounts(rows=sum(c.rows for c in decoded), files=len(decoded), failures_by_column=dict(failures),
                             decode_seconds=sum(c.seconds for c in decoded))
    bucket = key - 1
    started = time.perf_counter()
    chunks = tuple(p for p in payloads if isinstance(p, bytes))
    result = merge_bucket_task(ctx, MergeUnit(bucket=bucket, chunks=chunks, files=files_by_bucket.get(bucket, ())))
    return FilesWritten(new_files=result.new_files, replaced=result.replaced, counts=result.counts,
                        changes=result.changes, seconds=time.perf_counter() - started)


def load_files_task(ctx: JobContext, unit: LoadUnit) -> Loaded:
    """A write into an empty table without updates or deletes: each file's operations are merged per bucket here
    (against no stored rows) and appended to one data file per bucket, with no shuffle. Keys repeated within a
    file merge as usual; the driver checks with the returned key hashes that no key is in two files (else it
    redoes the request through the shuffle)."""
    started = time.perf_counter()
    storage = open_storage(ctx.storage)
    table_def = ctx.table
    merge = merge_history_bucket if table_def.is_history else merge_bucket
    target = ctx.changes
    files = BucketFiles(storage, ctx.target_dir, table_def)
    counts = MergeCounts()
    changes: list[ChangeFile] = []
    hashes: list[np.ndarray] = []
    failures: Counter[FailureKey] = Counter()
    rows = noops = 0
    for ref in unit.refs:
        ops = file_operations(table_def, ref, unit.fmt)
        rows += ops.rows
        failures.update(ops.failures_by_column)
        if not ops.parts:
            continue
        table = pa.concat_tables(ops.parts)
        table = table.filter(pc.not_equal(table.column(OP), OP_EARLIEST))  # no stored versions to close
        hashes.append(distinct(table.column(HASH).to_numpy()))
        for bucket, part in split_by_bucket(table):
            result = merge(align(pa.table({}), table_def), part, table_def, ctx.version,
                           track_changes=target is not None)
            files.add(bucket, result.table)
            counts.add(result.counts)
            if target is not None and result.before is not None and result.after is not None:
                paired = pair_changes(result.before, result.after, table_def, target.settings.emit_noop_updates)
                noops += paired.noop_updates
                written = write_events(storage, target, table_def, bucket, paired.events)
                changes += [written] if written else []
    seconds = time.perf_counter() - started
    return Loaded(written=FilesWritten(new_files=tuple(files.close()), counts={**counts.as_dict(), "noop_updates": noops},
                                       changes=tuple(changes), seconds=seconds),
                  counts=RequestCounts(rows=rows, files=len(unit.refs), failures_by_column=dict(failures)),
                  key_hashes=np.concatenate(hashes).tobytes() if hashes else b"")


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort is several times faster than np.unique's hash table here)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def merge_bucket_task(ctx: JobContext, unit: MergeUnit) -> FilesWritten:
    """One bucket of a write: its operations merged with the base's rows they may touch."""
    storage = open_storage(ctx.storage)
    table_def = ctx.table
    ops = pa.concat_tables([from_ipc(c) for c in unit.chunks]).combine_chunks()
    op_keys = ops.column(KEY).combine_chunks()
    kcols = table_def.entity_key
    compact = len(unit.files) + 1 > MAX_FILES_PER_BUCKET
    rewrite: list[DataFile] = []
    stored_parts: list[pa.Table] = []
    for f in unit.files:
        if not compact:
            if not may_hold(ops, f.key_range, table_def):
                continue  # no key of the request is in the file's key range: not even its keys are read
            # every file of a version has the version's columns (AlterTable rewrites them all)
            keys_only = read_data_file(storage, file_dir(ctx.read_dir, f), f.name, [c.name for c in kcols])
            if not pc.any(pc.is_in(key_tokens(keys_only, kcols), value_set=op_keys)).as_py():
                continue
        rewrite.append(f)
        stored_parts.append(align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), table_def))
    stored = pa.concat_tables(stored_parts) if stored_parts else align(pa.table({}), table_def)
    merge = merge_history_bucket if table_def.is_history else merge_bucket
    result = merge(stored, ops, table_def, ctx.version, track_changes=ctx.tracks_row_changes)
    counts = result.counts.as_dict()
    events = None
    if ctx.changes is not None and ctx.tracks_row_changes and result.before is not None and result.after is not None:
        paired = pair_changes(result.before, result.after, table_def, ctx.changes.settings.emit_noop_updates)
        events, counts["noop_updates"] = paired.events, paired.noop_updates
    return _finish(storage, ctx, result.table, table_def, unit.bucket, [f.name for f in rewrite], counts, events)


def before_cutoff_ms(synced: pa.Array, cutoff_us: int) -> pa.Array:
    """synced < cutoff compared at millisecond precision, in exact int64 arithmetic (µs values of
    distant years do not fit a float64) with floor division (right for instants before 1970)."""
    micros = synced.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    millis = np.floor_divide(pc.fill_null(micros, 0).to_numpy(), 1000)
    return pc.and_(pc.is_valid(micros), pa.array(millis < cutoff_us // 1000))


def truncate_file_task(ctx: JobContext, unit: TruncateUnit) -> FilesWritten:
    """Rows with synced (at ms) < cutoff go (a soft truncate marks them deleted instead)."""
    storage = open_storage(ctx.storage)
    table_def = ctx.table
    f = unit.file
    table = align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), table_def)
    hit = before_cutoff_ms(table.column(unit.synced_column).combine_chunks(), unit.cutoff_us)
    deleted_col = unit.deleted_column
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


def rewrite_file_task(ctx: JobContext, unit: RewriteUnit) -> FilesWritten:
    """Re-encode a stored file under a new definition (AlterTable, and the column migrations).

    Columns keep their values; a changed type converts each value, and a value that does
    not convert becomes NULL with the change recorded in `_destination_meta`.
    """
    storage = open_storage(ctx.storage)
    f = unit.file
    old = align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), unit.old_table)
    table, failures = convert_table(old, unit.old_table, ctx.table, ctx.version, unit.sources, unit.constants)
    return _finish(storage, ctx, table, ctx.table, f.bucket, [f.name], {"converted_failures": failures})


def history_rewrite_task(ctx: JobContext, unit: HistoryRewriteUnit) -> FilesWritten:
    """Convert a stored file to the new definition, then apply a row-local history migration step
    (spark_jobs.history_migrations)."""
    storage = open_storage(ctx.storage)
    f = unit.file
    new_def = ctx.table
    old = align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), unit.old_table)
    table, failures = convert_table(old, unit.old_table, new_def, ctx.version)
    step = unit.step
    counts = {"converted_failures": failures}
    if isinstance(step, VersionAtStep):
        column = new_def.column(step.column)
        assert column is not None
        value, value_failures = convert_column(pa.array([step.value], pa.string()), column)
        table, opened = version_at(table, column.name, value, value_failures[0] if value_failures else None,
                                   step.ts_us, ctx.version, step.only_with_value)
        counts["versions_opened"] = opened
    else:
        deleted_column = step.deleted_column
        if deleted_column and deleted_column in old.column_names:
            deleted = pc.fill_null(old.column(deleted_column), False).to_numpy(zero_copy_only=False)
        else:
            deleted = np.zeros(old.num_rows, dtype=bool)
        table = to_history(table, deleted, step.start_us or 0)
    return _finish(storage, ctx, table, new_def, f.bucket, [f.name], counts)


def latest_versions_task(ctx: JobContext, unit: LatestVersionsUnit) -> FilesWritten:
    """HISTORY_TO_SOFT_DELETE for one bucket: the latest version of every key, deleted = not active (dropped
    unless deleted rows are kept)."""
    storage = open_storage(ctx.storage)
    old_def = unit.old_table
    parts = [align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), old_def) for f in unit.files]
    versions = pa.concat_tables(parts) if parts else align(pa.table({}), old_def)
    latest, deleted = latest_versions(versions, old_def)
    table, failures = convert_table(latest, old_def, ctx.table, ctx.version)
    name = unit.deleted_column
    table = table.set_column(table.column_names.index(name), name, pa.array(deleted))
    if not unit.keep_deleted_rows:
        table = table.filter(pa.array(~deleted))
    return _finish(storage, ctx, table, ctx.table, unit.bucket, [f.name for f in unit.files],
                   {"versions_dropped": versions.num_rows - latest.num_rows, "deleted": int(deleted.sum()),
                    "converted_failures": failures})


def format_changes_task(ctx: JobContext, unit: FormatChangesUnit) -> FilesWritten:
    """Phase 2 of an Arcion change directory: format one staged file."""
    target = ctx.changes
    assert target is not None
    part = format_staged(open_storage(ctx.storage), target, ctx.table, unit.part, unit.totals_before)
    return FilesWritten(changes=(part,))


def snapshot_changes_task(ctx: JobContext, unit: SnapshotChangesUnit) -> FilesWritten:
    """The snapshot change file of one data file of the new version (for versions whose files were not written
    by a Spark task: table copies)."""
    target = ctx.changes
    assert target is not None
    storage = open_storage(ctx.storage)
    rows = align(read_data_file(storage, file_dir(unit.directory, unit.file), unit.file.name), ctx.table)
    part = write_snapshot(storage, target, ctx.table, unit.file.bucket, rows)
    return FilesWritten(changes=(part,) if part else ())
