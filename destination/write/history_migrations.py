"""Migrate, history side: columns added or dropped in history mode, and the sync-mode migrations
(schema-migration-helper-service.md; fivetran-protocol §5 "Migrate", §10.6).

Each commits one new version as one Spark job (row transforms in spark_jobs/history_transforms.py), and
each is safe to retry: a mode migration that finds the table already in the target mode is done; a
column step records history once per operation timestamp; a copy replaces a target left by an earlier try.
The entity key (the key without `_fivetran_start`) is the same in both modes, so rows keep their places.
"""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from destination.model.conversion import convert_column
from destination.model.table_model import ACTIVE, END, START, SYNCED, ColumnDef, TableDef
from destination.model.type_mapping import normalize_column
from destination.on_disk.datafiles import DataFile
from destination.runtime.errors import BadRequest, TableNotFound, UserActionRequired
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.write.table_definitions import TableDefinitions
from spark_jobs.contracts import HistoryRewriteUnit, LatestVersionsUnit, ToHistoryStep, VersionAtStep
from spark_jobs.tasks.per_file import history_rewrite_task, latest_versions_task

HISTORY_COLUMNS = (START, END, ACTIVE)


def _load(store: TableStore, schema: str, table: str) -> TableVersion:
    current = store.load(schema, table)
    if current is None:
        raise TableNotFound(f"table {schema}.{table} does not exist")
    return current


def _history_table(store: TableStore, schema: str, table: str, operation: str) -> TableVersion:
    current = _load(store, schema, table)
    if not current.table.is_history:
        raise UserActionRequired(f"{operation} needs a history-mode table, and {schema}.{table} is not one; "
                                 "migrate it to history mode first")
    return current


def instant_us(text: str, what: str) -> int:
    """An operation timestamp (ISO instant text) as epoch microseconds, by the write path's own parser."""
    typed, failures = convert_column(pa.array([text], pa.string()), ColumnDef(what, "UTC_DATETIME"))
    if failures or typed[0].as_py() is None:
        raise BadRequest(f"{what} {text!r} is not an ISO-8601 instant")
    return int(typed.cast(pa.int64())[0].as_py())


def _file_units(base: TableVersion, step: VersionAtStep | ToHistoryStep) -> list[HistoryRewriteUnit]:
    return [HistoryRewriteUnit(file=f, old_table=base.table, step=step) for f in base.files if f.rows]


def add_column_in_history_mode(store: TableStore, tables: TableDefinitions, schema: str, table: str, column: ColumnDef,
                               default: str | None, timestamp: str) -> str:
    """ADD_COLUMN_IN_HISTORY_MODE: the column is added (even to an empty table) and every active row gets a
    new version carrying the default, starting at the timestamp."""
    current = _history_table(store, schema, table, "add_column_in_history_mode")
    column = normalize_column(column)
    new = current.table
    if new.column(column.name) is None:
        new = new.with_columns([*new.columns, column])
    return _version_at(store, tables, schema, current, new, column.name, default, timestamp, "add_column_in_history_mode")


def drop_column_in_history_mode(store: TableStore, tables: TableDefinitions, schema: str, table: str, name: str,
                                timestamp: str) -> str:
    """DROP_COLUMN_IN_HISTORY_MODE: the column stays; every active row holding a value gets a new version
    without it, starting at the timestamp."""
    current = _history_table(store, schema, table, "drop_column_in_history_mode")
    if current.table.column(name) is None:
        raise BadRequest(f"no column {name!r} in table {schema}.{table}")
    if name in HISTORY_COLUMNS or name == SYNCED or name in current.table.key_columns:
        raise UserActionRequired(f"column {name!r} of {schema}.{table} is a key or system column and cannot be dropped")
    return _version_at(store, tables, schema, current, current.table, name, None, timestamp, "drop_column_in_history_mode")


def _version_at(store: TableStore, tables: TableDefinitions, schema: str, current: TableVersion, new: TableDef, name: str,
                value: str | None, timestamp: str, operation: str) -> str:
    ts_us = instant_us(timestamp, "operation_timestamp")
    step = VersionAtStep(column=name, value=value, ts_us=ts_us, only_with_value=operation == "drop_column_in_history_mode")
    committed = tables.transform(schema, new.name, new, operation, history_rewrite_task,
                                 lambda base: _file_units(base, step))
    return f"{operation} {name!r} at {timestamp}: version {committed.version if committed else current.version}"


def history_definition(plain: TableDef, deleted_column: str) -> TableDef:
    """The plain table's columns without the soft-delete column, plus the history columns (start in the key)."""
    columns = [c for c in plain.columns if c.name != deleted_column and c.name not in HISTORY_COLUMNS]
    columns += [ColumnDef(START, "UTC_DATETIME", True), ColumnDef(END, "UTC_DATETIME"), ColumnDef(ACTIVE, "BOOLEAN")]
    return plain.with_columns(columns)


def _latest_synced(base: TableVersion) -> int | None:
    stamps = [f.max_synced for f in base.files if f.rows and f.max_synced is not None]
    return max(stamps) if stamps else None


def _to_history_units(base: TableVersion, deleted_column: str) -> list[HistoryRewriteUnit]:
    start = _latest_synced(base)
    if start is None and any(f.rows for f in base.files):
        raise UserActionRequired(f"table {base.table.name!r} has rows but no {SYNCED} values; "
                                 "the start of its history cannot be set")
    return _file_units(base, ToHistoryStep(deleted_column=deleted_column, start_us=start))


def soft_delete_to_history(store: TableStore, tables: TableDefinitions, schema: str, table: str, deleted_column: str) -> str:
    """Live rows become active versions starting at the table's latest `_fivetran_synced`; soft-deleted rows
    become inactive versions at the minimum timestamp; the soft-delete column goes."""
    current = _load(store, schema, table)
    if current.table.is_history:
        return f"already in history mode (version {current.version})"
    new = history_definition(current.table, deleted_column)
    committed = tables.transform(schema, table, new, "soft_delete_to_history", history_rewrite_task,
                                 lambda base: _to_history_units(base, deleted_column))
    return f"migrated to history mode: version {committed.version if committed else current.version}"


def copy_table_to_history_mode(store: TableStore, tables: TableDefinitions, schema: str, source: str, target: str,
                               deleted_column: str) -> str:
    """A new history table from a soft-delete (or live) table, as SOFT_DELETE_TO_HISTORY would make it;
    a source without the soft-delete column has only live rows. A target from an earlier try gets a new version
    with the copy (so a copy that fails leaves it as it was)."""
    origin = _load(store, schema, source)
    if origin.table.is_history:
        raise UserActionRequired(f"{schema}.{source} is already a history table; use copy_table")
    new = replace(history_definition(origin.table, deleted_column), name=target)
    committed = tables.transform(schema, target, new, "copy_table_to_history_mode", history_rewrite_task,
                                 lambda base: _to_history_units(base, deleted_column), source=origin)
    return f"copied to {target!r} in history mode as version {committed.version if committed else '?'}"


def soft_delete_definition(history: TableDef, deleted_column: str) -> TableDef:
    columns = [c for c in history.columns if c.name not in HISTORY_COLUMNS]
    if not any(c.name == deleted_column for c in columns):
        columns.append(ColumnDef(deleted_column, "BOOLEAN"))
    return history.with_columns(columns)


def history_to_soft_delete(store: TableStore, tables: TableDefinitions, schema: str, table: str, deleted_column: str,
                           keep_deleted_rows: bool) -> str:
    """The latest version of every key stays, deleted = not active (rows of deleted keys are removed only
    when keep_deleted_rows is false); the history columns go and the key loses `_fivetran_start`."""
    current = _load(store, schema, table)
    if not current.table.is_history:
        return f"already in soft-delete mode (version {current.version})"
    new = soft_delete_definition(current.table, deleted_column)

    def units(base: TableVersion) -> list[LatestVersionsUnit]:
        # every version of a key is in one file (key ranges) or in one bucket's files (key-hash buckets)
        by_unit: dict[int, list[DataFile]] = {}
        for i, f in enumerate(base.files):
            if f.rows:
                by_unit.setdefault(i if base.table.in_key_ranges or f.bucket is None else f.bucket, []).append(f)
        return [LatestVersionsUnit(bucket=b, files=tuple(fs), old_table=base.table, deleted_column=deleted_column,
                                   keep_deleted_rows=keep_deleted_rows) for b, fs in sorted(by_unit.items())]
    committed = tables.transform(schema, table, new, "history_to_soft_delete", latest_versions_task, units)
    return f"migrated to soft-delete mode: version {committed.version if committed else current.version}"
