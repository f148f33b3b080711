"""Every Fivetran DataType mapped to Arrow/Parquet and to the records schema v1, in one place.

| Fivetran        | Arrow / Parquet                 | records schema v1                    |
|-----------------|---------------------------------|--------------------------------------|
| BOOLEAN         | bool                            | boolean                              |
| SHORT/INT/LONG  | int16 / int32 / int64           | integer, min/max of the width        |
| DECIMAL(p,s)    | decimal128(p,s), p ≤ 38         | decimal, fixed_precision/fixed_scale |
|                 | decimal256(p,s), 38 < p ≤ 76    |                                      |
| FLOAT / DOUBLE  | float32 / float64               | decimal, fp 32/23 or 64/53           |
| NAIVE_DATE      | date32                          | date                                 |
| NAIVE_DATETIME  | timestamp[us] (no zone)         | datetime                             |
| UTC_DATETIME    | timestamp[us, UTC]              | datetimetz                           |
| NAIVE_TIME      | time64[us]                      | time                                 |
| BINARY          | binary (decoded bytes)          | string (raw bytes in Parquet)        |
| STRING/JSON/XML | string                          | string                               |

The exact Fivetran type is kept in each field's `sql/fivetran` representation so
DescribeTable round-trips types and DECIMAL parameters.

DECIMAL is never narrowed: precision above 38 keeps every digit as decimal256 (Parquet
FIXED_LEN_BYTE_ARRAY; pyarrow and pandas read it, Redshift and Spark stop at 38 digits);
above 76 no Parquet reader holds the value exactly, and the request is refused.
A scale above the precision (DECIMAL(60,70)) keeps its Oracle meaning: at most p
significant digits, all after the point (|x| < 10^(p-s)); it is stored as
decimal(s,s), which holds every such value, and described as declared.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from destination.model.table_model import DEFAULT_DECIMAL, DESTINATION_META, MAX_DECIMAL_PRECISION, SYNCED, ColumnDef
from destination.runtime.errors import BadRequest

_ARROW_SIMPLE: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "SHORT": pa.int16(),
    "INT": pa.int32(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "NAIVE_DATE": pa.date32(),
    "NAIVE_DATETIME": pa.timestamp("us"),
    "UTC_DATETIME": pa.timestamp("us", tz="UTC"),
    "NAIVE_TIME": pa.time64("us"),
    "BINARY": pa.binary(),
    "XML": pa.string(),
    "STRING": pa.string(),
    "JSON": pa.string(),
}

_INT_RANGES = {"SHORT": (-(2**15), 2**15 - 1), "INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}
_FLOAT_BITS = {"FLOAT": (32, 23), "DOUBLE": (64, 53)}
_RECORDS_TYPE = {
    "BOOLEAN": "boolean", "SHORT": "integer", "INT": "integer", "LONG": "integer", "DECIMAL": "decimal",
    "FLOAT": "decimal", "DOUBLE": "decimal", "NAIVE_DATE": "date", "NAIVE_DATETIME": "datetime",
    "UTC_DATETIME": "datetimetz", "NAIVE_TIME": "time", "BINARY": "string", "XML": "string",
    "STRING": "string", "JSON": "string",
}


def normalize_column(col: ColumnDef) -> ColumnDef:
    """Validate the type and the DECIMAL parameters (defaults filled in; never narrowed: see the module doc)."""
    if col.type not in _RECORDS_TYPE:
        raise BadRequest(f"column {col.name!r}: unsupported data type {col.type!r}")
    if col.type != "DECIMAL":
        return ColumnDef(col.name, col.type, col.primary_key, None, None, col.string_byte_length)
    precision = col.precision or DEFAULT_DECIMAL[0]
    scale = col.scale if col.scale is not None else DEFAULT_DECIMAL[1]
    if max(precision, scale) > MAX_DECIMAL_PRECISION:
        raise BadRequest(f"column {col.name!r}: DECIMAL({precision},{scale}) needs more than the "
                         f"{MAX_DECIMAL_PRECISION} digits Parquet holds exactly; use STRING for such values")
    return ColumnDef(col.name, col.type, col.primary_key, precision, scale, None)


def decimal_storage(col: ColumnDef) -> tuple[int, int]:
    """(precision, scale) of a DECIMAL column's Arrow type: a scale above the precision needs `scale` digits."""
    precision = col.precision or DEFAULT_DECIMAL[0]
    scale = col.scale if col.scale is not None else DEFAULT_DECIMAL[1]
    return max(precision, scale), scale


def arrow_type(col: ColumnDef) -> pa.DataType:
    if col.type == "DECIMAL":
        precision, scale = decimal_storage(col)
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    try:
        return _ARROW_SIMPLE[col.type]
    except KeyError:
        raise BadRequest(f"column {col.name!r}: unsupported data type {col.type!r}") from None


def arrow_schema(columns: list[ColumnDef] | tuple[ColumnDef, ...], with_meta: bool = True) -> pa.Schema:
    """The Parquet schema of a data file: table columns in order, then `_destination_meta`."""
    fields = [pa.field(c.name, arrow_type(c), nullable=True) for c in columns]
    if with_meta:
        fields.append(pa.field(DESTINATION_META, pa.string(), nullable=True))
    return pa.schema(fields)


def records_field(col: ColumnDef, index: int, single_key: bool) -> dict[str, Any]:
    """One `fields` entry of `_schema.json` (records schema v1)."""
    rtype = _RECORDS_TYPE[col.type]
    constraints: dict[str, Any] = {"required": bool(col.primary_key or col.name == SYNCED)}
    if col.primary_key and single_key:
        constraints["unique"] = True
    if col.type in _INT_RANGES:
        lo, hi = _INT_RANGES[col.type]
        constraints["min"], constraints["max"] = str(lo), str(hi)
    elif col.type == "DECIMAL":
        constraints["fixed_precision"], constraints["fixed_scale"] = decimal_storage(col)
    elif col.type in _FLOAT_BITS:
        constraints["fp_total_bits"], constraints["fp_significand_bits"] = _FLOAT_BITS[col.type]
    elif col.string_byte_length is not None and rtype == "string":
        constraints["max_length_bytes"] = col.string_byte_length
    return {
        "index": index,
        "type": rtype,
        "constraints": constraints,
        "representations": {"origin": {"rep_type": "sql/fivetran", "col_ddl": col.ddl()}},
    }


def meta_records_field(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "type": "string",
        "constraints": {"required": False},
        "representations": {"origin": {"rep_type": "sql/fivetran", "col_ddl": "DESTINATION_META"}},
    }
