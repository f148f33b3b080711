"""Row conversion for AlterTable: re-encode stored rows under a new table definition."""
from __future__ import annotations

import decimal
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model import row_meta
from destination.model.conversion import Failure, convert_column
from destination.model.keys import key_tokens
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema, arrow_type


def _as_text(values: pa.Array) -> pa.Array:
    if pa.types.is_binary(values.type):
        return pa.array([None if v is None else v.decode("utf-8", errors="replace") for v in values.to_pylist()],
                        pa.string())
    return values.cast(pa.string())


def convert_table(old: pa.Table, old_def: TableDef, new_def: TableDef, version: int,
                  sources: Mapping[str, str] | None = None,
                  constants: Mapping[str, str | None] | None = None) -> tuple[pa.Table, int]:
    """Columns of new_def taken from old by name (or from `sources[name]`, for renames and copies);
    `constants[name]` sets every row to a text value converted to the column type (None: NULL);
    new columns are NULL; changed types are converted per value."""
    schema = arrow_schema(new_def.columns)
    failures: list[Failure] = []
    arrays: list[pa.Array] = []
    sources = sources or {}
    constants = constants or {}
    for col in new_def.columns:
        if col.name in constants:
            text = pa.array([constants[col.name]] * old.num_rows, pa.string())
            typed, col_failures = convert_column(text, col)
            arrays.append(typed)
            failures.extend(col_failures)
            continue
        source = sources.get(col.name, col.name)
        if old_def.column(source) is None or source not in old.column_names:
            arrays.append(pa.nulls(old.num_rows, arrow_type(col)))
            continue
        values = old.column(source).combine_chunks()
        target = arrow_type(col)
        if values.type == target:
            arrays.append(values)
            continue
        try:
            arrays.append(pc.cast(values, target))  # safe cast: widening, exact conversions
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        typed, col_failures = convert_column(_as_text(values), col)
        arrays.append(typed)
        failures.extend(col_failures)
    meta = old.column(DESTINATION_META).combine_chunks() if DESTINATION_META in old.column_names \
        else pa.nulls(old.num_rows, pa.string())
    by_row: dict[int, list[Failure]] = {}
    for f in failures:
        by_row.setdefault(f.row, []).append(f)
    meta = row_meta.add_changes(meta, by_row, version=version)
    arrays.append(meta)
    return pa.Table.from_arrays(arrays, schema=schema), len(failures)


# ---- AlterTable's check before a lossy type change (destination/model/type_changes.py) --------------------------

TEXT_TYPES = ("STRING", "XML", "JSON")  # a text value that converts is kept, except numbers: compared as numbers
NUMBER_TYPES = ("SHORT", "INT", "LONG", "DECIMAL", "FLOAT", "DOUBLE")


def _same(before: pa.Array, back: pa.Array) -> np.ndarray:
    """Per row: `back` equals `before` (NaN equals NaN; NULL equals nothing)."""
    equal = pc.fill_null(pc.equal(before, back), False)
    if pa.types.is_floating(before.type) and pa.types.is_floating(back.type):
        equal = pc.or_(equal, pc.fill_null(pc.and_(pc.is_nan(before), pc.is_nan(back)), False))
    return equal.to_numpy(zero_copy_only=False)


def _restored(before: pa.Array, after: pa.Array, old_col: ColumnDef) -> np.ndarray:
    """Per row: `after` converts back to `before`, by a cast (bool ⇄ int, timestamps) or through its text,
    parsed as the old type (float32's shortest text is 100.45 again as a double)."""
    restored = np.zeros(len(before), dtype=bool)
    try:
        restored |= _same(before, pc.cast(after, before.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    try:
        back, _failures = convert_column(_as_text(after), old_col)
        restored |= _same(before, back)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return restored


def _number(text: str | None) -> decimal.Decimal | None:
    try:
        return decimal.Decimal(text.strip()) if text is not None else None
    except decimal.InvalidOperation:
        return None


def _same_number(before: pa.Array, after: pa.Array) -> np.ndarray:
    """Per row: the text `before` and the number `after` are the same number (`1.5` and 1.50 are; `1.234`
    and 1.23, rounded to a DECIMAL's scale, are not). Per value in Python: only for a checked column."""
    shown = after.cast(pa.string()).to_pylist()
    same = np.zeros(len(before), dtype=bool)
    for row, (text, number) in enumerate(zip(before.to_pylist(), shown, strict=True)):
        a, b = _number(text), _number(number)
        same[row] = a is not None and b is not None and (a == b or (a.is_nan() and b.is_nan()))
    return same


def lost_values(old: pa.Table, old_def: TableDef, new_def: TableDef, columns: list[str]) -> dict[str, tuple[int, int]]:
    """column → (values that would not survive the change to new_def, index of the first such row), for the
    columns that lose any. A value survives when it converts and converts back to itself (text: converts, and
    to a number, the same number)."""
    old_part = old_def.with_columns([old_def.column(c) for c in columns])  # type: ignore[misc]
    new_part = new_def.with_columns([new_def.column(c) for c in columns])  # type: ignore[misc]
    converted, _failures = convert_table(old.select(columns), old_part, new_part, 0)
    lost: dict[str, tuple[int, int]] = {}
    for name in columns:
        before = old.column(name).combine_chunks()
        after = converted.column(name).combine_chunks()
        missing = pc.and_(before.is_valid(), after.is_null()).to_numpy(zero_copy_only=False)
        old_col = old_def.column(name)
        assert old_col is not None
        present = pc.and_(before.is_valid(), after.is_valid()).to_numpy(zero_copy_only=False)
        if old_col.type not in TEXT_TYPES:
            missing = missing | (present & ~_restored(before, after, old_col))
        elif new_def.column(name).type in NUMBER_TYPES:  # type: ignore[union-attr]
            missing = missing | (present & ~_same_number(before, after))
        count = int(missing.sum())
        if count:
            lost[name] = (count, int(np.argmax(missing)))
    return lost


def key_text(table: pa.Table, row: int, key_columns: list[str]) -> str:
    """One row's key as `name=value, …`, for the user's Task (never for logs)."""
    return ", ".join(f"{name}={table.column(name)[row].as_py()!r}" for name in key_columns)


def colliding_keys(table: pa.Table, key_columns: list[ColumnDef]) -> tuple[int, int]:
    """(rows whose key another row also has, index of one of them); (0, -1) when every key is unique."""
    tokens = key_tokens(table, key_columns)
    counts = pc.value_counts(tokens)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    if not len(repeated):
        return 0, -1
    first = pc.index(tokens, repeated.field("values")[0]).as_py()
    return int(pc.sum(repeated.field("counts")).as_py()), int(first)
