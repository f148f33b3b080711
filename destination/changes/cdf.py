"""The Parquet change table, in the style of Delta Lake's change data feed (output-formats.md §4).

Rows: the table's columns, then `_change_type`, `_commit_version`, `_commit_timestamp`.
An insert is one `insert` row (the new row), a delete one `delete` row (the old row), an
update two adjacent rows, `update_preimage` then `update_postimage`. A version that rewrote
the whole table holds every row as `snapshot`: it replaces all earlier rows.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from destination.changes.events import EVENT_INSERT, EVENT_SNAPSHOT, EVENT_UPDATE, ChangeEvents
from destination.model.table_model import ColumnDef

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
# the values of `_change_type`
CHANGE_TYPE_INSERT, CHANGE_TYPE_DELETE, CHANGE_TYPE_SNAPSHOT = "insert", "delete", "snapshot"
CHANGE_TYPE_PREIMAGE, CHANGE_TYPE_POSTIMAGE = "update_preimage", "update_postimage"
CHANGE_COLUMNS = (ColumnDef(CHANGE_TYPE, "STRING"), ColumnDef(COMMIT_VERSION, "LONG"),
                  ColumnDef(COMMIT_TIMESTAMP, "UTC_DATETIME"))


def _with_commit(rows: pa.Table, change_type: pa.Array, version: int, timestamp_us: int) -> pa.Table:
    n = rows.num_rows
    return (rows.append_column(CHANGE_TYPE, change_type)
            .append_column(COMMIT_VERSION, pa.array(np.full(n, version, dtype=np.int64)))
            .append_column(COMMIT_TIMESTAMP,
                           pa.array(np.full(n, timestamp_us, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))))


def change_rows(events: ChangeEvents, version: int, timestamp_us: int) -> pa.Table:
    """One row per image: inserts, deletes (and snapshot rows read back) one, updates two (preimage, then postimage)."""
    n = events.count
    op = events.op.to_numpy(zero_copy_only=False)
    is_update, is_insert = op == EVENT_UPDATE, op == EVENT_INSERT
    width = 1 + is_update.astype(np.int64)
    starts = np.cumsum(width) - width
    index = np.empty(int(width.sum()), dtype=np.int64)
    kind = np.empty(len(index), dtype=object)
    event = np.arange(n, dtype=np.int64)
    is_snapshot = op == EVENT_SNAPSHOT
    only_after = is_insert | is_snapshot
    index[starts] = np.where(only_after, n + event, event)  # rows 0..n-1 are before images, n..2n-1 after images
    kind[starts] = np.select([is_insert, is_snapshot, is_update],
                             [CHANGE_TYPE_INSERT, CHANGE_TYPE_SNAPSHOT, CHANGE_TYPE_PREIMAGE], CHANGE_TYPE_DELETE)
    index[starts[is_update] + 1] = n + event[is_update]
    kind[starts[is_update] + 1] = CHANGE_TYPE_POSTIMAGE
    images = pa.concat_tables([events.before, events.after]).take(pa.array(index))
    return _with_commit(images, pa.array(kind, pa.string()), version, timestamp_us)


def snapshot_rows(rows: pa.Table, version: int, timestamp_us: int) -> pa.Table:
    return _with_commit(rows, pa.array([CHANGE_TYPE_SNAPSHOT] * rows.num_rows, pa.string()), version, timestamp_us)
