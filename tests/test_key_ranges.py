"""Per-file key ranges (destination.table_store.datafiles): a file is skipped only when none of a request's keys
can be in it, for every key type that keeps a range, composite keys, history entity keys, NULLs and NaN."""
from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from destination.table_model import ColumnDef, TableDef
from destination.table_store.datafiles import key_range, may_hold, union_range
from destination.type_mapping import arrow_type


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


@pytest.mark.parametrize("col,stored,outside,inside", CASES, ids=lambda v: v.type if isinstance(v, ColumnDef) else "")
def test_a_file_is_skipped_only_when_no_key_can_be_in_it(col, stored, outside, inside) -> None:  # type: ignore[no-untyped-def]
    table = TableDef("t", (col,))
    kr = key_range(table_of([col], [{col.name: v} for v in stored]), table)
    assert kr is not None and col.name in kr
    assert may_hold(table_of([col], [{col.name: v} for v in outside]), kr, table) is False
    assert may_hold(table_of([col], [{col.name: v} for v in outside + inside]), kr, table) is True


def test_composite_and_history_keys() -> None:
    a, b = ColumnDef("a", "INT", True), ColumnDef("b", "STRING", True)
    table = TableDef("t", (a, b))
    kr = key_range(table_of([a, b], [{"a": 1, "b": "x"}, {"a": 5, "b": "z"}]), table)
    # inside the range of a but outside that of b: cannot be in the file
    assert may_hold(table_of([a, b], [{"a": 3, "b": "w"}]), kr, table) is False
    assert may_hold(table_of([a, b], [{"a": 3, "b": "y"}]), kr, table) is True
    start = ColumnDef("_fivetran_start", "UTC_DATETIME", True)
    history = TableDef("h", (a, start))
    hr = key_range(table_of([a, start], [{"a": 1, "_fivetran_start": dt.datetime(2024, 1, 1)}]), history)
    assert hr is not None and list(hr) == ["a"], "versions are matched on the entity key, not on their start"


def test_nulls_nan_and_long_text_keep_the_file_read() -> None:
    x = ColumnDef("x", "DOUBLE", True)
    table = TableDef("t", (x,))
    kr = key_range(table_of([x], [{"x": 1.0}, {"x": float("nan")}]), table)
    assert may_hold(table_of([x], [{"x": float("nan")}]), kr, table) is True
    s = ColumnDef("s", "STRING")  # a keyless table keys on every column, NULLs included
    keyless = TableDef("k", (s,))
    kr = key_range(table_of([s], [{"s": "m"}]), keyless)
    assert may_hold(table_of([s], [{"s": None}]), kr, keyless) is True
    assert key_range(table_of([s], [{"s": "x" * 300}]), keyless) is None
    assert may_hold(table_of([s], [{"s": "a"}]), None, keyless) is True  # files from before ranges existed


def test_ranges_of_row_groups_combine() -> None:
    col = ColumnDef("amount", "DECIMAL", True, 12, 2)
    table = TableDef("t", (col,))
    first = key_range(table_of([col], [{"amount": decimal.Decimal("10.00")}]), table)
    second = key_range(table_of([col], [{"amount": decimal.Decimal("9.50")}, {"amount": decimal.Decimal("100.25")}]), table)
    assert union_range(first, second, table) == {"amount": ["9.50", "100.25"]}
    assert union_range(first, None, table) is None
