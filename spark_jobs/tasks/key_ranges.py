"""The write's tasks over key ranges (destination.on_disk.placement): stage 1 sorts a batch file's operations into a
staged run; a unit task merges one key range's operations with the stored files they can touch.

A unit rewrites a stored file only when it must: an operation that may insert inside the file's key range, or one
whose key the file holds (its key columns are read to know). Keys outside every file's range are new rows: they
go to new files, placed in the gaps between the files left as they are, so files never overlap.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from destination.changes.events import pair_changes
from destination.changes.files import write_events
from destination.changes.metadata import ChangeFile
from destination.model.key_order import (
    KeyJson,
    count_bounds_below,
    key_columns_of,
    keys_from_json,
    keys_to_json,
    sort_keys,
    sorted_rows,
    sorted_span,
    within,
)
from destination.model.keys import bisected, matched_keys
from destination.model.table_model import PARQUET, TableDef
from destination.on_disk.datafiles import DataFile, align, read_data_file, write_sorted_files
from destination.on_disk.locations import file_dir
from destination.on_disk.placement import TIER_FAN_IN, sorted_unique
from destination.records_formats.codec import format_of_name, table_codec
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from spark_jobs.contracts import DecodedCounts, FilesWritten, JobContext, RangeUnit, RunSource, SortedRun, data_rows
from spark_jobs.history import merge_history_rows
from spark_jobs.merge import merge_rows
from spark_jobs.operations import KEY, OP, OP_REPLACE, SEQ, file_operations, from_ipc, replace_operations

RUN_BATCH_ROWS = 16_384  # rows per record batch of a staged run: the granularity units read runs at


def _scratch(ctx: JobContext) -> Storage:
    return open_storage(ctx.scratch or ctx.storage)


def sort_run_task(ctx: JobContext, unit: RunSource) -> SortedRun:
    """Stage 1: one batch file's operations (or a stored file's rows) in key order, staged as an IPC file."""
    started = time.perf_counter()
    table_def = ctx.table
    compression = ctx.run_compression
    if unit.stored is not None:
        stored = read_data_file(open_storage(ctx.storage), file_dir(ctx.read_dir, unit.stored), unit.stored.name,
                                size=unit.stored.bytes)
        return _stage(_scratch(ctx), unit.run_path, sorted_rows(align(stored, table_def), table_def), table_def,
                      compression)
    assert unit.ref is not None and unit.fmt is not None
    ops = file_operations(table_def, unit.ref, unit.fmt)
    rows = sorted_rows(pa.concat_tables(ops.parts), table_def, extra=(SEQ,)) if ops.parts else None
    run = _stage(_scratch(ctx), unit.run_path, rows, table_def, compression)
    return replace(run, counts=DecodedCounts(rows=ops.rows, failures_by_column=ops.failures_by_column,
                                             seconds=time.perf_counter() - started,
                                             data_rows=data_rows(unit.ref.kind, ops.rows)))


def _stage(storage: Storage, path: str, rows: pa.Table | None, table_def: TableDef,
           compression: str | None) -> SortedRun:
    if rows is None or not rows.num_rows:
        return SortedRun(run_path=path, rows=0, bytes=0, batch_rows=(), batch_first=(), batch_last=())
    n = rows.num_rows
    starts = list(range(0, n, RUN_BATCH_ROWS))
    options = ipc.IpcWriteOptions(compression=compression)
    with storage.open_output(path, durable=False) as sink:  # scratch: a crash ends the request
        with ipc.new_file(sink, rows.schema, options=options) as writer:
            for s in starts:
                writer.write_batch(rows.slice(s, RUN_BATCH_ROWS).combine_chunks().to_batches()[0])
        size = sink.tell()
    keys = key_columns_of(rows, table_def)
    firsts = keys_to_json(keys.take(starts), table_def)
    lasts = keys_to_json(keys.take([min(s + RUN_BATCH_ROWS, n) - 1 for s in starts]), table_def)
    return SortedRun(run_path=path, rows=n, bytes=size,
                     batch_rows=tuple(min(RUN_BATCH_ROWS, n - s) for s in starts),
                     batch_first=tuple(firsts), batch_last=tuple(lasts))


def _bound(key: list[object] | None, table_def: TableDef) -> pa.Table | None:
    return None if key is None else keys_from_json([key], table_def)


def _unit_input(ctx: JobContext, unit: RangeUnit) -> pa.Table | None:
    """The unit's operations (or rows): its chunks, and its slices of sorted runs filtered to [lo, hi)."""
    parts = [from_ipc(c) for c in unit.chunks]
    if unit.runs:
        storage = _scratch(ctx)
        lo, hi = _bound(unit.lo, ctx.table), _bound(unit.hi, ctx.table)
        for piece in unit.runs:  # consecutive batches of one sorted run: the range is one span of them
            with storage.open_input(piece.run_path) as source:
                reader = ipc.open_file(source)
                rows = pa.Table.from_batches([reader.get_batch(i) for i in piece.batches])
            start, stop = sorted_span(key_columns_of(rows, ctx.table), lo, hi)
            parts.append(rows.slice(start, stop - start))
    parts = [p for p in parts if p.num_rows]
    # left in chunks: the merge takes its rows once, in key order, at the end
    return pa.concat_tables(parts) if parts else None


def _must_rewrite(ctx: JobContext, storage: Storage, f: DataFile, ops: pa.Table, op_keys: pa.Table,
                  decoded: dict[str, pa.Table]) -> bool:
    """Whether an operation can change file `f`: one inside its range that may insert there, or one whose key
    the file holds (only then are its key columns read: a Parquet file's alone; an Avro or delimited file is
    decoded whole to read any column, so a file to rewrite is kept in `decoded` for the merge, not read twice)."""
    table_def = ctx.table
    inside = within(op_keys, _bound(f.first_key, table_def), _bound(f.last_key, table_def), hi_inclusive=True)
    if not inside.any():
        return False
    if pc.any(pc.equal(pc.filter(ops.column(OP), pa.array(inside)), OP_REPLACE)).as_py():
        return True  # an insert or a replace inside the range: the file is rewritten in either case
    key_names = [c.name for c in table_def.entity_key]
    where = file_dir(ctx.read_dir, f)
    whole = None if format_of_name(f.name) == PARQUET else read_data_file(storage, where, f.name, size=f.bytes)
    stored_keys = whole.select(key_names) if whole is not None else \
        read_data_file(storage, where, f.name, key_names, f.bytes)
    mask = pa.array(inside)
    stored_matching, wanted = matched_keys(stored_keys, op_keys.filter(mask), pc.filter(ops.column(KEY), mask),
                                           table_def.entity_key)
    found = bisected(stored_matching, wanted)
    held = bool(found[1].any()) if found is not None else bool(pc.any(pc.is_in(stored_matching, value_set=wanted)).as_py())
    if held and whole is not None:
        decoded[f.name] = whole
    return held


def _read_part(ctx: JobContext, storage: Storage, f: DataFile, unit: RangeUnit,
               decoded: dict[str, pa.Table]) -> pa.Table:
    """A stored file's rows within the unit's range (all of them when the file lies inside it)."""
    stored = decoded.pop(f.name, None)
    if stored is None:
        stored = read_data_file(storage, file_dir(ctx.read_dir, f), f.name, size=f.bytes)
    rows = align(stored, ctx.table)
    lo, hi = _bound(unit.lo, ctx.table), _bound(unit.hi, ctx.table)
    if (lo is None and hi is None) or _lies_within(f, lo, hi, ctx.table):
        return rows
    inside = within(key_columns_of(rows, ctx.table), lo, hi)
    return rows if inside.all() else rows.filter(pa.array(inside))


def _lies_within(f: DataFile, lo: pa.Table | None, hi: pa.Table | None, table_def: TableDef) -> bool:
    """Whether every key of `f` is in [lo, hi), known from its first and last keys (its least and greatest) without
    reading its rows: testing each row's key sorts them all with the bound (a tenth of a uniform change's tasks)."""
    if f.first_key is None or f.last_key is None:
        return False
    return bool(within(keys_from_json([f.first_key, f.last_key], table_def), lo, hi).all())


def merge_range_task(ctx: JobContext, unit: RangeUnit) -> FilesWritten:
    """One unit of a write: its operations merged with the stored files they can change; new rows, and the
    rewritten files' rows, written in key order as files of about the target size."""
    started = time.perf_counter()
    storage = open_storage(ctx.storage)
    table_def = ctx.table
    incoming = _unit_input(ctx, unit)
    if unit.rows_only:  # a relayout: the rows are the table's, in their new places
        written = _write(ctx, storage, incoming if incoming is not None else align(pa.table({}), table_def), [])
        return FilesWritten(new_files=tuple(written), counts={"rows": incoming.num_rows if incoming else 0},
                            seconds=time.perf_counter() - started)
    if incoming is None and not unit.compact:
        return FilesWritten(counts={"units": 1}, seconds=time.perf_counter() - started)
    ops = incoming if incoming is not None else _no_operations(ctx)
    op_keys = key_columns_of(ops, table_def)
    decoded: dict[str, pa.Table] = {}  # files decoded whole to find their keys, for the merge
    rewrite = [f for f in unit.files if unit.compact or _must_rewrite(ctx, storage, f, ops, op_keys, decoded)]
    kept = [f for f in unit.files if f not in rewrite]
    parts = [_read_part(ctx, storage, f, unit, decoded) for f in rewrite]
    stored = pa.concat_tables(parts) if parts else align(pa.table({}), table_def)
    merge = merge_history_rows if table_def.is_history else merge_rows
    result = merge(stored, ops, table_def, ctx.version, track_changes=ctx.tracks_row_changes)
    counts = result.counts.as_dict()
    changes: tuple[ChangeFile, ...] = ()
    target = ctx.changes
    if target is not None and ctx.tracks_row_changes and result.before is not None and result.after is not None:
        # the rows written as the table's files hold them (a delimited variant NULLs what it cannot hold): the events
        # say what a reader of the table reads, and a row sent again as stored is no change
        after = table_codec(table_def).as_stored(result.after, table_def)
        paired = pair_changes(result.before, after, table_def, target.settings.emit_noop_updates)
        counts["noop_updates"] = paired.noop_updates
        part = write_events(storage, target, table_def, unit.tag, paired.events)
        changes = (part,) if part else ()
    written = _write(ctx, storage, result.table, kept, None if unit.compact else (op_keys, rewrite))
    counts["files_rewritten"] = len(rewrite)
    counts["units"] = 1  # summed over the job: its tasks
    return FilesWritten(new_files=tuple(written), replaced=tuple(f.name for f in rewrite), counts=counts,
                        changes=changes, seconds=time.perf_counter() - started)


def _no_operations(ctx: JobContext) -> pa.Table:
    """An empty operations table (a compaction unit the request does not touch)."""
    return replace_operations(align(pa.table({}), ctx.table), ctx.table)


def _head_end(ctx: JobContext, rows: pa.Table, op_keys: pa.Table, rewrite: list[DataFile]) -> KeyJson | None:
    """For `rows` in key order: the first key the request reaches in the rewritten files, when the rows before it
    (rows no operation touched, rewritten only because their file was) are at least as many as the rows from it on
    and those make a small file (level 1 or more: under a TIER_FAN_IN-th of the target). The head is then written as a file of its
    own, so the next syncs of recent keys rewrite only the small file after it, not the large one the rows were in
    (the tail of a table loaded at once, of a file compacted earlier); a file is split this way at most once per
    sync, and only where the split leaves a small file, so uniform changes and appends write as before. Units that
    compact small files are not split (their rows are rewritten to be merged)."""
    if not rewrite or not op_keys.num_rows or rows.num_rows < 2:
        return None
    table_def = ctx.table
    first = op_keys.take(pc.sort_indices(op_keys, sort_keys=sort_keys(table_def, with_start=False))[:1])
    _start, head = sorted_span(key_columns_of(rows, table_def), None, first)  # by bisection: rows are in key order
    tail = rows.num_rows - head
    stored_rows, stored_bytes = sum(f.rows for f in rewrite), sum(f.bytes for f in rewrite)
    tail_bytes = tail * stored_bytes / stored_rows if stored_rows else 0.0
    if head < tail or not tail or tail_bytes >= ctx.target_file_bytes / TIER_FAN_IN:
        return None
    return keys_to_json(first, table_def)[0]


def _write(ctx: JobContext, storage: Storage, rows: pa.Table, kept: Iterable[DataFile],
           touched: tuple[pa.Table, list[DataFile]] | None = None) -> list[DataFile]:
    """`rows` in key order as target-size files, cut where a file left as it is lies between them (files never
    overlap) and, given the request's keys and the files it rewrote (`touched`), where its untouched head ends
    (`_head_end`)."""
    if not rows.num_rows:
        return []
    table_def = ctx.table
    rows = sorted_rows(rows, table_def)
    firsts = [f.first_key for f in kept if f.first_key is not None]
    head_end = _head_end(ctx, rows, *touched) if touched is not None else None
    if head_end is not None:
        firsts = sorted_unique([*firsts, head_end], table_def)
    pieces = [rows]
    if firsts:
        between = count_bounds_below(key_columns_of(rows, table_def), keys_from_json(firsts, table_def))
        changes = np.flatnonzero(np.diff(between)) + 1
        edges = [0, *changes.tolist(), rows.num_rows]
        pieces = [rows.slice(a, b - a) for a, b in itertools.pairwise(edges)]
    out: list[DataFile] = []
    for piece in pieces:
        out += write_sorted_files(storage, ctx.target_dir, piece, table_def, ctx.target_file_bytes)
    return out
