"""The pure per-bucket history merge (spark_jobs.history) on inputs the tester never sends but Fivetran or a
retry might: a version whose start already exists, versions without end/active, inconsistent end/active
values, a delete without an end, microsecond starts."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pyarrow as pa

from destination.model.keys import key_tokens
from destination.model.table_model import ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from spark_jobs.history import TMAX_US, merge_history_rows
from spark_jobs.merge import key_columns
from spark_jobs.operations import CHANGES, KEY, OP, OP_DELETE, OP_EARLIEST, OP_REPLACE, OP_UPDATE, SEQ, UNMOD

UTC = dt.UTC
TMAX = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=TMAX_US)
TABLE = TableDef("users", (
    ColumnDef("id", "INT", True), ColumnDef("name", "STRING"), ColumnDef("_fivetran_synced", "UTC_DATETIME"),
    ColumnDef("_fivetran_start", "UTC_DATETIME", True), ColumnDef("_fivetran_end", "UTC_DATETIME"),
    ColumnDef("_fivetran_active", "BOOLEAN")))


def at(second: int, micros: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=second, microseconds=micros)


def version(id_: int, name: str, start: dt.datetime, end: dt.datetime | None = TMAX, active: bool | None = True,
            synced: dt.datetime | None = None) -> dict[str, Any]:
    return {"id": id_, "name": name, "_fivetran_synced": synced or start, "_fivetran_start": start,
            "_fivetran_end": end, "_fivetran_active": active}


def stored(*rows: dict[str, Any]) -> pa.Table:
    meta = [json.dumps({"version": 1, "changes": []})] * len(rows)
    return pa.Table.from_pylist([{**r, "_destination_meta": m} for r, m in zip(rows, meta, strict=True)],
                                schema=arrow_schema(TABLE.columns))


def ops(*rows: tuple[int, dict[str, Any], set[str]]) -> pa.Table:
    """(OP, values, unmodified column names) per row, in request order."""
    schema = arrow_schema(TABLE.columns, with_meta=False)
    table = pa.Table.from_pylist([r[1] for r in rows], schema=schema)
    table = table.append_column(OP, pa.array([r[0] for r in rows], pa.int8()))
    table = table.append_column(SEQ, pa.array(np.arange(len(rows)), pa.int64()))
    table = table.append_column(CHANGES, pa.nulls(len(rows), pa.string()))
    for c in TABLE.columns:
        table = table.append_column(UNMOD + c.name, pa.array([c.name in r[2] for r in rows]))
    table = table.append_column(KEY, key_tokens(table, key_columns(TABLE)))
    return table


def merged(before: pa.Table, request: pa.Table) -> list[tuple[Any, ...]]:
    result = merge_history_rows(before, request, TABLE, version=2)
    return sorted((r["id"], r["name"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"])
                  for r in result.table.to_pylist())


def test_a_version_with_an_existing_start_replaces_it() -> None:
    base = stored(version(1, "a", at(10)))
    result = merge_history_rows(base, ops((OP_REPLACE, version(1, "b", at(10)), set())), TABLE, 2, track_changes=True)
    assert [(r["name"], r["_fivetran_start"]) for r in result.table.to_pylist()] == [("b", at(10))]
    assert (result.counts.inserted, result.counts.updated) == (0, 1)
    assert result.before is not None and result.before.column("name").to_pylist() == ["a"]
    assert result.after is not None and result.after.column("name").to_pylist() == ["b"]
    assert json.loads(result.table.column("_destination_meta")[0].as_py())["version"] == 2


def test_versions_without_end_or_active_are_open_and_get_chained() -> None:
    base = stored(version(1, "a", at(10)))
    request = ops((OP_REPLACE, version(1, "b", at(20), end=None, active=None), set()),
                  (OP_REPLACE, version(1, "c", at(30), end=None, active=None), set()))
    assert merged(base, request) == [
        (1, "a", at(10), at(20) - dt.timedelta(milliseconds=1), False),
        (1, "b", at(20), at(30) - dt.timedelta(milliseconds=1), False),
        (1, "c", at(30), TMAX, True),
    ]


def test_inconsistent_end_and_active_values_are_chained() -> None:
    """Two 'active' versions in one request and an end past the next start: one active version remains."""
    request = ops((OP_REPLACE, version(1, "a", at(10), end=TMAX, active=True), set()),
                  (OP_REPLACE, version(1, "b", at(20), end=TMAX, active=True), set()))
    rows = merged(stored(), request)
    assert [r[4] for r in rows] == [False, True]
    assert rows[0][3] == at(20) - dt.timedelta(milliseconds=1)


def test_microsecond_starts_keep_their_precision() -> None:
    base = stored(version(1, "a", at(10, 5)))
    request = ops((OP_EARLIEST, {"id": 1, "_fivetran_start": at(20, 7)}, set()),
                  (OP_UPDATE, version(1, "b", at(20, 7)), {"name"}))
    assert merged(base, request) == [
        (1, "a", at(10, 5), at(20, 7) - dt.timedelta(milliseconds=1), False),
        (1, "a", at(20, 7), TMAX, True),  # the unmodified name comes from the version before
    ]


def test_delete_without_end_uses_its_synced_and_stamps_it() -> None:
    base = stored(version(1, "a", at(10)), version(2, "b", at(10)))
    request = ops((OP_DELETE, {"id": 1, "_fivetran_synced": at(50)}, set()),
                  (OP_DELETE, {"id": 1, "_fivetran_end": at(60), "_fivetran_synced": at(60)}, set()),
                  (OP_DELETE, {"id": 3, "_fivetran_end": at(60), "_fivetran_synced": at(60)}, set()))
    result = merge_history_rows(base, request, TABLE, 2)
    rows = {r["id"]: r for r in result.table.to_pylist()}
    assert (rows[1]["_fivetran_end"], rows[1]["_fivetran_active"], rows[1]["_fivetran_synced"]) == (at(50), False, at(50))
    assert rows[2]["_fivetran_active"] is True
    assert (result.counts.updated, result.counts.ignored) == (1, 1)  # the second delete of id 1 finds nothing active


def test_update_of_a_key_without_versions_inserts_nothing_even_when_repeated() -> None:
    request = ops((OP_UPDATE, version(4, "x", at(10)), {"name"}), (OP_UPDATE, version(4, "y", at(20)), set()))
    result = merge_history_rows(stored(), request, TABLE, 2)
    assert result.table.num_rows == 0
    assert result.counts.ignored == 2


def test_earliest_removes_later_versions_and_reports_both_images() -> None:
    base = stored(version(1, "a", at(10), end=at(20) - dt.timedelta(milliseconds=1), active=False),
                  version(1, "b", at(20)), version(2, "z", at(5)))
    request = ops((OP_EARLIEST, {"id": 1, "_fivetran_start": at(15)}, set()),
                  (OP_REPLACE, version(1, "c", at(15)), set()))
    result = merge_history_rows(base, request, TABLE, 2, track_changes=True)
    assert (result.counts.deleted, result.counts.updated, result.counts.inserted) == (1, 1, 1)
    assert result.before is not None and sorted(result.before.column("name").to_pylist()) == ["a", "b"]
    # written: the new version and the earlier one it closed; the untouched key 2 is on neither side
    assert result.after is not None and sorted(result.after.column("name").to_pylist()) == ["a", "c"]
    assert sorted(r["name"] for r in result.table.to_pylist()) == ["a", "c", "z"]
