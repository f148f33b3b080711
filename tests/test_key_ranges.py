"""The per-column key ranges of `_files.json` (destination.on_disk.datafiles.key_range): each key column's
min and max in the form JSON keeps exactly, for every key type that keeps one, composite and history keys, and
none where NaN, infinity, NULL-only or long text leave no exact bound. (Placement routes keys by each file's first
and last key instead: tests/test_placement.py.)"""
from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from destination.model.key_order import keys_from_json
from destination.model.table_model import ColumnDef, TableDef
from destination.model.type_mapping import arrow_type
from destination.on_disk.datafiles import DataFile, key_range
from spark_jobs.tasks.key_ranges import _lies_within


def table_of(columns: list[ColumnDef], rows: list[dict]) -> pa.Table:
    return pa.table({c.name: pa.array([r.get(c.name) for r in rows], arrow_type(c)) for c in columns})


CASES = [
    (ColumnDef("id", "LONG", True), [5, 10, 7], [4, 11], [10]),
    (ColumnDef("id", "INT", True), [-3, 3], [-4, 4], [0]),
    (ColumnDef("code", "STRING", True), ["b", "m", "k"], ["a", "n", "mm"], ["c"]),
    (ColumnDef("amount", "DECIMAL", True, 12, 2), [decimal.Decimal("1.50"), decimal.Decimal("9.99")],
     [decimal.Decimal("1.49"), decimal.Decimal("10.00")], [decimal.Decimal("9.99")]),
    (ColumnDef("day", "NAIVE_DATE", True), [dt.date(2024, 1, 2), dt.date(2024, 3, 1)], [dt.date(2024, 1, 1)],
     [dt.date(2024, 2, 1)]),
    (ColumnDef("at", "UTC_DATETIME", True), [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)],
     [dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)], [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]),
    (ColumnDef("x", "DOUBLE", True), [1.5, 2.5], [0.5, 3.0], [2.0]),
]


def _json_form(value: object) -> object:
    """What `key_range` keeps of a value: days, µs, text for decimals, the value otherwise."""
    if isinstance(value, dt.datetime):
        return round((value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1_000_000)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


@pytest.mark.parametrize("col,stored,outside,inside", CASES, ids=lambda v: v.type if isinstance(v, ColumnDef) else "")
def test_the_range_is_the_files_min_and_max_in_json_form(col, stored, outside, inside) -> None:  # type: ignore[no-untyped-def]
    table = TableDef("t", (col,))
    kr = key_range(table_of([col], [{col.name: v} for v in stored + inside]), table)
    assert kr == {col.name: [_json_form(min(stored + inside)), _json_form(max(stored + inside))]}
    assert key_range(table_of([col], []), table) is None


def test_composite_and_history_keys() -> None:
    a, b = ColumnDef("a", "INT", True), ColumnDef("b", "STRING", True)
    table = TableDef("t", (a, b))
    kr = key_range(table_of([a, b], [{"a": 1, "b": "z"}, {"a": 5, "b": "x"}]), table)
    assert kr == {"a": [1, 5], "b": ["x", "z"]}, "each column's own min and max"
    start = ColumnDef("_fivetran_start", "UTC_DATETIME", True)
    history = TableDef("h", (a, start))
    hr = key_range(table_of([a, start], [{"a": 1, "_fivetran_start": dt.datetime(2024, 1, 1)}]), history)
    assert hr is not None and list(hr) == ["a"], "versions are matched on the entity key, not on their start"


def test_nan_null_and_long_text_keep_no_range() -> None:
    x = ColumnDef("x", "DOUBLE", True)
    table = TableDef("t", (x,))
    assert key_range(table_of([x], [{"x": 1.0}, {"x": float("inf")}]), table) is None
    s = ColumnDef("s", "STRING")  # a keyless table keys on every column, NULLs included
    keyless = TableDef("k", (s,))
    assert key_range(table_of([s], [{"s": None}]), keyless) is None
    assert key_range(table_of([s], [{"s": "m"}, {"s": None}]), keyless) == {"s": ["m", "m"]}
    assert key_range(table_of([s], [{"s": "x" * 300}]), keyless) is None


def test_a_file_lies_within_a_units_range_only_when_its_first_and_last_keys_do() -> None:
    """A merge unit takes a stored file whole when its least and greatest keys lie in the unit's [lo, hi); any other
    file is cut to the unit's range key by key (a file cut between units must not be taken whole by each)."""
    table = TableDef("t", (ColumnDef("id", "LONG", True), ColumnDef("v", "STRING")))

    def bound(key: int | None) -> pa.Table | None:
        return None if key is None else keys_from_json([[key]], table)

    def lies(first: int | None, last: int | None, lo: int | None, hi: int | None) -> bool:
        f = DataFile(name="f.parquet", rows=2, bytes=1, bucket=None,
                     first_key=None if first is None else [first], last_key=None if last is None else [last])
        return _lies_within(f, bound(lo), bound(hi), table)

    assert lies(10, 20, 10, 21) and lies(10, 20, None, 21) and lies(10, 20, 5, None)
    assert not lies(10, 20, 10, 20)  # hi is exclusive: key 20 belongs to the next unit
    assert not lies(10, 20, 11, None) and not lies(10, 20, 15, 30)  # straddling either bound
    assert not lies(None, None, 0, 100)  # a file without its ends recorded: tested key by key
