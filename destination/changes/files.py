"""Writing the data files of a change directory; runs inside Spark tasks (and on the driver for empty ones).

Phase 1 (the merge or truncate task): the task's events become either a final Parquet change
file, or, for the Arcion formats, a staged Arrow file under `_staging/` with the task's counts.
Phase 2 (one task per staged file, after the driver has summed the counts): the staged events
are formatted with their running operation totals (`operationcount`) and their `cursor`, the
final file is written and the staged one removed. Snapshot files (whole-table rewrites) carry
no totals, so they are written final at once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from destination.changes import arcion, cdf
from destination.changes.change_settings import ARCION_CSV, PARQUET, ChangeSettings
from destination.changes.events import EVENT_DELETE, EVENT_INSERT, EVENT_UPDATE, ChangeEvents, data_columns, data_schema
from destination.changes.metadata import EXTENSIONS, KIND_ROWS, ChangeFile
from destination.model.table_model import SYNCED, TableDef
from destination.on_disk.datafiles import write_options
from destination.on_disk.layout import data_file_name
from destination.storage.base import Storage

STAGING = "_staging"


@dataclass(frozen=True, kw_only=True)
class ChangeTarget:
    """Where and how a version's change files are written (Spark tasks receive it with their job's context)."""

    settings: ChangeSettings
    directory: str  # changes/v<N> below the root
    version: int
    timestamp_us: int  # the version's commit timestamp
    schema: str  # the Fivetran schema name (Arcion JSON tableName)
    kind: str  # metadata.KIND_ROWS or metadata.KIND_SNAPSHOT


def _write_parquet(storage: Storage, path: str, table: pa.Table) -> int:
    with storage.open_output(path) as sink:
        pq.write_table(table, sink, **write_options(table))
        return sink.tell()


def _final_name(target: ChangeTarget, bucket: int | None) -> str:
    return data_file_name(bucket, EXTENSIONS[target.settings.format])


def write_events(storage: Storage, target: ChangeTarget, table_def: TableDef, bucket: int | None,
                 events: ChangeEvents) -> ChangeFile | None:
    """Phase 1: the task's events as a final Parquet file, or staged for Arcion formatting."""
    if not events.count:
        return None
    counts = events.counts()
    if target.settings.is_arcion:
        name = f"{STAGING}/{data_file_name(bucket, 'arrow')}"
        storage.write_bytes(f"{target.directory}/{name}", events.to_ipc())
        return ChangeFile(name=name, bucket=bucket, staged=True, rows=events.count, counts=counts)
    name = _final_name(target, bucket)
    rows = cdf.change_rows(events, target.version, target.timestamp_us)
    size = _write_parquet(storage, f"{target.directory}/{name}", rows)
    return ChangeFile(name=name, bucket=bucket, staged=False, rows=rows.num_rows, bytes=size, counts=counts)


def _millis(values: pa.Array) -> pa.Array:
    micros = values.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    ms = np.floor_divide(pc.fill_null(micros, 0).to_numpy(), 1000)
    return pc.if_else(pc.is_valid(micros), pa.array(ms).cast(pa.string()), "null")


def cursors(events: ChangeEvents, target: ChangeTarget, file_name: str) -> pa.Array:
    """Arcion cursor JSON per event: `timestamp` is the row's `_fivetran_synced` (ms), `extractionTimestamp`
    the commit time (ms); our `version`, `file` and `row` let consumers de-duplicate a replay."""
    n = events.count
    if SYNCED in events.after.column_names:
        synced = _millis(pc.coalesce(events.after.column(SYNCED), events.before.column(SYNCED)).combine_chunks())
    else:
        synced = pa.array(["null"] * n, pa.string())
    head = '{"extractorId":0,"timestamp":'
    tail = (f',"extractionTimestamp":{target.timestamp_us // 1000},"v":2,"version":{target.version},'
            f'"file":{json.dumps(file_name)},"row":')
    rows = pa.array(np.arange(n, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(head, synced, tail, rows, "}", "")


def operation_counts(op: pa.Array, before: dict[str, int]) -> pa.Array:
    """Arcion `operationcount` per event: the table's running totals, this event included."""
    ops = op.to_numpy(zero_copy_only=False)
    parts: list[Any] = []
    for label, code, key in (("insertCount", EVENT_INSERT, "insert"), ("updateCount", EVENT_UPDATE, "update"),
                             ("deleteCount", EVENT_DELETE, "delete")):
        running = before.get(key, 0) + np.cumsum(ops == code)
        parts += [f'"{label}":' if not parts else f',"{label}":', pa.array(running).cast(pa.string())]
    return pc.binary_join_element_wise("{", *parts, ',"replaceCount":0}', "")


def format_staged(storage: Storage, target: ChangeTarget, table_def: TableDef, part: ChangeFile,
                  totals_before: dict[str, int]) -> ChangeFile:
    """Phase 2: one staged file formatted as Arcion realtime rows, with totals continuing `totals_before`."""
    settings = target.settings
    staged = f"{target.directory}/{part.name}"
    events = ChangeEvents.from_ipc(storage.read_bytes(staged))
    name = _final_name(target, part.bucket)
    rows = arcion.realtime_rows(events, table_def.key_columns, settings.image == "minimal",
                                cursors(events, target, name), operation_counts(events.op, totals_before))
    columns = list(table_def.columns)
    if settings.format == ARCION_CSV:
        data = arcion.realtime_csv(rows, columns, settings.null_token, settings.include_header)
    else:
        data = arcion.realtime_json(rows, columns, target.schema, table_def.name)
    storage.write_bytes(f"{target.directory}/{name}", data)
    storage.delete(staged)
    return ChangeFile(name=name, bucket=part.bucket, staged=False, rows=events.count, bytes=len(data),
                      counts=part.counts)


def write_snapshot(storage: Storage, target: ChangeTarget, table_def: TableDef, bucket: int | None,
                   rows: pa.Table) -> ChangeFile | None:
    """A snapshot file of `rows` (stored rows of the new version); None for no rows."""
    if not rows.num_rows:
        return None
    settings = target.settings
    name = _final_name(target, bucket)
    path = f"{target.directory}/{name}"
    data_rows = data_columns(rows, table_def)
    if settings.format == PARQUET:
        size = _write_parquet(storage, path, cdf.snapshot_rows(data_rows, target.version, target.timestamp_us))
    else:
        columns = list(table_def.columns)
        if settings.format == ARCION_CSV:
            data = arcion.snapshot_csv(data_rows, columns, settings.null_token, settings.include_header)
        else:
            data = arcion.snapshot_json(data_rows, columns)
        storage.write_bytes(path, data)
        size = len(data)
    return ChangeFile(name=name, bucket=bucket, staged=False, rows=rows.num_rows, bytes=size,
                      counts={"snapshot": rows.num_rows})


def write_empty(storage: Storage, target: ChangeTarget, table_def: TableDef) -> ChangeFile:
    """The one zero-row file of a version without changes (a records directory needs a data file)."""
    settings = target.settings
    name = _final_name(target, None)
    path = f"{target.directory}/{name}"
    if settings.format == PARQUET:
        size = _write_parquet(storage, path, cdf.snapshot_rows(data_schema(table_def).empty_table(), target.version,
                                                               target.timestamp_us))
    else:
        header = settings.format == ARCION_CSV and settings.include_header
        columns = list(table_def.columns)
        names = arcion.realtime_header(columns) if target.kind == KIND_ROWS else [c.name for c in columns]
        data = (arcion.csv_text(names) + "\n").encode("utf-8") if header else b""
        storage.write_bytes(path, data)
        size = len(data)
    return ChangeFile(name=name, bucket=None, staged=False, rows=0, bytes=size)
