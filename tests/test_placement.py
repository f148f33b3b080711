"""Key order and unit planning (destination.model.key_order, destination.on_disk.placement): pure functions, no Spark."""
from __future__ import annotations

import decimal
import math
from datetime import UTC, date, datetime

import numpy as np
import pyarrow as pa
import pytest

from destination.model.key_order import (
    count_bounds_below,
    first_and_last,
    keys_from_json,
    keys_to_json,
    sorted_rows,
    sorted_span,
    within,
)
from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk.datafiles import DataFile
from destination.on_disk.placement import TIER_FAN_IN, KeySample, plan_units

pytestmark = pytest.mark.unit


def _def(*cols: tuple[str, str]) -> TableDef:
    return TableDef("t", tuple(ColumnDef(n, ty, primary_key=True) for n, ty in cols))


@pytest.mark.parametrize(("ty", "values"), [
    ("LONG", [-(2 ** 63), -1, 0, 7, 2 ** 63 - 1]),
    ("STRING", ["", "A", "a", "é", "名", "z" * 300]),
    ("DOUBLE", [-math.inf, -1.5, 0.0, 2.25, math.inf, math.nan]),
    ("DECIMAL", [decimal.Decimal("-12.30"), decimal.Decimal("0.00"), decimal.Decimal("99999.99")]),
    ("UTC_DATETIME", [datetime(1, 1, 1, tzinfo=UTC), datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)]),
    ("NAIVE_DATE", [date(1, 1, 1), date(2024, 2, 29)]),
    ("BINARY", [b"", b"\x00\xff", b"abc"]),
    ("BOOLEAN", [False, True]),
])
def test_keys_round_trip_through_json_exactly(ty: str, values: list[object]) -> None:
    col = ColumnDef("k", ty, primary_key=True, precision=7 if ty == "DECIMAL" else None, scale=2 if ty == "DECIMAL" else None)
    table_def = TableDef("t", (col,))
    from destination.model.type_mapping import arrow_type
    keys = pa.table({"k": pa.array(values, arrow_type(col))})
    back = keys_from_json(keys_to_json(keys, table_def), table_def)
    assert back.schema == keys.schema
    got, want = back.column("k").to_pylist(), keys.column("k").to_pylist()
    assert [("nan" if isinstance(v, float) and math.isnan(v) else v) for v in got] == \
        [("nan" if isinstance(v, float) and math.isnan(v) else v) for v in want]


def test_composite_keys_sort_column_by_column_and_route_to_ranges() -> None:
    table_def = _def(("a", "STRING"), ("b", "INT"))
    rows = pa.table({"a": ["y", "x", "y", "x"], "b": pa.array([1, 10, -5, 2], pa.int32())})
    ordered = sorted_rows(rows, table_def)
    assert list(zip(ordered.column("a").to_pylist(), ordered.column("b").to_pylist(), strict=True)) == \
        [("x", 2), ("x", 10), ("y", -5), ("y", 1)]
    assert first_and_last(rows, table_def) == (["x", 2], ["y", 1])
    bounds = keys_from_json([["x", 10], ["y", 0]], table_def)
    keys = pa.table({"a": ["x", "x", "x", "y", "z"], "b": pa.array([9, 10, 11, -1, 0], pa.int32())})
    assert count_bounds_below(keys, bounds).tolist() == [0, 1, 1, 1, 2]  # a bound belongs to the range it starts
    assert count_bounds_below(keys, bounds, inclusive=False).tolist() == [0, 0, 1, 1, 2]
    lo, hi = keys_from_json([["x", 10]], table_def), keys_from_json([["y", -1]], table_def)
    assert within(keys, lo, hi).tolist() == [False, True, True, False, False]
    assert within(keys, lo, hi, hi_inclusive=True).tolist() == [False, True, True, True, False]


def test_a_sorted_runs_span_of_a_range_is_the_rows_within_it() -> None:
    """sorted_span bisects keys in key order; it must pick exactly the rows `within` keeps, bounds included or
    not, repeated keys, composite keys, and bounds outside the keys."""
    rng = np.random.default_rng(7)
    table_def = _def(("a", "STRING"), ("b", "INT"))
    keys = sorted_rows(pa.table({"a": pa.array(rng.choice(["p", "q", "r"], 500)),
                                 "b": pa.array(rng.integers(-20, 20, 500), pa.int32())}), table_def)
    for lo_key, hi_key in [(None, None), (["q", 0], None), (None, ["q", 0]), (["p", -3], ["r", 5]), (["q", 5], ["q", 5]),
                           (["a", 0], ["z", 0]), (["z", 0], None), (None, ["a", 0]), (["q", 19], ["r", -20])]:
        lo = None if lo_key is None else keys_from_json([lo_key], table_def)
        hi = None if hi_key is None else keys_from_json([hi_key], table_def)
        start, stop = sorted_span(keys, lo, hi)
        inside = np.flatnonzero(within(keys, lo, hi))
        assert (start, stop) == ((int(inside[0]), int(inside[-1]) + 1) if len(inside) else (start, start)), (lo_key, hi_key)
        assert stop - start == len(inside)


def _file(name: str, first: int, last: int, rows: int, size: int) -> DataFile:
    return DataFile(name=name, rows=rows, bytes=size, bucket=None, first_key=[first], last_key=[last])


LONG_KEY = _def(("id", "LONG"))
MB = 1 << 20


def _sample(ids: np.ndarray) -> KeySample:
    return KeySample.exact(pa.table({"id": pa.array(ids, pa.int64())}))


def test_an_empty_table_is_cut_into_units_of_about_the_target_rows() -> None:
    # 100 bytes a row: a 1 MiB target holds ~10,486 rows
    plan = plan_units([], _sample(np.arange(100_000)), LONG_KEY, MB, bytes_per_row=100)
    assert 9 <= len(plan.units) <= 11
    assert plan.units[0].lo is None and plan.units[-1].hi is None
    assert all(a.hi == b.lo for a, b in zip(plan.units, plan.units[1:], strict=False)), "units tile the key space"
    sizes = np.bincount(plan.unit_of(pa.table({"id": pa.array(np.arange(100_000), pa.int64())})))
    assert sizes.max() <= 10_486 + 1 and sizes.sum() == 100_000


def test_appended_keys_get_units_of_their_own_and_touch_no_file() -> None:
    files = [_file(f"f{i}", i * 1000, i * 1000 + 999, 1000, MB) for i in range(10)]  # ~1,000 rows per MiB
    plan = plan_units(files, _sample(np.arange(20_000, 23_000)), LONG_KEY, MB)
    receiving = set(plan.unit_of(pa.table({"id": pa.array(np.arange(20_000, 23_000), pa.int64())})).tolist())
    assert len(receiving) == 3 and all(not plan.units[u].files for u in receiving)
    # a few new keys after the last file are routed to that file's unit (the task writes them to a new file)
    small = plan_units(files, _sample(np.arange(20_000, 20_010)), LONG_KEY, MB)
    unit = small.units[int(small.unit_of(pa.table({"id": pa.array([20_005], pa.int64())}))[0])]
    assert [f.name for f in unit.files] == ["f9"] and not unit.compact


def test_keys_inside_a_file_route_to_it_and_other_files_are_not_in_those_units() -> None:
    files = [_file(f"f{i}", i * 1000, i * 1000 + 999, 1000, MB) for i in range(10)]
    plan = plan_units(files, _sample(np.array([3500, 3501, 7999])), LONG_KEY, MB)
    units = plan.unit_of(pa.table({"id": pa.array([3500, 7999], pa.int64())}))
    assert [[f.name for f in plan.units[u].files] for u in units] == [["f3"], ["f7"]]


def test_small_neighbours_are_compacted_together_and_a_lone_small_file_is_not() -> None:
    big = [_file(f"big{i}", i * 1000, i * 1000 + 999, 1000, MB) for i in range(3)]
    small = [_file(f"s{i}", 3000 + i * 10, 3000 + i * 10 + 9, 10, 10_000) for i in range(TIER_FAN_IN + 1)]
    lone = [_file("big3", 4000, 4999, 1000, MB), _file("lone", 5000, 5009, 10, 10_000), _file("big4", 6000, 6999, 1000, MB)]
    plan = plan_units([*big, *small, *lone], _sample(np.array([], np.int64)), LONG_KEY, MB)
    compacting = [u for u in plan.units if u.compact]
    assert len(compacting) == 1 and [f.name for f in compacting[0].files] == [f.name for f in small[:TIER_FAN_IN]]
    three = plan_units([*big, *small[:TIER_FAN_IN - 1]], _sample(np.array([], np.int64)), LONG_KEY, MB)
    assert not any(u.compact for u in three.units)


def test_a_file_receiving_many_keys_is_cut_and_each_part_rewrites_its_share() -> None:
    files = [_file("f0", 0, 999_999, 1000, MB)]
    inserts = np.arange(1, 999_999, 100)  # ~10,000 new keys inside the file's range: ten times its rows
    plan = plan_units(files, _sample(inserts), LONG_KEY, MB)
    holding = [u for u in plan.units if u.files]
    assert len(holding) >= 5 and all(u.compact for u in holding), "each part reads the file and rewrites its share"
