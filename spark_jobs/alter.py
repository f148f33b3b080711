"""Row conversion for AlterTable: re-encode stored rows under a new table definition."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from destination.conversion import Failure, convert_column
from destination.table_model import DESTINATION_META, TableDef
from destination.type_mapping import arrow_schema, arrow_type


def _as_text(values: pa.Array) -> pa.Array:
    if pa.types.is_binary(values.type):
        return pa.array([None if v is None else v.decode("utf-8", errors="replace") for v in values.to_pylist()],
                        pa.string())
    return values.cast(pa.string())


def convert_table(old: pa.Table, old_def: TableDef, new_def: TableDef, version: int,
                  sources: dict[str, str] | None = None,
                  constants: dict[str, str | None] | None = None) -> tuple[pa.Table, int]:
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
    meta = old.column(DESTINATION_META).combine_chunks() if DESTINATION_META in old.column_names else pa.nulls(old.num_rows, pa.string())
    if failures:
        per_row: dict[int, list[dict[str, str]]] = {}
        for f in failures:
            per_row.setdefault(f.row, []).append(f.to_json())
        metas = meta.to_pylist()
        for row, changes in per_row.items():
            previous = json.loads(metas[row]) if metas[row] else {"changes": []}
            metas[row] = json.dumps({"version": version, "changes": previous.get("changes", []) + changes})
        meta = pa.array(metas, pa.string())
    arrays.append(meta)
    return pa.Table.from_arrays(arrays, schema=schema), len(failures)
