"""What one Spark task does per file: read its stored rows, transform, write new files (the write path's range tasks
are in spark_jobs/tasks/key_ranges.py).

Everything a task needs travels in its typed unit and the job's context (spark_jobs.contracts); the task opens
the store itself through pyarrow/boto3, so the same code runs in local mode and on a cluster whose executors
reach the store. Each task function takes (JobContext, unit) and returns its result dataclass.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.changes.events import ChangeEvents, deletes, empty_events, updates
from destination.changes.files import format_staged, write_events, write_snapshot
from destination.changes.metadata import KIND_SNAPSHOT, ChangeFile
from destination.model.conversion import convert_column
from destination.model.key_order import sorted_rows
from destination.model.table_model import TableDef
from destination.on_disk.datafiles import DataFile, align, read_data_file, write_data_file
from destination.on_disk.layout import data_file_name
from destination.on_disk.locations import file_dir
from destination.records_formats.codec import table_codec
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from spark_jobs.alter import convert_table
from spark_jobs.contracts import (
    FilesWritten,
    FormatChangesUnit,
    HistoryRewriteUnit,
    JobContext,
    LatestVersionsUnit,
    RewriteUnit,
    SnapshotChangesUnit,
    TruncateUnit,
    VersionAtStep,
)
from spark_jobs.history_transforms import latest_versions, to_history, version_at


def _finish(storage: Storage, ctx: JobContext, table: pa.Table, table_def: TableDef, bucket: int | None,
            replaced: list[str], counts: dict[str, int], events: ChangeEvents | None = None) -> FilesWritten:
    """A task's result: `table` written as one new data file of `bucket` (none when it is empty), and with
    change files on, the task's events (a row-level version) or `table` itself (a snapshot version)."""
    new_files: tuple[DataFile, ...] = ()
    if table.num_rows and table_def.in_key_ranges:  # a file of a key range holds its rows in key order
        table = sorted_rows(table, table_def)  # (a history step appends the versions it opens)
        new_files = (write_data_file(storage, ctx.target_dir, data_file_name("part"), table, table_def, None,
                                     in_key_order=True),)
    elif table.num_rows:
        new_files = (write_data_file(storage, ctx.target_dir, data_file_name(bucket), table, table_def, bucket),)
    changes: tuple[ChangeFile, ...] = ()
    target = ctx.changes
    if target is not None:
        if target.kind == KIND_SNAPSHOT:  # the rows as the new file holds them (a delimited variant NULLs some)
            part = write_snapshot(storage, target, table_def, bucket, table_codec(table_def).as_stored(table, table_def))
        else:
            part = write_events(storage, target, table_def, bucket, events or empty_events(table_def))
        changes = (part,) if part else ()
    return FilesWritten(new_files=new_files, replaced=tuple(replaced), counts=counts, changes=changes)


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


UNHELD = "unheld:"  # a reformat task's count of a column's values the new format cannot hold: "unheld:<column>"


def reformat_file_task(ctx: JobContext, unit: RewriteUnit) -> FilesWritten:
    """A stored file written again in the job's records format (`records-destination reformat`): the same rows,
    value for value. A file holding a value the format cannot hold writes nothing and counts them per column
    (UNHELD): the driver refuses the move. With change files on, the version's events are none."""
    storage = open_storage(ctx.storage)
    f = unit.file
    rows = align(read_data_file(storage, file_dir(ctx.read_dir, f), f.name), ctx.table)
    unheld = table_codec(ctx.table).unheld(rows, ctx.table)
    if unheld:
        return FilesWritten(counts={UNHELD + name: count for name, count in unheld.items()})
    return _finish(storage, ctx, rows, ctx.table, f.bucket, [f.name], {"rows": rows.num_rows})


def history_rewrite_task(ctx: JobContext, unit: HistoryRewriteUnit) -> FilesWritten:
    """Convert a stored file to the new definition, then apply a row-local history migration step
    (spark_jobs.history_transforms)."""
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
    """HISTORY_TO_SOFT_DELETE for one file (or bucket): the latest version of every key, deleted = not active (dropped
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
