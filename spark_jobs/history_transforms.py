"""Row transforms of the history-mode migrations (schema-migration-helper-service.md), pure Arrow.

Each runs inside a Spark task on rows already converted to the new table definition
(spark_jobs.alter.convert_table). All versions of a key share a file (a bucket in older tables), so the
one transform that needs them together (`latest_versions`) runs per file; the others
are row-local and run per file.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model import row_meta
from destination.model.conversion import Failure
from destination.model.keys import key_tokens, run_starts
from destination.model.table_model import ACTIVE, DESTINATION_META, END, START, TableDef
from spark_jobs.history import ONE_MS_US, TMAX_US, micros, restamp, set_column, timestamps
from spark_jobs.merge import key_columns

MIN_US = -62135596800000000  # 0001-01-01T00:00:00Z: start and end of a row that was already deleted


def version_at(table: pa.Table, column: str, value: pa.Array, failure: Failure | None, ts_us: int, version: int,
               only_with_value: bool) -> tuple[pa.Table, int]:
    """ADD_COLUMN_IN_HISTORY_MODE (value = the default) and DROP_COLUMN_IN_HISTORY_MODE (value = NULL,
    only_with_value): an active version that started before the operation (and, for a drop, holds a value)
    is closed at ts - 1 ms and continued by a copy starting at ts; every version starting at or after ts
    gets the value, so a retry, or a second operation with the same timestamp, records history only once.
    Returns the rows and how many versions were opened."""
    starts = micros(table.column(START))
    active = pc.fill_null(table.column(ACTIVE), False).to_numpy(zero_copy_only=False)
    opens = active & (starts < ts_us)
    if only_with_value:
        opens &= pc.is_valid(table.column(column)).to_numpy(zero_copy_only=False)
    copies = table.filter(pa.array(opens))
    copies = set_column(copies, START, timestamps(np.full(copies.num_rows, ts_us, dtype=np.int64)))
    copies = set_column(copies, END, timestamps(np.full(copies.num_rows, TMAX_US, dtype=np.int64)))
    copies = set_column(copies, ACTIVE, pa.array(np.ones(copies.num_rows, dtype=bool)))
    closed = set_column(table, END, timestamps(np.where(opens, ts_us - ONE_MS_US, micros(table.column(END)))))
    closed = set_column(closed, ACTIVE, pc.if_else(pa.array(opens), False, closed.column(ACTIVE)))
    closed = restamp(closed, opens, version)
    out = pa.concat_tables([closed, copies])
    at_or_after = micros(out.column(START)) >= ts_us
    out = set_column(out, column, pc.if_else(pa.array(at_or_after), value.take(np.zeros(out.num_rows, dtype=np.int64)),
                                       out.column(column)))
    out = restamp(out, at_or_after, version)
    if failure is not None:
        out = _with_change(out, at_or_after, failure)
    return out, int(opens.sum())


def _with_change(table: pa.Table, mask: np.ndarray, failure: Failure) -> pa.Table:
    """Record a value that did not convert (stored as NULL) in `_destination_meta` of the masked rows (once per
    field: a retry records it again in place)."""
    meta = table.column(DESTINATION_META).combine_chunks()
    changes = {int(i): [failure] for i in np.flatnonzero(mask)}
    return set_column(table, DESTINATION_META, row_meta.add_changes(meta, changes, version=None, replace_field=True))


def to_history(table: pa.Table, deleted: np.ndarray, start_us: int) -> pa.Table:
    """SOFT_DELETE_TO_HISTORY on rows converted to the history definition: a live row becomes the active
    version starting at `start_us` (the table's latest `_fivetran_synced`); a soft-deleted row becomes an
    inactive version that starts and ends at the minimum timestamp."""
    n = table.num_rows
    table = set_column(table, START, timestamps(np.where(deleted, MIN_US, start_us).astype(np.int64)))
    table = set_column(table, END, timestamps(np.where(deleted, MIN_US, TMAX_US).astype(np.int64)))
    return set_column(table, ACTIVE, pa.array(~deleted if n else np.zeros(0, dtype=bool)))


def latest_versions(table: pa.Table, history_def: TableDef) -> tuple[pa.Table, np.ndarray]:
    """HISTORY_TO_SOFT_DELETE, per file (or bucket): the latest version (greatest start) of every key, and whether it was
    deleted (not active). Every other version is dropped."""
    if table.num_rows == 0:
        return table, np.zeros(0, dtype=bool)
    keys = key_tokens(table, key_columns(history_def))
    order = pc.sort_indices(pa.table({"k": keys, "s": table.column(START)}),
                            sort_keys=[("k", "ascending"), ("s", "descending")]).to_numpy()
    latest = table.take(pa.array(order[run_starts(pc.take(keys, pa.array(order)))]))
    deleted = ~pc.fill_null(latest.column(ACTIVE), False).to_numpy(zero_copy_only=False)
    return latest, deleted
