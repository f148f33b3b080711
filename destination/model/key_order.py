"""The order of a table's rows: by entity key (TableDef.entity_key), column by column, in each column's type.

Data files hold non-overlapping, sorted key ranges (docs/design/write-path.md "Placement"). This module is the one
owner of that order: sorting rows, a file's first and last key as JSON (kept in `_files.json`), and routing keys
to ranges. All of it uses Arrow's own sort, so the order the driver plans with is the order tasks write in.
Strings and binary compare as bytes, numbers and times by value, NaN after every number; a NULL key part (never
written by the write path) sorts last.

Key equality elsewhere is by key token (destination.model.keys): two keys with equal tokens are equal here too (tokens
are taken in the column's type, as the columns are sorted), so a boundary never falls between equal keys.
"""
from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model.table_model import START, TableDef
from destination.model.type_mapping import arrow_type

KeyJson = list[Any]  # one key: a JSON value per entity-key column
_FLAG = "\x00boundary"


def sort_keys(table_def: TableDef, with_start: bool = True) -> list[tuple[str, str]]:
    """Arrow sort keys of the stored order: the entity key, then (history tables) `_fivetran_start`."""
    names = [c.name for c in table_def.entity_key]
    if with_start and table_def.is_history:
        names.append(START)
    return [(name, "ascending") for name in names]


def sorted_rows(table: pa.Table, table_def: TableDef, extra: Sequence[str] = ()) -> pa.Table:
    """`table` in key order (then by the `extra` columns); a stable sort."""
    if table.num_rows <= 1:
        return table
    order = pc.sort_indices(table, sort_keys=[*sort_keys(table_def), *((c, "ascending") for c in extra)]).to_numpy()
    if np.array_equal(order, np.arange(len(order))):  # already in order (growing keys, ordered files): no copy
        return table
    return table.take(pa.array(order))


def key_columns_of(table: pa.Table, table_def: TableDef) -> pa.Table:
    """The entity-key columns of `table`, in their column types."""
    cols = table_def.entity_key
    return pa.table([table.column(c.name).cast(arrow_type(c)) for c in cols], names=[c.name for c in cols])


# ---- keys as JSON: exact, readable, and back in the column type ----------------------------------------------

def _to_json(value: Any, arrow: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return base64.b64encode(value).decode()
    if pa.types.is_decimal(arrow):
        return str(value)
    if pa.types.is_floating(arrow):
        return value if math.isfinite(value) else repr(value)  # JSON has no NaN/inf: "nan", "inf", "-inf"
    return value


def _temporal_int(arrow: pa.DataType) -> pa.DataType | None:
    if pa.types.is_date32(arrow):
        return pa.int32()
    if pa.types.is_timestamp(arrow) or pa.types.is_time64(arrow) or pa.types.is_date64(arrow):
        return pa.int64()
    if pa.types.is_time32(arrow):
        return pa.int32()
    return None


def keys_to_json(keys: pa.Table, table_def: TableDef) -> list[KeyJson]:
    """Each row of `keys` (entity-key columns) as a JSON list; times as integers in their unit."""
    columns: list[list[Any]] = []
    for col in table_def.entity_key:
        arrow = arrow_type(col)
        values = keys.column(col.name).cast(arrow)
        as_int = _temporal_int(arrow)
        if as_int is not None:
            columns.append(values.cast(as_int).to_pylist())
        else:
            columns.append([_to_json(v, arrow) for v in values.to_pylist()])
    return [list(row) for row in zip(*columns, strict=True)] if columns else []


def keys_from_json(keys: Sequence[KeyJson], table_def: TableDef) -> pa.Table:
    """The inverse of keys_to_json: a table of the entity-key columns in their column types."""
    arrays = []
    for i, col in enumerate(table_def.entity_key):
        arrow = arrow_type(col)
        values = [k[i] for k in keys]
        as_int = _temporal_int(arrow)
        if as_int is not None:
            arrays.append(pa.array(values, as_int).cast(arrow))
        elif pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
            arrays.append(pa.array([None if v is None else base64.b64decode(v) for v in values], arrow))
        elif pa.types.is_decimal(arrow):
            arrays.append(pa.array(values, pa.string()).cast(arrow))
        elif pa.types.is_floating(arrow):
            arrays.append(pa.array([float(v) if isinstance(v, str) else v for v in values], pa.float64()).cast(arrow))
        else:
            arrays.append(pa.array(values, arrow))
    return pa.table(arrays, names=[c.name for c in table_def.entity_key])


def first_and_last(table: pa.Table, table_def: TableDef, in_key_order: bool = False) -> tuple[KeyJson, KeyJson] | None:
    """The first and last entity key of `table`'s rows (None for no rows); `in_key_order`: they are sorted."""
    n = table.num_rows
    if not n:
        return None
    keys = key_columns_of(table, table_def)
    if in_key_order:
        ends = keys.take([0, n - 1])
    else:
        order = pc.sort_indices(keys, sort_keys=sort_keys(table_def, with_start=False))
        ends = keys.take([order[0].as_py(), order[n - 1].as_py()])
    first, last = keys_to_json(ends, table_def)
    return first, last


# ---- routing: which range a key falls in ---------------------------------------------------------------------

def count_bounds_below(keys: pa.Table, bounds: pa.Table, inclusive: bool = True) -> np.ndarray:
    """For each row of `keys`: how many of the sorted `bounds` are at or below it (inclusive) or strictly below
    it. With bounds b1 < b2 < …, the result is the index of the range [b_i, b_i+1) the key falls in (inclusive).

    One stable Arrow sort of keys and bounds together: a bound sorts before an equal key when inclusive, after it
    otherwise; the running count of bounds at each key's place is the answer."""
    n, b = keys.num_rows, bounds.num_rows
    if b == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    names = keys.column_names
    flag_of_bound, flag_of_key = (0, 1) if inclusive else (1, 0)
    both = pa.concat_tables([
        bounds.select(names).cast(keys.schema).append_column(_FLAG, pa.array(np.full(b, flag_of_bound, np.int8))),
        keys.append_column(_FLAG, pa.array(np.full(n, flag_of_key, np.int8)))])
    order = pc.sort_indices(both, sort_keys=[*((c, "ascending") for c in names), (_FLAG, "ascending")]).to_numpy()
    is_bound = order < b
    below = np.cumsum(is_bound)
    out = np.empty(n, dtype=np.int64)
    out[order[~is_bound] - b] = below[~is_bound]
    return out


def within(keys: pa.Table, lo: pa.Table | None, hi: pa.Table | None, hi_inclusive: bool = False) -> np.ndarray:
    """Whether each key is in [lo, hi) ([lo, hi] when hi_inclusive); None is unbounded."""
    inside = np.ones(keys.num_rows, dtype=bool)
    if lo is not None:
        inside &= count_bounds_below(keys, lo) == 1
    if hi is not None:
        inside &= count_bounds_below(keys, hi, inclusive=not hi_inclusive) == 0
    return inside


def sorted_span(keys: pa.Table, lo: pa.Table | None, hi: pa.Table | None) -> tuple[int, int]:
    """For keys in key order: the rows [start, stop) whose keys are in [lo, hi), found by bisection (a sorted run's
    slice of a range is one contiguous span: taking it as a slice copies nothing, where `within` sorts every key
    with the bound and a filter copies every row)."""
    def first(at_or_above: Callable[[pa.Table], bool]) -> int:
        a, b = 0, keys.num_rows
        while a < b:
            m = (a + b) // 2
            if at_or_above(keys.slice(m, 1)):
                b = m
            else:
                a = m + 1
        return a
    start = 0 if lo is None else first(lambda key: bool(within(key, lo, None)[0]))
    stop = keys.num_rows if hi is None else first(lambda key: not within(key, None, hi)[0])
    return start, max(start, stop)
